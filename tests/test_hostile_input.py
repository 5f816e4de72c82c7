"""Hostile and damaged input that used to crash mqtool (issue 12): each is now a finding or a
one-line error, never an uncaught exception, a traceback or a 2 GiB allocation."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURE_STORE, run_mqtool
from mqtool.errors import MqtoolError
from mqtool.formats import codecs
from mqtool.inspect.info import _config_summary
from mqtool.inspect.small_files import config_dict, small_file_dict
from mqtool.query.ids import uniq_key_windows
from mqtool.store import read_fastjson

UNIQ_KEY = "7F0000010F2C18B4AAC24C3EBC650000"
HUGE_NUMBER = "9" * 5000


@pytest.fixture
def store(tmp_path) -> Path:
    dest = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", dest)
    return dest


def assert_one_line_or_ok(proc, allowed=(0, 1, 2)):
    assert proc.returncode in allowed, proc.stderr
    assert "Traceback" not in proc.stderr
    if proc.returncode == 2:
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("mqtool: error:"), proc.stderr


def test_a_5000_digit_pid_in_the_abort_file(store):
    (store / "abort").write_text(HUGE_NUMBER)
    assert small_file_dict(store / "abort", "abort")["pid"] is None
    assert_one_line_or_ok(run_mqtool("dump", store / "abort"), (0,))
    assert_one_line_or_ok(run_mqtool("info", store, "--json"), (0, 1))


def test_a_5000_digit_number_in_a_config_file(store):
    (store / "config").mkdir(exist_ok=True)
    (store / "config" / "topics.json").write_text('{"dataVersion": ' + HUGE_NUMBER + "}")
    with pytest.raises(MqtoolError):
        config_dict(store / "config" / "topics.json")
    assert_one_line_or_ok(run_mqtool("dump", store / "config" / "topics.json"), (2,))
    assert_one_line_or_ok(run_mqtool("info", store, "--json"), (0, 1))


def test_a_5000_digit_unquoted_key_in_a_config_file(store):
    # fastjson's unquoted integer keys: one too long for any int is a decoding failure (the
    # broker falls back to the .bak, here missing: an empty table), never a traceback
    (store / "config").mkdir(exist_ok=True)
    path = store / "config" / "consumerOffset.json"
    path.write_text('{"offsetTable":{"T@g":{' + HUGE_NUMBER + ":1}}}")
    (store / "config" / "consumerOffset.json.bak").unlink(missing_ok=True)
    assert_one_line_or_ok(run_mqtool("dump", path), (2,))
    proc = run_mqtool("info", store, "--json")
    assert_one_line_or_ok(proc, (0, 1))
    assert json.loads(proc.stdout)["config"]["consumerOffset.json"]["outcome"] == "empty"
    assert_one_line_or_ok(run_mqtool("consumers", store, "--json"), (0, 1))


def test_deeply_nested_config_json(store):
    path = store / "config" / "topics.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError):
        read_fastjson(path)
    with pytest.raises(MqtoolError):
        config_dict(path)
    assert_one_line_or_ok(run_mqtool("dump", path), (2,))
    assert_one_line_or_ok(run_mqtool("info", store, "--json"), (0, 1))


@pytest.mark.parametrize("data", [
    {"topicConfigTable": 5}, {"topicConfigTable": "x"}, {"offsetTable": [1, 2]},
    {"offsetTable": {HUGE_NUMBER: 1, "-": 2, "3": 4}}, {"subscriptionGroupTable": True},
    [1, 2, 3], "text", None, 12,
])
@pytest.mark.parametrize("name", ["topics.json", "consumerOffset.json", "delayOffset.json",
                                  "subscriptionGroup.json", "other.json"])
def test_config_values_of_the_wrong_json_type(name, data):
    summary = _config_summary(name, data)
    json.dumps(summary)
    if name == "delayOffset.json" and isinstance(data, dict) and "offsetTable" in data \
            and isinstance(data["offsetTable"], dict):
        assert len(summary["levels"]) == 3


def test_wrong_types_through_info(store):
    config = store / "config"
    config.mkdir(exist_ok=True)
    (config / "topics.json").write_text('{"topicConfigTable": 7}')
    (config / "consumerOffset.json").write_text('{"offsetTable": [1]}')
    (config / "delayOffset.json").write_text('{"offsetTable": {"%s": 3}}' % HUGE_NUMBER[:4000])
    proc = run_mqtool("info", store, "--json")
    assert_one_line_or_ok(proc, (0, 1))
    configs = json.loads(proc.stdout)["config"]
    assert "not an object" in configs["topics.json"]["error"]


@pytest.mark.parametrize("now_ms", [9_000_000_000_000_000, -9_000_000_000_000_000, 2**63 - 1,
                                    -(2**63), 253402300799999, 0])
def test_uniq_key_against_out_of_range_store_times(now_ms):
    info = codecs.decode_uniq_key(UNIQ_KEY, now_ms=now_ms)
    assert isinstance(info["approx_time_ms"], int)
    assert isinstance(uniq_key_windows(UNIQ_KEY, min(now_ms, 0), now_ms), list)


@pytest.mark.usefixtures("walk_path")
def test_a_commitlog_file_name_past_int64(store):
    commitlog = store / "commitlog"
    last = sorted(commitlog.iterdir())[-1]
    shutil.copy(last, commitlog / ("9" * 20))
    proc = run_mqtool("verify", store, "--json")
    assert_one_line_or_ok(proc, (1, 2))


def _run_limited(*args):
    # a 2 GiB allocation (or a map of the whole 2 GiB file) cannot succeed in this headroom
    proc = run_mqtool(*args, check_no_traceback=False, memory_headroom=1280 << 20)
    assert "MemoryError" not in proc.stderr and "Unable to allocate" not in proc.stderr
    assert "Cannot allocate memory" not in proc.stderr
    return proc


@pytest.mark.usefixtures("walk_path")
def test_a_2_gib_sparse_consume_queue_file(store):
    queue_dir = next(p for p in sorted((store / "consumequeue").rglob("*")) if p.is_file()).parent
    victim = sorted(queue_dir.iterdir())[0]
    with open(victim, "r+b") as fh:
        fh.truncate(2 << 30)
    if victim.stat().st_blocks * 512 > 64 << 20:
        pytest.skip("the file system does not keep sparse files sparse")
    rel = victim.relative_to(store).as_posix()
    proc = _run_limited("verify", store, "--json")
    assert_one_line_or_ok(proc, (1,))
    codes = {f["code"] for f in json.loads(proc.stdout)["findings"] if f.get("file") == rel}
    assert "CQ_FILE_SIZE" in codes             # an absurd size is a finding
    assert_one_line_or_ok(_run_limited("recover", store, "--dry-run"), (0, 1, 2))
    assert_one_line_or_ok(_run_limited("info", store, "--json"), (0, 1))
    proc = _run_limited("dump", victim, "--json")
    assert_one_line_or_ok(proc, (0, 1))
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["record_type"] == "consumequeue/end"
    assert last["units_after_end"] == (2 << 30) // 20 - last["file_offset"] // 20 - 1


def test_dump_streams_a_2_gib_sparse_queue_file_with_data_at_its_end(tmp_path):
    """Units at the very end of a 2 GiB sparse file: dump reads it a chunk at a time."""
    queue = tmp_path / "consumequeue" / "T" / "0"
    queue.mkdir(parents=True)
    path = queue / "00000000000000000000"
    with open(path, "wb") as fh:
        fh.write(bytes.fromhex("0000000000000000" "000000aa" "0000000000000001"))   # unit 0
        fh.seek((2 << 30) // 20 * 20 - 40)        # the last two whole units
        fh.write(bytes.fromhex("0000000000001000" "000000bb" "0000000000000002") * 2)
    if path.stat().st_blocks * 512 > 64 << 20:
        pytest.skip("the file system does not keep sparse files sparse")
    proc = _run_limited("dump", path, "--json")
    assert_one_line_or_ok(proc, (0, 1))
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["record_type"] for r in rows] == ["consumequeue/unit", "consumequeue/end"]
    assert rows[1]["file_offset"] == 20
    assert rows[1]["units_after_end"] == (2 << 30) // 20 - 2
    assert rows[1]["nonzero_units_after_end"] == 2


def _queue_file(store: Path) -> Path:
    return sorted((store / "consumequeue" / "TopicTest" / "0").iterdir())[0]


def test_a_2_gib_sparse_queue_file_with_units_at_its_end(store):
    """The broker maps only the geometry's bytes of a queue file; units far past them, at the
    end of a 2 GiB sparse file, are reported without reading the file whole."""
    victim = _queue_file(store)
    unit = bytes.fromhex("0000000000001000" "000000bb" "0000000000000002")
    with open(victim, "r+b") as fh:
        fh.seek((2 << 30) // 20 * 20 - 40)
        fh.write(unit * 2)
        fh.truncate(2 << 30)
    if victim.stat().st_blocks * 512 > 64 << 20:
        pytest.skip("the file system does not keep sparse files sparse")
    rel = victim.relative_to(store).as_posix()
    proc = _run_limited("verify", store, "--json")
    assert_one_line_or_ok(proc, (1,))
    sizes = [f["message"] for f in json.loads(proc.stdout)["findings"]
             if f.get("file") == rel and f["code"] == "CQ_FILE_SIZE"]
    assert len(sizes) == 1 and "2 non-zero units lie past the 6000 bytes" in sizes[0], sizes
    assert_one_line_or_ok(_run_limited("verify", store, "--json", "--workers", "2"), (1,))
    assert_one_line_or_ok(_run_limited("recover", store, "--dry-run"), (0, 1, 2))
    assert_one_line_or_ok(_run_limited("info", store, "--json"), (0, 1))
    proc = _run_limited("dump", victim, "--json")
    assert_one_line_or_ok(proc, (0, 1))
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["record_type"] == "consumequeue/end"
    assert last["nonzero_units_after_end"] == 2


def _run_measured(*args) -> tuple[int, subprocess.CompletedProcess]:
    """Peak resident memory (KiB) of one mqtool run, and its result."""
    import os
    child = subprocess.Popen([sys.executable, "-m", "mqtool", "--no-progress", *map(str, args)],
                             stdout=open(os.devnull, "w"), stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(child.pid, 0)
    err = child.stderr.read()
    child.stderr.close()
    child.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss, subprocess.CompletedProcess(args, child.returncode, "", err)


@pytest.mark.parametrize("command", [("verify",), ("info", "--json"), ("recover", "--dry-run")])
def test_a_fully_written_queue_file_past_the_geometry_is_read_in_bounded_memory(store, command):
    """64 MiB of non-zero units in a queue file whose geometry is 6,000 bytes: only the
    geometry's part is the broker's, and no command holds the whole file in memory."""
    baseline, proc = _run_measured(command[0], store, *command[1:])
    assert_one_line_or_ok(proc, (0, 1))
    victim = _queue_file(store)
    unit = bytes.fromhex("0000000000001000" "000000bb" "0000000000000002")
    with open(victim, "r+b") as fh:
        fh.seek(0, 2)
        block = unit * ((1 << 20) // 20)
        while fh.tell() < 64 << 20:
            fh.write(block)
    peak, proc = _run_measured(command[0], store, *command[1:])
    assert_one_line_or_ok(proc, (0, 1))
    assert peak - baseline < 24 << 10, f"{(peak - baseline) >> 10} MiB more than the clean store"


def test_a_lone_2_gib_queue_file_with_units_at_its_end(store):
    """The store's only queue file is 2 GiB with units at its end: the geometry inferred from
    the file sizes is the file itself, so bounding reads by it bounds nothing."""
    for queue_dir in sorted((store / "consumequeue").iterdir()):
        if queue_dir.name != "TopicTest":
            shutil.rmtree(queue_dir)
    for queue_dir in sorted((store / "consumequeue" / "TopicTest").iterdir()):
        if queue_dir.name != "0":
            shutil.rmtree(queue_dir)
    victim = _queue_file(store)
    with open(victim, "r+b") as fh:
        fh.seek((2 << 30) // 20 * 20 - 40)
        fh.write(bytes.fromhex("0000000000001000" "000000bb" "0000000000000002") * 2)
        fh.truncate(2 << 30)
    if victim.stat().st_blocks * 512 > 64 << 20:
        pytest.skip("the file system does not keep sparse files sparse")
    (store / "config" / "consumerOffset.json").write_text(
        '{"offsetTable": {"TopicTest@G": {0: 3}}}')
    proc = _run_limited("verify", store, "--json")
    assert_one_line_or_ok(proc, (1,))
    report = json.loads(proc.stdout)
    assert report["geometry"]["cq_units_per_file"] == 300_000     # the broker's default
    rel = victim.relative_to(store).as_posix()
    sizes = [f["message"] for f in report["findings"]
             if f.get("file") == rel and f["code"] == "CQ_FILE_SIZE"]
    assert len(sizes) == 1 and "expected the broker's default 6000000" in sizes[0], sizes
    assert "2 non-zero units lie past the 6000000 bytes" in sizes[0]
    assert_one_line_or_ok(_run_limited("recover", store, "--dry-run"), (0, 1, 2))
    proc = _run_limited("info", store, "--json")
    assert_one_line_or_ok(proc, (0, 1))
    assert json.loads(proc.stdout)["geometry"]["cq_units_per_file_source"] == "default"
    proc = _run_limited("consumers", store, "--json")
    assert_one_line_or_ok(proc, (0, 1))
    assert "TopicTest" in proc.stdout
    for ask in (("--offset", "5"), ("--offset", "107374181"), ("--time", "0")):
        assert_one_line_or_ok(_run_limited("query", store, "--topic", "TopicTest", "--queue", "0",
                                           *ask, "--json"), (0, 1, 2))
    proc = _run_limited("dump", victim, "--json")
    assert_one_line_or_ok(proc, (0, 1))
    assert json.loads(proc.stdout.strip().splitlines()[-1])["nonzero_units_after_end"] == 2
    # a geometry stated as big as the file: every reader still works a chunk at a time
    proc = _run_limited("verify", store, "--json", "--cq-units", str((2 << 30) // 20))
    assert_one_line_or_ok(proc, (1,))
    assert_one_line_or_ok(_run_limited("info", store, "--json", "--cq-units",
                                       str((2 << 30) // 20)), (0, 1))


def test_two_2_gb_queue_files_make_a_huge_geometry_that_is_still_read_in_chunks(store):
    """Two queue files of 2,000,000,000 bytes agree on a geometry a broker can map (100 million
    units per file): it is trusted, and every reader still holds one chunk of units at a time."""
    for queue_dir in sorted((store / "consumequeue").iterdir()):
        if queue_dir.name != "TopicTest":
            shutil.rmtree(queue_dir)
    for queue_dir in sorted((store / "consumequeue" / "TopicTest").iterdir()):
        if queue_dir.name != "0":
            shutil.rmtree(queue_dir)
    size = 2_000_000_000
    first = _queue_file(store)
    with open(first, "r+b") as fh:
        fh.truncate(size)
    second = first.parent / f"{size:020d}"
    with open(second, "wb") as fh:
        fh.seek(size - 40)
        fh.write(bytes.fromhex("0000000000001000" "000000bb" "0000000000000002") * 2)
    if (first.stat().st_blocks + second.stat().st_blocks) * 512 > 64 << 20:
        pytest.skip("the file system does not keep sparse files sparse")
    (store / "abort").write_text("")
    proc = _run_limited("verify", store, "--json")
    assert_one_line_or_ok(proc, (1,))
    report = json.loads(proc.stdout)
    assert report["geometry"]["cq_units_per_file"] == size // 20
    codes = {f["code"] for f in report["findings"] if f.get("file", "").startswith("consumequeue/")}
    assert "CQ_DANGLING" in codes and "CQ_FILE_SIZE" not in codes
    assert_one_line_or_ok(_run_limited("info", store, "--json"), (0, 1))
    assert_one_line_or_ok(_run_limited("consumers", store, "--json"), (0, 1))
    assert_one_line_or_ok(_run_limited("query", store, "--topic", "TopicTest", "--queue", "0",
                                       "--time", "0", "--json"), (0, 1, 2))
    assert_one_line_or_ok(_run_limited("recover", store, "--dry-run"), (0, 1))
