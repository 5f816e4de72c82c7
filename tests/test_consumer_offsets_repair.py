"""recover --consumer-offsets: keep leaves consumerOffset.json as the broker would and says what its
start will do; clamp rewrites offsets past the recovered queue ends (backed up, undoable)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import run_mqtool
from test_repair import make_store, snapshot

OFFSET_ENTRY = re.compile(rb'"([^"@]+)@([^"]+)":\{([^}]*)\}')


def committed_offsets(path: Path) -> dict[tuple[str, str, int], int]:
    """(topic, group, queue) -> offset, read with a regex, not with mqtool's own parser."""
    out = {}
    for topic, group, body in OFFSET_ENTRY.findall(path.read_bytes()):
        for queue, offset in re.findall(rb"(\d+):(-?\d+)", body):
            out[topic.decode(), group.decode(), int(queue)] = int(offset)
    return out


def queue_end(store: Path, topic: str, queue_id: int) -> int:
    """The queue's max offset as the broker loads it: the last file's base plus its units up to
    the first all-zero one."""
    folder = store / "consumequeue" / topic / str(queue_id)
    files = sorted(folder.iterdir()) if folder.is_dir() else []
    if not files:
        return 0
    last = files[-1].read_bytes()
    units = next((i for i in range(0, len(last), 20) if not any(last[i:i + 20])), len(last)) // 20
    return int(files[-1].name) // 20 + units


@pytest.fixture
def damaged(tmp_path) -> Path:
    store = make_store(tmp_path / "store", "-n", "600", "--seed", "4", "--crash",
                       "--consumer-group", "G1:0", "--consumer-group", "G2:5")
    proc = run_mqtool("fixture", "damage", store, "--kind", "bit-flip", "--seed", "2")
    assert proc.returncode == 0, proc.stderr
    return store


def test_keep_leaves_the_offsets_and_says_what_the_start_does(damaged):
    before = (damaged / "config" / "consumerOffset.json").read_bytes()
    proc = run_mqtool("recover", damaged)
    assert proc.returncode == 1, proc.stderr            # the bit flip costs messages
    assert (damaged / "config" / "consumerOffset.json").read_bytes() == before
    assert "committed consumer offset(s) end up past their queue's end" in proc.stdout


def test_clamp_sets_offsets_past_the_end_to_it_and_undo_restores(damaged):
    original = snapshot(damaged)
    offsets = committed_offsets(damaged / "config" / "consumerOffset.json")
    bak = (damaged / "config" / "consumerOffset.json.bak").read_bytes()
    plan = run_mqtool("recover", "--dry-run", "--consumer-offsets", "clamp", damaged)
    assert "config/consumerOffset.json" in plan.stdout and snapshot(damaged) == original
    proc = run_mqtool("recover", "--consumer-offsets", "clamp", damaged)
    assert proc.returncode == 1, proc.stderr
    clamped = committed_offsets(damaged / "config" / "consumerOffset.json")
    assert clamped.keys() == offsets.keys()
    moved = 0
    for (topic, group, queue_id), offset in offsets.items():
        end = queue_end(damaged, topic, queue_id)
        assert clamped[topic, group, queue_id] == min(offset, end), (topic, group, queue_id)
        moved += offset > end
    assert moved
    # the .bak is left alone (the broker rewrites it from the main file on its next persist)
    assert (damaged / "config" / "consumerOffset.json.bak").read_bytes() == bak
    backup = sorted((damaged / ".mqtool-backup").iterdir())[-1]
    assert run_mqtool("undo", backup).returncode == 0
    assert snapshot(damaged) == original


def test_clamp_restores_an_unreadable_offsets_file_from_its_bak(tmp_path):
    store = make_store(tmp_path / "store", "-n", "300", "--seed", "5",
                       "--consumer-group", "G1:3")
    config = store / "config"
    (config / "consumerOffset.json").write_bytes(b"")           # what an OS crash leaves
    proc = run_mqtool("recover", "--consumer-offsets", "clamp", store)
    assert proc.returncode == 0, proc.stderr
    assert (config / "consumerOffset.json").read_bytes() == \
        (config / "consumerOffset.json.bak").read_bytes()


def test_an_unknown_mode_is_a_usage_error(tmp_path):
    store = make_store(tmp_path / "store", "-n", "50")
    proc = run_mqtool("recover", "--consumer-offsets", "sideways", store)
    assert proc.returncode == 2 and proc.stderr.startswith("mqtool: error:")
