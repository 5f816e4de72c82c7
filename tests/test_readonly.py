"""Read-only commands never open a store file for writing.

As root, ``chmod -R a-w`` does not stop a write, so besides running on such a copy the commands
run under a Python audit hook that fails on any open or mmap of a store file with write access,
and every byte and mtime is compared afterwards."""
from __future__ import annotations

import hashlib
import shutil
import stat
import subprocess
import sys

import pytest

from conftest import FIXTURE_STORE

GUARD = r"""
import mmap, os, sys
root = os.path.realpath(sys.argv[1])
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

def inside(path):
    try:
        return os.path.realpath(os.fsdecode(path)).startswith(root)
    except (TypeError, ValueError):
        return False

def hook(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path, mode, flags = args[0], args[1], args[2]
        writing = (isinstance(mode, str) and any(c in mode for c in "wa+x")) or \
            (flags or 0) & WRITE_FLAGS
        if writing and inside(path):
            raise PermissionError(f"read-only command opened {path} for writing")
    if event == "mmap.__new__" and args[3] not in (mmap.ACCESS_READ,):
        if args[3] != mmap.ACCESS_DEFAULT or args[2] & mmap.PROT_WRITE:
            raise PermissionError("read-only command mapped a file writable")

sys.addaudithook(hook)
sys.argv = ["mqtool"] + sys.argv[2:]
from mqtool.cli.main import run
run()
"""


def snapshot(root):
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(root))] = (
            stat.S_IMODE(st.st_mode), st.st_mtime_ns,
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None)
    return out


@pytest.fixture
def readonly_store(tmp_path):
    dest = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", dest)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    yield dest
    for path in [dest, *dest.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


ARGS = [
    ["info", "--json", "{store}"],
    ["info", "--check-crc", "{store}"],
    ["dump", "--json", "{store}"],
    ["dump", "--json", "--resync", "{store}"],
    ["dump", "--json", "{store}/consumequeue/TopicTest/0/00000000000000000000"],
    ["dump", "--json", "{store}/checkpoint"],
    ["dump", "--json", "{store}/lock"],
    ["verify", "--json", "{store}"],
    ["verify", "--quick", "{store}"],
]


@pytest.mark.parametrize("args", ARGS, ids=[" ".join(a[:2]) for a in ARGS])
def test_read_only_command_writes_nothing(readonly_store, args):
    index = sorted((readonly_store / "index").iterdir())[0]
    argv = [a.format(store=readonly_store) for a in args]
    before = snapshot(readonly_store)
    proc = subprocess.run([sys.executable, "-c", GUARD, str(readonly_store), "--no-progress",
                           *argv], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout
    proc = subprocess.run([sys.executable, "-c", GUARD, str(readonly_store), "--no-progress",
                           "dump", "--json", str(index)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(readonly_store) == before


def test_the_guard_catches_a_write(readonly_store):
    """The audit hook is not vacuous: a write into the store is refused and reported."""
    code = GUARD.replace("from mqtool.cli.main import run\nrun()",
                         "open(os.path.join(root, 'checkpoint'), 'r+b')")
    proc = subprocess.run([sys.executable, "-c", code, str(readonly_store)],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "opened" in proc.stderr and "for writing" in proc.stderr
