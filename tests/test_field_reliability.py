"""Reliability in the field (issue 29): runs killed with SIGKILL leave no worker behind and no
caller waiting; stores with non-UTF-8 names; read-only evidence copied as an unprivileged user;
half-done repairs visible and finishable; every read command warns about a live store."""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_mqtool
from test_repair import make_store

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


# --- 1. no orphaned workers ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def crash_store_big(tmp_path_factory) -> Path:
    """A crashed store of 20 CommitLog files: recover and verify spend a second or two with
    their worker processes running."""
    return make_store(tmp_path_factory.mktemp("orphans") / "store", "--messages", "16000",
                      "--seed", "29", "--crash", "--commitlog-file-size", "1m")


def _session_members(sid: int) -> list[int]:
    """The processes of session ``sid`` (a run started in a session of its own, with
    every process it forks)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces, split after it
        fields = stat[stat.rindex(b")") + 2:].split()
        if fields[0] != b"Z" and int(fields[3]) == sid:
            members.append(int(entry))
    return members


def _kill_in_worker_phase(args: list[str], rng: random.Random) -> tuple[float, list[int]]:
    """Start mqtool, wait until it has forked a worker, SIGKILL it a random moment later;
    returns how long the caller's communicate() waited and the session's survivors."""
    proc = subprocess.Popen([sys.executable, "-m", "mqtool", "--no-progress", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            if len(_session_members(proc.pid)) > 1:
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.6))
        os.kill(proc.pid, signal.SIGKILL)
        start = time.monotonic()
        proc.communicate(timeout=10)
        waited = time.monotonic() - start
        for _ in range(50):
            survivors = _session_members(proc.pid)
            if not survivors:
                break
            time.sleep(0.02)
        return waited, survivors
    finally:
        for pid in _session_members(proc.pid):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("command", ["recover", "verify"])
def test_sigkill_leaves_no_worker_and_no_caller_waiting(tmp_path, crash_store_big, command):
    rng = random.Random(29)
    for trial in range(4):
        store = tmp_path / f"copy{trial}"
        shutil.copytree(crash_store_big, store)
        waited, survivors = _kill_in_worker_phase([command, str(store), "--workers", "2"], rng)
        assert survivors == [], f"{command} trial {trial}: processes left: {survivors}"
        assert waited < 3, f"{command} trial {trial}: communicate() waited {waited:.1f} s"
        shutil.rmtree(store)


# --- 5. every read command warns once about a store in use -------------------------------------------

READ_COMMANDS = {
    "info": ["info", "{s}"],
    "verify": ["verify", "{s}"],
    "dump": ["dump", "{s}", "--limit", "1"],
    "dump-file": ["dump", "{s}/commitlog/00000000000000000000", "--limit", "1"],
    "query": ["query", "{s}", "--key", "nothing-has-this-key"],
    "export": ["export", "{s}", "--out", "{t}/export.jsonl"],
    "salvage": ["salvage", "{s}", "--out", "{t}/salvage.jsonl", "--map", "{t}/map.json"],
    "consumers": ["consumers", "{s}"],
    "timers": ["timers", "{s}"],
    "diff": ["diff", "{s}", "{s}"],
}


@pytest.fixture(scope="module")
def small_store(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("live") / "store", "--messages", "300",
                      "--consumer-group", "G:5")


@pytest.fixture(scope="module")
def held_store(small_store):
    from test_repair_safety import LockHolder

    holder = LockHolder(small_store / "lock")
    yield small_store
    holder.release()


@pytest.mark.parametrize("name", sorted(READ_COMMANDS))
def test_read_commands_warn_once_about_a_live_store(tmp_path, held_store, name):
    args = [a.format(s=held_store, t=tmp_path) for a in READ_COMMANDS[name]]
    proc = run_mqtool(*args)
    warnings = [line for line in proc.stderr.splitlines() if "live process" in line]
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].startswith("mqtool: warning: ") and str(held_store) in warnings[0]


def test_read_commands_say_nothing_about_a_lock_nobody_holds(tmp_path):
    store = make_store(tmp_path / "store", "--messages", "20")
    proc = run_mqtool("dump", store, "--limit", "1")
    assert proc.returncode == 0 and "live process" not in proc.stderr
