"""The safety rules of every mutating command, on real files and real processes.

A live broker is a second process holding a POSIX record lock on byte 0 of ``lock`` (what the
JVM's FileChannel.tryLock takes); a crash is SIGKILL, delivered by the apply loop's test hook
(MQTOOL_TEST_KILL_AFTER_STEP=N kills the process right after step N) in a real subprocess."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURE_STORE, SHARED_STORES, run_mqtool
from mqtool import forge
from mqtool.repair import run_repair, run_undo
from test_repair import assert_backup_holds_originals, backup_dirs, make_store, snapshot

MUTATING = [("recover",), ("truncate",), ("rebuild-queues",), ("rebuild-index",)]
# the same commands as the parametrised CLI runs below, for in-process second runs
LIBRARY_ARGS = {"recover": {}, "truncate": {"to": 1048576}, "rebuild-queues": {},
                "rebuild-index": {"slots": 500, "entries": 2000}}


def _damaged_copy(tmp_path: Path) -> Path:
    """The fixture store with a bit flipped in the last CommitLog file: every command has
    something to do on it."""
    store = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", store)
    forge.damage_store(store, "bit-flip", 2, file="commitlog/00000000000002097152")
    return store


@pytest.fixture
def crash_store(tmp_path) -> Path:
    return make_store(tmp_path / "crash", "--messages", "900", "--seed", "11", "--crash",
                      "--index-entries", "800", "--index-slots", "200")


class LockHolder:
    """A second process holding the broker's lock: an exclusive lockf on byte 0 of ``lock``."""

    def __init__(self, lock: Path):
        code = ("import fcntl, os, sys, time\n"
                "fd = os.open(sys.argv[1], os.O_RDWR)\n"
                "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
                "print('locked', flush=True)\n"
                "time.sleep(120)\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(lock)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "locked"

    def release(self) -> None:
        self.proc.kill()
        self.proc.wait()


def test_refuses_a_locked_store_exit_3_nothing_changed(tmp_path):
    store = _damaged_copy(tmp_path)
    before = snapshot(store)
    holder = LockHolder(store / "lock")
    try:
        for (command,) in MUTATING:
            proc = run_mqtool(command, store)
            assert proc.returncode == 3, (command, proc.stderr)
            assert proc.stderr.startswith("mqtool: error:")
            assert "lock" in proc.stderr and "live process" in proc.stderr
            assert len(proc.stderr.strip().splitlines()) == 1
        # looking is allowed: a dry run changes nothing and says the store is in use
        proc = run_mqtool("recover", store, "--dry-run")
        assert proc.returncode in (0, 1) and "live process" in proc.stderr
    finally:
        holder.release()
    assert snapshot(store) == before
    assert not (store / ".mqtool-backup").exists()
    # with the lock released the same command runs
    assert run_mqtool("recover", store).returncode == 1


def test_undo_refuses_a_locked_store(tmp_path):
    store = _damaged_copy(tmp_path)
    assert run_mqtool("recover", store).returncode == 1
    backup = backup_dirs(store)[0]
    after = snapshot(store)
    holder = LockHolder(store / "lock")
    try:
        proc = run_mqtool("undo", backup)
        assert proc.returncode == 3 and "lock" in proc.stderr
    finally:
        holder.release()
    assert snapshot(store) == after


@pytest.mark.parametrize("command", [c for (c,) in MUTATING])
def test_dry_run_changes_nothing(tmp_path, command):
    store = _damaged_copy(tmp_path)
    before = snapshot(store)
    listing = sorted(p.relative_to(store).as_posix() for p in store.rglob("*"))
    proc = run_mqtool(command, store, "--dry-run", "--json")
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] in ("planned", "nothing to do") and doc["backup"] is None
    assert snapshot(store) == before
    assert sorted(p.relative_to(store).as_posix() for p in store.rglob("*")) == listing


@pytest.mark.parametrize("args", [("recover",), ("truncate", "--to", "1048576"),
                                  ("rebuild-queues",), ("rebuild-index", "--slots", "500",
                                                        "--entries", "2000")])
def test_backup_then_undo_is_byte_exact_and_second_run_does_nothing(tmp_path, args):
    store = _damaged_copy(tmp_path)
    (store / "consumequeue" / "OrderTopic" / "1" / "00000000000000000000").unlink()
    original = tmp_path / "original"
    shutil.copytree(store, original)
    proc = run_mqtool(*args[:1], store, *args[1:], "--json")
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "repaired"
    backup = Path(doc["backup"])
    assert backup.parent == store / ".mqtool-backup" and f"backup: {backup}" in proc.stderr
    assert_backup_holds_originals(backup, original, store)
    # a second run changes nothing
    repaired = snapshot(store)
    again = run_repair(args[0], store, **LIBRARY_ARGS[args[0]])
    assert again.status == "nothing to do" and again.exit_code == 0
    assert snapshot(store) == repaired and backup_dirs(store) == [backup]
    # undo puts every file back byte for byte
    report = run_undo(backup)
    assert report.restored or report.removed
    assert snapshot(store) == snapshot(original)


def test_backup_dir_option_and_manifest(tmp_path, crash_store):
    original = tmp_path / "original"
    shutil.copytree(crash_store, original)
    chosen = tmp_path / "elsewhere" / "bk"
    proc = run_mqtool("recover", crash_store, "--backup-dir", chosen, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["backup"] == str(chosen)
    manifest = json.loads((chosen / "manifest.json").read_text())
    assert manifest["status"] == "applied" and manifest["command"] == "recover"
    for op in manifest["ops"]:
        assert op["op"] in ("write", "edit", "delete") and op["reason"]
        if op["old_size"] is not None:
            assert op["digest"] == "sha256-sparse/1"
            assert len(op["old_file_digest" if op["op"] == "edit" else "old_digest"]) == 64
    # the store notes where its backup went (so an interrupted repair is found), nothing more
    assert [p.name[-len(".where.json"):] for p in (crash_store / ".mqtool-backup").iterdir()] \
        == [".where.json"]
    assert_backup_holds_originals(chosen, original, crash_store)
    assert run_mqtool("undo", chosen).returncode == 0
    assert snapshot(crash_store) == snapshot(original)
    assert not (crash_store / ".mqtool-backup").exists()


def test_undo_refuses_when_the_store_moved_on(tmp_path):
    store = _damaged_copy(tmp_path)
    original = snapshot(store)
    cut_before = (store / "commitlog" / "00000000000002097152").read_bytes()
    assert run_mqtool("recover", store).returncode == 1
    backup = backup_dirs(store)[0]
    # a broker started afterwards and wrote into the cut file
    cut = store / "commitlog" / "00000000000002097152"
    with open(cut, "r+b") as fh:
        fh.seek(1000)
        fh.write(b"\x01\x02\x03")
    changed = snapshot(store)
    proc = run_mqtool("undo", backup)
    assert proc.returncode == 2 and "changed since the repair" in proc.stderr
    assert snapshot(store) == changed
    proc = run_mqtool("undo", backup, "--force")
    assert proc.returncode == 0
    # everything the repair changed is back; the foreign write it never saw stays
    restored = snapshot(store)
    assert {k: v for k, v in restored.items() if k != cut.relative_to(store).as_posix()} == \
        {k: v for k, v in original.items() if k != cut.relative_to(store).as_posix()}
    now = cut.read_bytes()
    assert now[:1000] == cut_before[:1000] and now[1003:] == cut_before[1003:]


def test_out_writes_a_repaired_copy(tmp_path, crash_store):
    before = snapshot(crash_store)
    out = tmp_path / "repaired"
    proc = run_mqtool("recover", crash_store, "--out", out, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["out"] == str(out) and doc["backup"] is None
    assert snapshot(crash_store) == before
    in_place = tmp_path / "in-place"
    shutil.copytree(crash_store, in_place)
    assert run_mqtool("recover", in_place).returncode == doc["exit_code"]
    assert snapshot(out) == snapshot(in_place)
    assert not any(p.name.startswith(".mqtool") for p in out.iterdir())
    proc = run_mqtool("recover", crash_store, "--out", out)
    assert proc.returncode == 2 and "not an empty folder" in proc.stderr


def _kill_run(store: Path, step: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, MQTOOL_TEST_KILL_AFTER_STEP=str(step))
    return subprocess.run([sys.executable, "-m", "mqtool", "--no-progress", "recover", str(store)],
                          capture_output=True, text=True, env=env)


def test_sigkill_at_every_stage_then_rerun_and_undo(tmp_path, crash_store):
    """Killed with SIGKILL after step N (the backup data, the journal, each operation), a re-run
    reaches the same end state as an uninterrupted run, and undo restores the original."""
    reference = tmp_path / "reference"
    shutil.copytree(crash_store, reference)
    proc = run_mqtool("recover", reference, "--json")
    steps = len(json.loads(proc.stdout)["files"])
    assert steps > 5
    wanted = snapshot(reference)
    original = snapshot(crash_store)
    for step in sorted({-1, 0, steps // 2, steps}):
        store = tmp_path / f"kill{step}"
        shutil.copytree(crash_store, store)
        killed = _kill_run(store, step)
        assert killed.returncode == -9, (step, killed.stderr)
        if step >= 0:
            assert (store / ".mqtool-pending.json").exists()
        first_backups = backup_dirs(store)
        if step == steps // 2:
            rerun = run_mqtool("recover", store)
            assert rerun.returncode in (0, 1), rerun.stderr
            assert "finished an interrupted recover" in rerun.stderr
        else:
            result = run_repair("recover", store)
            assert (result.resumed is not None) == (step >= 0)
        assert snapshot(store) == wanted, step
        assert not (store / ".mqtool-pending.json").exists()
        assert not list(store.glob(".mqtool-stage-*"))
        if step >= 0:
            run_undo(first_backups[0])
            assert snapshot(store) == original, step


def test_undo_of_an_interrupted_repair(tmp_path, crash_store):
    original = snapshot(crash_store)
    killed = _kill_run(crash_store, 3)
    assert killed.returncode == -9
    backup = backup_dirs(crash_store)[0]
    proc = run_mqtool("undo", backup)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(crash_store) == original
    assert not (crash_store / ".mqtool-pending.json").exists()
    # the store is as before: a repair starts from scratch
    assert json.loads(run_mqtool("recover", crash_store, "--dry-run", "--json").stdout)[
        "status"] == "planned"


def test_backup_folder_is_invisible_to_readers(tmp_path):
    store = _damaged_copy(tmp_path)
    assert run_mqtool("recover", store).returncode == 1
    assert (store / ".mqtool-backup").is_dir()
    verify = run_mqtool("verify", store, "--json")
    doc = json.loads(verify.stdout)
    assert not any(".mqtool" in f.get("file", "") for f in doc["findings"])
    assert verify.returncode == 0


@pytest.mark.skipif(not (SHARED_STORES / "v5-crash").is_dir(), reason="../shared is absent")
def test_v5_crash_undo_restores_pid_abort(tmp_path):
    store = tmp_path / "store"
    shutil.copytree(SHARED_STORES / "v5-crash" / "store", store)
    original = snapshot(store)
    proc = run_mqtool("recover", store, "--json")
    assert proc.returncode == 0, proc.stderr
    assert not (store / "abort").exists()
    assert run_mqtool("undo", json.loads(proc.stdout)["backup"]).returncode == 0
    assert snapshot(store) == original


# what 5.3.3's shutdown persisted in every v5 reference store's recovered/ (no compaction topic)
EMPTY_POSITION_CHECKPOINT = b'{\n\t"empty":true,\n\t"queueOffsetMap":{}\n}'


def test_v5_recover_keeps_the_crashed_pid_in_abort_bak(tmp_path):
    """As 5.3.3's start + clean shutdown: abort's PID moves to abort.bak, the compaction
    position checkpoint is persisted, and a second run finds nothing to do."""
    store = tmp_path / "store"
    forge.make_store(store, forge.ForgeOptions(messages=400, seed=3, broker_version=5,
                                               crash=True))
    pid = (store / "abort").read_bytes()
    assert pid.isdigit()
    (store / "abort.bak").write_bytes(b"")
    original = snapshot(store)
    proc = run_mqtool("recover", store, "--json")
    assert proc.returncode == 0, proc.stderr
    assert not (store / "abort").exists()
    assert (store / "abort.bak").read_bytes() == pid
    assert (store / "compaction" / "position-checkpoint").read_bytes() == \
        EMPTY_POSITION_CHECKPOINT
    again = run_mqtool("recover", store, "--json")
    assert json.loads(again.stdout)["status"] == "nothing to do"
    assert run_mqtool("undo", json.loads(proc.stdout)["backup"]).returncode == 0
    assert snapshot(store) == original


def test_4x_recover_writes_no_5x_bookkeeping(tmp_path):
    store = tmp_path / "store"
    forge.make_store(store, forge.ForgeOptions(messages=400, seed=3, crash=True))
    assert run_mqtool("recover", store).returncode == 0
    assert not (store / "abort.bak").exists() and not (store / "compaction").exists()


def test_refuses_backup_inside_a_data_directory_and_bare_commitlog(tmp_path):
    store = _damaged_copy(tmp_path)
    before = snapshot(store)
    proc = run_mqtool("recover", store, "--backup-dir", store / "commitlog" / "bk")
    assert proc.returncode == 2 and "which the broker loads" in proc.stderr
    proc = run_mqtool("recover", store / "commitlog")
    assert proc.returncode == 2 and "bare CommitLog directory" in proc.stderr
    assert snapshot(store) == before
    assert not (store / "commitlog" / "bk").exists()


# --- the store's lock, held for the whole run (issue 12) -------------------------------------------


def _start_recover(store: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mqtool", "--no-progress", "recover", str(store)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("with_lock_file", [True, False])
def test_two_concurrent_recovers_one_repairs_the_other_refuses(tmp_path, with_lock_file):
    reference = _damaged_copy(tmp_path / "reference")
    if not with_lock_file:
        (reference / "lock").unlink(missing_ok=True)
    assert run_mqtool("recover", reference).returncode == 1
    repaired = snapshot(reference)
    refusals = 0
    for trial in range(4):
        store = _damaged_copy(tmp_path / f"trial{trial}")
        if not with_lock_file:
            (store / "lock").unlink(missing_ok=True)
        procs = [_start_recover(store), _start_recover(store)]
        results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
        codes = sorted(code for code, _, _ in results)
        for code, _, err in results:
            assert "Traceback" not in err
            if code == 3:
                refusals += 1
                assert err.startswith("mqtool: error:") and len(err.strip().splitlines()) == 1
                assert "lock" in err
        # exactly one repairs; the other refused, or (started late) found nothing left to do
        assert codes in ([1, 3], [0, 1]), results
        assert snapshot(store) == repaired
        assert len(backup_dirs(store)) == 1
        assert not list(store.glob(".mqtool-stage-*"))
        assert not (store / ".mqtool-pending.json").exists()
        assert (store / "lock").exists() == with_lock_file
    assert refusals >= 1


_BROKER_LIKE_PROBE = """
import fcntl, os, sys, time
store, out = sys.argv[1], sys.argv[2]
refused = got = 0
violations = []
deadline = time.monotonic() + 60
while time.monotonic() < deadline and not os.path.exists(out + ".stop"):
    # what the broker's DefaultMessageStore does: open lock rw (creating it), tryLock(0, 1, false)
    fd = os.open(os.path.join(store, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    except OSError:
        refused += 1
    else:
        got += 1
        # holding the lock, nobody may be repairing: no stage folder, no journal
        busy = [n for n in os.listdir(store) if n.startswith(".mqtool-stage-")
                or n == ".mqtool-pending.json"]
        if busy:
            violations.append(busy)
        time.sleep(0.002)
    finally:
        os.close(fd)
    if refused + got == 1:
        open(out + ".ready", "w").close()
    time.sleep(0.003)
with open(out, "w") as fh:
    fh.write(f"{refused} {got} {len(violations)}")
"""


def test_a_broker_starting_during_a_repair_is_refused(tmp_path):
    """A process taking the lock the way the broker does, over and over, while mqtool repairs: it
    never holds the lock while a repair is under way, and is refused while mqtool runs."""
    refused_total = 0
    # the probe holds the lock 2 ms of every 5: mqtool, started then, must refuse (exit 3) and
    # change nothing; the trials go on until one repair ran while the probe was knocking
    for trial in range(10):
        if refused_total > 0 and trial >= 3:
            break
        store = _damaged_copy(tmp_path / f"trial{trial}")
        out = tmp_path / f"probe{trial}.txt"
        probe = subprocess.Popen([sys.executable, "-c", _BROKER_LIKE_PROBE, str(store), str(out)])
        try:
            # a loaded machine can take longer to start the probe than mqtool takes to repair
            deadline = time.monotonic() + 60
            while not Path(str(out) + ".ready").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            proc = run_mqtool("recover", store)
        finally:
            Path(str(out) + ".stop").touch()
            probe.wait(timeout=120)
        refused, got, violations = map(int, out.read_text().split())
        assert violations == 0
        assert proc.returncode in (1, 3), proc.stderr
        if proc.returncode == 3:     # the "broker" held it when mqtool started: nothing changed
            assert not backup_dirs(store)
        else:
            refused_total += refused
        assert not list(store.glob(".mqtool-stage-*"))
    assert refused_total > 0


def test_the_lock_is_the_brokers_and_blocks_it(tmp_path):
    """While mqtool holds the store's lock, a broker-style tryLock from another process fails, and
    mqtool's own held-lock probe (which must not drop the lock) says nobody else holds it."""
    from mqtool.lock import store_lock
    from mqtool.store import Store
    store = _damaged_copy(tmp_path)
    code = ("import fcntl, os, sys\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "try:\n"
            "    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
            "except OSError:\n"
            "    sys.exit(7)\n")
    with store_lock(store, "test"):
        assert not Store(store).lock_held()           # probing must not release it
        probe = subprocess.run([sys.executable, "-c", code, str(store / "lock")])
        assert probe.returncode == 7
    probe = subprocess.run([sys.executable, "-c", code, str(store / "lock")])
    assert probe.returncode == 0


_RIVAL_LOCKER = """
import fcntl, os, sys, time
path, stop = sys.argv[1], sys.argv[2]
while not os.path.exists(stop):
    try:
        fd = os.open(path, os.O_RDWR)      # a second mqtool: opens a lock file it finds
    except FileNotFoundError:
        continue
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        time.sleep(0.001)
    except OSError:
        pass
    finally:
        os.close(fd)
"""


def test_a_lock_file_mqtool_creates_is_locked_from_the_moment_it_appears(tmp_path):
    """A rival that opens and locks the lock file as soon as it shows up never gets it first:
    mqtool's ``lock`` appears already locked. (Created, then locked, the rival could win it in
    between, believe the file was the broker's and leave it behind after its repair.)"""
    from mqtool.errors import StoreLockedError
    from mqtool.lock import store_lock
    store = tmp_path / "store"
    store.mkdir()
    stop = tmp_path / "stop"
    rival = subprocess.Popen([sys.executable, "-c", _RIVAL_LOCKER, str(store / "lock"),
                              str(stop)])
    refused = 0
    try:
        for _ in range(5000):
            try:
                with store_lock(store, "test"):
                    pass
            except StoreLockedError:
                refused += 1
    finally:
        stop.touch()
        rival.wait(timeout=60)
    assert refused == 0
    assert not (store / "lock").exists()
    assert sorted(p.name for p in store.iterdir()) == []


def test_undo_and_fixture_damage_hold_the_lock(tmp_path):
    from mqtool.lock import store_lock
    store = _damaged_copy(tmp_path)
    assert run_mqtool("recover", store).returncode == 1
    # a second mqtool holding the lock (another process): both refuse with exit 3
    holder = LockHolder(store / "lock")
    try:
        before = snapshot(store)
        proc = run_mqtool("fixture", "damage", store, "--kind", "bit-flip")
        assert proc.returncode == 3 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert snapshot(store) == before
    finally:
        holder.release()
    # a store without a lock file gets one for the run, removed afterwards
    (store / "lock").unlink()
    assert run_mqtool("undo", backup_dirs(store)[0]).returncode == 0
    assert not (store / "lock").exists()
    with store_lock(store, "test"):
        assert (store / "lock").exists()
    assert not (store / "lock").exists()


def test_undo_given_the_store_names_its_newest_backup_and_changes_nothing(tmp_path, crash_store):
    """An operator types the store where the backup belongs: undo names the backup to give it,
    and never picks one on its own."""
    first = run_mqtool("recover", crash_store, "--json")
    assert first.returncode in (0, 1), first.stderr
    shutil.rmtree(crash_store / "index")                   # something for a second repair to do
    second = run_mqtool("rebuild-index", crash_store, "--json")
    assert second.returncode in (0, 1), second.stderr
    newest = json.loads(second.stdout)["backup"]
    before = snapshot(crash_store)
    proc = run_mqtool("undo", crash_store)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"mqtool undo {newest}" in proc.stderr
    assert snapshot(crash_store) == before
