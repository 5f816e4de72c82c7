"""A full disk is an error, never a signal (issue 12).

Each case mounts its own small tmpfs (root only; skipped where mounting is not allowed), puts a
sparse copy of a crashed store on it (holes included: on tmpfs touching a hole through a map
allocates a page, which on a full file system is SIGBUS) and runs ``mqtool recover`` with the free
space running out at many different points: planning, backup, the space reserve, success.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import run_mqtool
from test_repair import make_store, snapshot


def _mount_tmpfs(where: Path, size_kb: int) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None or os.geteuid() != 0:
        return False
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(where)],
                          capture_output=True)
    return proc.returncode == 0


def _umount(where: Path) -> None:
    subprocess.run(["umount", str(where)], capture_output=True)


@pytest.fixture(scope="module")
def crashed(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("full-disk") / "crash", "--messages", "900",
                      "--seed", "11", "--crash", "--index-entries", "800",
                      "--index-slots", "200")


def _used_kb(store: Path) -> int:
    return sum(p.stat().st_blocks for p in store.rglob("*") if p.is_file()) // 2


@pytest.mark.parametrize("command", ["recover", "rebuild-queues", "rebuild-index"])
def test_repair_on_a_full_disk_fails_cleanly_or_succeeds(crashed, tmp_path, command):
    if not _mount_tmpfs(tmp_path / "probe", 1024):
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    _umount(tmp_path / "probe")
    used = _used_kb(crashed)
    outcomes = []
    for free_kb in (0, 8, 16, 32, 48, 64, 96, 128, 160, 192, 256, 512, 2048):
        mnt = tmp_path / f"mnt-{uuid.uuid4().hex[:6]}"
        # tmpfs counts a little more than the blocks du sees: a few pages of margin
        assert _mount_tmpfs(mnt, used + free_kb + 64)
        try:
            store = mnt / "store"
            subprocess.run(["cp", "-a", "--sparse=always", str(crashed), str(store)], check=True)
            before = snapshot(store)
            # forked from this process (no new interpreter per size): a SIGBUS of a map over a
            # full tmpfs would be a negative exit status
            proc = run_mqtool(command, store, check_no_traceback=False)
            assert proc.returncode >= 0, (free_kb, proc.stderr[-6000:])
            assert "Traceback" not in proc.stderr and "Fatal Python error" not in proc.stderr
            assert not list(store.glob(".mqtool-stage-*"))
            assert not (store / ".mqtool-pending.json").exists()
            if proc.returncode == 2:
                lines = proc.stderr.strip().splitlines()
                assert len(lines) == 1 and lines[0].startswith("mqtool: error:")
                assert "No space left on device" in lines[0]
                assert snapshot(store) == before
                assert not (store / ".mqtool-backup").exists()
                outcomes.append("full")
            else:
                assert proc.returncode in (0, 1), proc.stderr     # repaired
                if "nothing to do" in proc.stderr:
                    assert snapshot(store) == before
                    outcomes.append("repaired")
                    continue
                backups = list((store / ".mqtool-backup").iterdir())
                assert len(backups) == 1 and (backups[0] / "manifest.json").is_file()
                assert not (backups[0] / ".reserve").exists()
                outcomes.append("repaired")
        finally:
            _umount(mnt)
    # the sizes span both sides of "enough room"
    assert "full" in outcomes and "repaired" in outcomes, outcomes


def test_read_maps_of_sparse_files_hold_the_same_bytes(tmp_path):
    """The zero pages put over holes read exactly as the file does (holes at the start, middle
    and end, a partial last page)."""
    from mqtool.mapping import holes, map_readonly
    path = tmp_path / "sparse"
    page = 4096
    with open(path, "wb") as fh:
        fh.truncate(40 * page + 123)
        for at in (3 * page + 5, 17 * page, 30 * page - 1):
            fh.seek(at)
            fh.write(os.urandom(700))
    data = path.read_bytes()
    with open(path, "rb") as fh:
        assert holes(fh.fileno(), len(data))       # the file system made it sparse
        buf = map_readonly(fh.fileno())
        try:
            assert buf[:] == data
        finally:
            buf.close()
        part = map_readonly(fh.fileno(), 20 * page)
        try:
            assert part[:] == data[:20 * page]
        finally:
            part.close()


@pytest.mark.parametrize("step", [1, 2, 4])
def test_a_disk_full_in_the_middle_of_the_apply_is_rolled_back(crashed, tmp_path, step):
    """ENOSPC after n operations were applied (the test hook raises it where a real disk would):
    what was applied is put back from the backup, the backup and journal go, exit 2."""
    store = tmp_path / "store"
    shutil.copytree(crashed, store)
    before = snapshot(store)
    env = {**os.environ, "MQTOOL_TEST_FULL_DISK_AFTER_STEP": str(step)}
    proc = subprocess.run([sys.executable, "-m", "mqtool", "--no-progress", "recover", str(store)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0]
    assert snapshot(store) == before
    assert not (store / ".mqtool-backup").exists()
    assert not (store / ".mqtool-pending.json").exists()
    assert not list(store.glob(".mqtool-stage-*"))
    # and with room again the same command repairs it
    assert subprocess.run([sys.executable, "-m", "mqtool", "--no-progress", "recover",
                           str(store)], capture_output=True).returncode in (0, 1)


def _fill(mnt: Path, leave_kb: int) -> Path:
    filler = mnt / "filler"
    # unbuffered: a buffered file would try to flush its last block again on close, and raise
    with open(filler, "wb", buffering=0) as fh:
        block = bytes(1 << 16)
        try:
            while True:
                fh.write(block)
        except OSError:
            pass
    free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
    os.truncate(filler, max(0, filler.stat().st_size + free - leave_kb * 1024))
    return filler


def test_undo_on_a_full_disk_restores_all_or_nothing(crashed, tmp_path):
    if not _mount_tmpfs(tmp_path / "probe", 1024):
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    _umount(tmp_path / "probe")
    used = _used_kb(crashed)
    mnt = tmp_path / "mnt"
    assert _mount_tmpfs(mnt, used + 4096)
    try:
        store = mnt / "store"
        subprocess.run(["cp", "-a", "--sparse=always", str(crashed), str(store)], check=True)
        original = snapshot(store)
        assert run_mqtool("recover", store).returncode in (0, 1)
        repaired = snapshot(store)
        backup = next((store / ".mqtool-backup").iterdir())
        outcomes = []
        for leave_kb in (0, 16, 48, 96, 160, 512):
            filler = _fill(mnt, leave_kb)
            proc = run_mqtool("undo", backup, check_no_traceback=False)
            filler.unlink()
            assert proc.returncode >= 0, proc.stderr[-3000:]
            assert not [p for p in store.rglob("*") if p.name.endswith(".mqtool-undo")]
            if proc.returncode == 2:
                lines = proc.stderr.strip().splitlines()
                assert len(lines) == 1 and "No space left on device" in lines[0], proc.stderr
                assert snapshot(store) == repaired
                outcomes.append("full")
            else:
                assert proc.returncode == 0, proc.stderr
                assert snapshot(store) == original
                outcomes.append("undone")
                break
        assert outcomes[0] == "full" and outcomes[-1] == "undone", outcomes
    finally:
        _umount(mnt)
