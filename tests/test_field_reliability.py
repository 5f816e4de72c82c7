"""Reliability in the field (issue 29): runs killed with SIGKILL leave no worker behind and no
caller waiting; stores with non-UTF-8 names; read-only evidence copied as an unprivileged user;
half-done repairs visible and finishable; every read command warns about a live store."""
from __future__ import annotations

import json
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
from test_repair import backup_dirs, make_store, snapshot

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
    for trial in range(3):
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


# --- 4. half-done repairs are visible and finishable ---------------------------------------------------

def _leftover_codes(store: Path) -> tuple[list[str], list[str]]:
    """The REPAIR_* codes verify reports and those info lists (in this process: the CLI's
    rendering of both is checked once, in the first phase)."""
    from mqtool.inspect import store_info
    from mqtool.store import Store
    from mqtool.verify import verify_store

    report = verify_store(Store(store), quick=True)
    info = store_info(Store(store))
    return (sorted(f.code for f in report.findings if f.code.startswith("REPAIR_")),
            sorted(item["code"] for item in info["repair_leftovers"]))


@pytest.fixture(scope="module")
def lossy_store(tmp_path_factory) -> tuple[Path, dict]:
    """A store recover repairs with data loss, and the store an uninterrupted recover leaves."""
    from test_repair_safety import _damaged_copy

    base = tmp_path_factory.mktemp("lossy")
    store = _damaged_copy(base)
    reference = base / "reference"
    shutil.copytree(store, reference)
    assert run_mqtool("recover", reference).returncode == 1
    return store, snapshot(reference)


@pytest.mark.parametrize("phase,codes", [
    ("planned", ["REPAIR_LEFTOVER"]),                      # stage written, nothing saved
    ("-1", ["REPAIR_LEFTOVER", "REPAIR_LEFTOVER"]),        # backup saved, no manifest yet
    ("0", ["REPAIR_PENDING"]),                             # journal written, nothing changed
    ("applied", []),                                       # every change made, no report yet
])
def test_killed_at_each_phase_is_visible_and_finished(tmp_path, lossy_store, phase, codes):
    source, wanted = lossy_store
    store = tmp_path / "store"
    shutil.copytree(source, store)
    original = snapshot(store)
    env = dict(os.environ, MQTOOL_TEST_KILL_AFTER_STEP=phase)
    killed = run_mqtool("recover", store, env=env)
    assert killed.returncode == -9, killed.stderr
    found_verify, found_info = _leftover_codes(store)
    assert found_verify == codes and found_info == codes
    if phase == "planned":
        verify = run_mqtool("verify", store, "--json")
        assert [f["code"] for f in json.loads(verify.stdout)["findings"]
                if f["code"].startswith("REPAIR_")] == codes
        info = run_mqtool("info", store)
        assert "REPAIR_LEFTOVER" in info.stdout and "mqtool: warning: REPAIR_LEFTOVER" in info.stderr
        dry = run_mqtool("recover", store, "--dry-run")
        assert "mqtool: warning: .mqtool-stage-" in dry.stderr, dry.stderr

    if phase == "-1":
        # undo of the half-made backup: nothing to restore, the leftovers go
        (half,) = backup_dirs(store)
        undo = run_mqtool("undo", half, "--json")
        assert undo.returncode == 0, undo.stderr
        assert len(json.loads(undo.stdout)["leftovers_removed"]) == 2
        assert snapshot(store) == original
        assert not (store / ".mqtool-backup").exists() or not backup_dirs(store)
    elif phase == "applied":
        listed = json.loads(run_mqtool("undo", "--list", store, "--json").stdout)["backups"]
        assert [(b["status"], b["data_loss"], b["reported"]) for b in listed] == [
            ("applied", True, False)] and listed[0]["lost"]
        rerun = run_mqtool("recover", store, "--json")
        # the re-run has nothing to do, and reports the loss the killed run never reported
        assert rerun.returncode == 1, rerun.stderr
        doc = json.loads(rerun.stdout)
        assert doc["status"] == "nothing to do" and doc["resumed"]["unreported"]
        assert doc["resumed"]["lost"] == listed[0]["lost"]
        assert "before it reported" in rerun.stderr
        listed = json.loads(run_mqtool("undo", "--list", store, "--json").stdout)["backups"]
        assert listed[0]["reported"]
        assert run_mqtool("recover", store).returncode == 0
    else:
        rerun = run_mqtool("recover", store)
        assert rerun.returncode == 1, rerun.stderr
    if phase != "-1":
        assert snapshot(store) == wanted
    assert _leftover_codes(store) == ([], [])
    assert not list(store.glob(".mqtool-stage-*"))


@pytest.mark.parametrize("phase", ["-1", "applied"])
def test_a_backup_outside_the_store_is_found_after_a_kill(tmp_path, lossy_store, phase):
    """--backup-dir elsewhere: the store notes where its backup went before anything is saved,
    so a kill while saving or before the report is seen and finished as in the default place."""
    source, wanted = lossy_store
    store, outside = tmp_path / "store", tmp_path / "elsewhere" / "backup-1"
    shutil.copytree(source, store)
    original = snapshot(store)
    env = dict(os.environ, MQTOOL_TEST_KILL_AFTER_STEP=phase)
    killed = run_mqtool("recover", store, "--backup-dir", outside, env=env)
    assert killed.returncode == -9, killed.stderr
    assert (outside / "data").is_dir()
    found_verify, found_info = _leftover_codes(store)
    if phase == "-1":
        assert found_verify == found_info == ["REPAIR_LEFTOVER", "REPAIR_LEFTOVER"]
        verify = json.loads(run_mqtool("verify", store, "--json").stdout)
        assert str(outside) in {f["file"] for f in verify["findings"]}
        # undo of the half-made outside folder finds its store and takes the leftovers away
        undo = run_mqtool("undo", outside, "--json")
        assert undo.returncode == 0, undo.stderr
        assert str(outside) in json.loads(undo.stdout)["leftovers_removed"]
        assert not outside.exists() and snapshot(store) == original
        assert not list((store / ".mqtool-backup").glob("*.where.json"))
    else:
        assert found_verify == found_info == []
        listed = json.loads(run_mqtool("undo", "--list", store, "--json").stdout)["backups"]
        assert [(b["backup"], b["status"], b["reported"]) for b in listed] == [
            (str(outside), "applied", False)]
        rerun = run_mqtool("recover", store, "--json")
        assert rerun.returncode == 1, rerun.stderr
        doc = json.loads(rerun.stdout)
        assert doc["status"] == "nothing to do" and doc["resumed"]["unreported"]
        assert snapshot(store) == wanted
        assert run_mqtool("undo", outside).returncode == 0
        assert snapshot(store) == original
    assert _leftover_codes(store) == ([], [])


# --- 3. a repaired copy of read-only evidence, made by an unprivileged user -------------------------------

def _as_unprivileged(work) -> None:
    """Run ``work()`` in a forked child as ``nobody`` (umask 022); skip when that cannot be.
    The interpreter lives where ``nobody`` may not read, so the child runs on what this
    process has imported (the caller runs the same work once as itself first)."""
    import pwd
    import traceback

    if os.getuid() != 0:
        os.umask(0o022)
        work()
        return
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody'")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            os.umask(0o022)
            work()
        except BaseException:     # noqa: BLE001 - reported to the parent
            os.write(write, traceback.format_exc().encode())
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as fh:
        error = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, error


def _modes(root: Path) -> set[tuple[str, int]]:
    return {("dir" if p.is_dir() else "file", p.stat().st_mode & 0o777) for p in root.rglob("*")}


def test_repaired_copy_of_read_only_evidence_as_an_unprivileged_user(tmp_path, lossy_store):
    from mqtool.errors import MqtoolError
    from mqtool.repair import run_repair

    source, wanted = lossy_store
    # a folder nobody may enter and write: /tmp itself, not pytest's private tmp_path
    import tempfile
    base = Path(tempfile.mkdtemp(prefix="mqtool-ro-", dir="/tmp"))
    try:
        base.chmod(0o777)
        evidence = base / "evidence"
        shutil.copytree(source, evidence)
        original = snapshot(evidence)
        # once as this user: the same code path, and every module it imports loaded
        run_repair("recover", evidence, out=tmp_path / "warm")
        for path in [evidence, *evidence.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)

        def repair_copy() -> None:
            result = run_repair("recover", evidence, out=base / "copy")
            assert result.status == "repaired" and result.data_loss

        _as_unprivileged(repair_copy)
        copy = base / "copy"
        assert snapshot(copy) == wanted
        owners = {p.stat().st_uid for p in [copy, *copy.rglob("*")]}
        assert len(owners) == 1 and (os.getuid() != 0 or owners != {0})
        assert _modes(copy) == {("dir", 0o755), ("file", 0o644)}
        assert snapshot(evidence) == original
        assert sorted(p.name for p in base.iterdir()) == ["copy", "evidence"]

        # a failure half-way (the disk fills once the copy is planned) leaves nothing behind
        def failing_copy() -> None:
            os.environ["MQTOOL_TEST_FULL_DISK_AFTER_STEP"] = "planned"
            try:
                run_repair("recover", evidence, out=base / "copy2")
            except (OSError, MqtoolError):
                return
            raise AssertionError("the repair did not fail")

        _as_unprivileged(failing_copy)
        assert sorted(p.name for p in base.iterdir()) == ["copy", "evidence"]
    finally:
        for path in [base, *base.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_export_and_salvage_outputs_appear_whole(tmp_path, small_store):
    """An export or salvage written to a file appears under its name only once complete; the
    file gets the user's ordinary modes."""
    out = tmp_path / "messages.jsonl"
    proc = run_mqtool("salvage", small_store, "--out", out, "--map", tmp_path / "map.json")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["map.json", "messages.jsonl"]
    assert len(out.read_text().splitlines()) == 300
    assert {p.stat().st_mode & 0o777 for p in tmp_path.iterdir()} == {0o666 & ~_umask()}
    # what the commands write through: a failure half-way leaves neither the file nor a part
    from mqtool.writer import output_file

    with pytest.raises(RuntimeError):
        with output_file(tmp_path / "x.jsonl") as fh:
            fh.write("half a line")
            raise RuntimeError("stopped")
    # an earlier complete output survives a failed rewrite
    with pytest.raises(RuntimeError):
        with output_file(out) as fh:
            raise RuntimeError("stopped")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["map.json", "messages.jsonl"]
    assert len(out.read_text().splitlines()) == 300
    with output_file(Path(os.devnull)) as fh:      # not a regular file: written in place
        fh.write("x")
    assert Path(os.devnull).exists()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# --- 2. paths are bytes ---------------------------------------------------------------------------------

def _run_bytes(*args, env=None) -> tuple[int, bytes, bytes]:
    """The CLI with its output as bytes (a non-UTF-8 path is printed as its bytes)."""
    proc = subprocess.run([sys.executable, "-m", "mqtool", "--no-progress", *map(str, args)],
                          capture_output=True, env=env)
    assert b"Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def odd_named_store(tmp_path_factory) -> Path:
    """The damaged fixture store (every repair has something to do) under a name that is not
    UTF-8, with a stray file whose name is not UTF-8 either."""
    from test_repair_safety import _damaged_copy

    base = tmp_path_factory.mktemp("bytes")
    made = _damaged_copy(base)
    store = Path(os.fsdecode(os.fsencode(base) + b"/st\xffore"))
    made.rename(store)
    Path(os.fsdecode(os.fsencode(store) + b"/notes-\xfe.txt")).write_bytes(b"left by an operator")
    return store


@pytest.mark.parametrize("command", ["recover", "truncate", "rebuild-queues", "rebuild-index"])
def test_repair_and_undo_a_store_whose_path_is_not_utf8(tmp_path, odd_named_store, command):
    store = Path(os.fsdecode(os.fsencode(tmp_path) + b"/copy-\xff"))
    shutil.copytree(odd_named_store, store)
    original = snapshot(store)
    code, out, err = _run_bytes(command, store, "--json")
    assert code in (0, 1), err
    doc = json.loads(out.decode("utf-8"))        # valid UTF-8: the odd bytes are escaped
    assert doc["status"] == "repaired"
    backup = os.fsencode(doc["backup"])
    assert backup.startswith(os.fsencode(store) + b"/.mqtool-backup/")
    assert os.fsencode(store) in err             # messages show the path as its bytes
    manifest = json.loads((Path(os.fsdecode(backup)) / "manifest.json").read_text("utf-8"))
    assert os.fsencode(manifest["store"]) == os.fsencode(store.resolve())
    code, out, err = _run_bytes("undo", os.fsdecode(backup), "--json")
    assert code == 0, err
    assert os.fsencode(json.loads(out.decode("utf-8"))["store"]) == os.fsencode(store.resolve())
    assert snapshot(store) == original


def test_read_commands_and_salvage_on_a_path_that_is_not_utf8(tmp_path, odd_named_store):
    code, out, err = _run_bytes("info", odd_named_store, "--json")
    assert code == 0, err
    info = json.loads(out.decode("utf-8"))
    assert os.fsencode(info["root"]) == os.fsencode(odd_named_store)
    assert b"notes-\xfe.txt" in [os.fsencode(name) for name in info["stray_files"]]
    code, out, err = _run_bytes("info", odd_named_store)
    assert code == 0 and b"st\xffore" in out
    target = Path(os.fsdecode(os.fsencode(tmp_path) + b"/out-\xff.jsonl"))
    code, out, err = _run_bytes("salvage", odd_named_store, "--out", target)
    assert code == 0, err
    assert os.fsencode(json.loads(out.decode("utf-8"))["store"]) == os.fsencode(odd_named_store)
    assert target.stat().st_size > 0
    copy = Path(os.fsdecode(os.fsencode(tmp_path) + b"/copy-\xfe"))
    code, out, err = _run_bytes("recover", odd_named_store, "--out", copy, "--json")
    assert code == 1, err
    assert os.fsencode(json.loads(out.decode("utf-8"))["out"]) == os.fsencode(copy)
    assert (copy / "commitlog").is_dir()


def test_a_killed_out_copy_leaves_nothing_under_its_name(tmp_path, lossy_store):
    source, wanted = lossy_store
    out = tmp_path / "copy"
    env = dict(os.environ, MQTOOL_TEST_KILL_AFTER_STEP="planned")
    killed = run_mqtool("recover", source, "--out", out, env=env)
    assert killed.returncode == -9
    assert not out.exists()
    (partial,) = tmp_path.glob(".copy.mqtool-partial-*")
    # the next run to the same place removes the half-made copy of the dead run
    assert run_mqtool("recover", source, "--out", out).returncode == 1
    assert not partial.exists() and snapshot(out) == wanted
