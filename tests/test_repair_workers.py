"""recover --workers N: the scan runs in worker processes ahead of the dispatch, and the store it
leaves is the same, byte for byte, as with one process."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import SHARED_STORES, run_mqtool

_CHECKPOINT_TIMESTAMPS = 24


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".mqtool-backup" not in p.parts}


def _recover(source: Path, work: Path, workers: int, *extra: str) -> tuple[dict, dict]:
    store = work / f"w{workers}"
    shutil.copytree(source, store)
    proc = run_mqtool("--no-progress", "recover", "--json", "--workers", str(workers), *extra,
                      str(store))
    assert proc.returncode in (0, 1), proc.stderr
    result = json.loads(proc.stdout)
    for key in ("backup", "store"):
        result.pop(key, None)
    return _files(store), result


def _assert_same_for_any_workers(source: Path, work: Path, *extra: str) -> dict:
    one_files, one = _recover(source, work, 1, *extra)
    for workers in (2, 3):
        files, result = _recover(source, work, workers, *extra)
        assert files.keys() == one_files.keys()
        for rel, data in files.items():
            assert data == one_files[rel], f"{rel} differs with --workers {workers}"
        assert result == one
    return one


def test_forged_crashed_store_with_damage(tmp_path, mqtool):
    """Several 1 MiB files, the checkpoint zeroed (recovery from file 0, everything
    re-indexed), a flipped body byte in the fourth file: the scan stops there."""
    source = tmp_path / "forged"
    proc = run_mqtool("--no-progress", "fixture", "make", str(source), "--messages", "6000",
                      "--seed", "3", "--commitlog-file-size", "1m", "--crash")
    assert proc.returncode == 0, proc.stderr
    checkpoint = source / "checkpoint"
    raw = checkpoint.read_bytes()
    checkpoint.write_bytes(bytes(_CHECKPOINT_TIMESTAMPS) + raw[_CHECKPOINT_TIMESTAMPS:])
    undamaged = tmp_path / "undamaged"
    shutil.copytree(source, undamaged)
    files = sorted((source / "commitlog").iterdir())
    assert len(files) >= 5
    proc = run_mqtool("fixture", "damage", str(source), "--kind", "bit-flip", "--target", "body",
                      "--file", str(files[3]), "--seed", "1")
    assert proc.returncode == 0, proc.stderr
    clean = _assert_same_for_any_workers(undamaged, tmp_path / "clean")
    assert clean["summary"]["mode"] == "abnormal"
    assert clean["summary"]["records_dispatched"] > 0
    damaged = _assert_same_for_any_workers(source, tmp_path / "damaged")
    assert damaged["data_loss"]
    assert damaged["recovery"]["process_offset"] < clean["recovery"]["process_offset"]


@pytest.mark.parametrize("name, extra", [("v5-damaged", ("--mode", "abnormal")),
                                         ("crash-lost-small", ()),
                                         ("clean-small-damaged", ("--mode", "abnormal")),
                                         ("v5-batchcq-crash", ())])
def test_reference_stores(tmp_path, name, extra):
    source = SHARED_STORES / name / "store"
    if not source.is_dir():
        pytest.skip(f"{source} is absent")
    result = _assert_same_for_any_workers(source, tmp_path, *extra)
    assert result["summary"]["mode"] == "abnormal"


def _rebuild(command: str, source: Path, work: Path, workers: int) -> tuple[dict, dict]:
    store = work / f"{command}-w{workers}"
    shutil.copytree(source, store)
    proc = run_mqtool("--no-progress", command, "--json", "--workers", str(workers), str(store))
    assert proc.returncode in (0, 1), proc.stderr
    result = json.loads(proc.stdout)
    for key in ("backup", "store"):
        result.pop(key, None)
    return _files(store), result


@pytest.mark.parametrize("command", ["rebuild-queues", "rebuild-index"])
def test_rebuild_writes_the_same_bytes_for_any_workers(tmp_path, mqtool, command):
    """rebuild-queues / rebuild-index --workers N: the files walked in worker processes give the
    same ConsumeQueue and IndexFile bytes (and plan) as one process, on a store with four
    bytes overwritten with 0xff in its third file."""
    source = tmp_path / "forged"
    proc = run_mqtool("--no-progress", "fixture", "make", str(source), "--messages", "6000",
                      "--seed", "5", "--commitlog-file-size", "1m", "--index-entries", "3000")
    assert proc.returncode == 0, proc.stderr
    files = sorted((source / "commitlog").iterdir())
    assert len(files) >= 5
    raw = bytearray(files[2].read_bytes())
    raw[300_000:300_004] = b"\xff\xff\xff\xff"
    files[2].write_bytes(bytes(raw))
    one_files, one = _rebuild(command, source, tmp_path, 1)
    assert one["summary"]["records_scanned"] > 1000
    for workers in (2, 3):
        got_files, got = _rebuild(command, source, tmp_path, workers)
        assert got_files.keys() == one_files.keys()
        for rel, data in got_files.items():
            assert data == one_files[rel], f"{command}: {rel} differs with --workers {workers}"
        assert got == one
