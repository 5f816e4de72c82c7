"""Shared test plumbing: where the reference stores are, and how to run the real CLI."""
from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURE_STORE = REPO / "fixtures" / "rocketmq-4.9.8" / "clean-small"
SHARED_STORES = Path(os.environ.get("MQTOOL_SHARED_STORES",
                                    REPO.parent / "shared" / "rocketmq-stores"))


# The test files that share the `spark` fixture's session (one JVM per process): one xdist
# worker runs them all, first, while the other takes the rest (test_spark_install.py starts its
# own Spark processes, so it is an ordinary file, among the longest).
SPARK_FILES = ("test_spark.py", "test_spark_verify_equality.py")
# Files that take longest (measured with --durations): scheduled next, so that the run does not
# end with one worker still in a long file while the other is idle. The rest follow in xdist's
# own order (most tests first).
LONGEST_FILES = ("test_spark_install.py", "test_native.py", "test_verify.py", "test_index_bulk.py",
                 "test_fault_matrix.py", "test_hostile_input.py", "test_queue_chunks.py", "test_query.py",
                 "test_repair_conformance.py", "test_field_reliability.py",
                 "test_repair_safety.py", "test_scan_batch.py", "test_full_disk.py")


def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, the Spark files one unit, scheduled before the longest files."""
    from xdist.scheduler import LoadFileScheduling

    def file_name(scope: str) -> str:
        return scope.rsplit("/", 1)[-1]

    class LongestFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "spark" if file_name(path) in SPARK_FILES else path

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "_ordered", False):
                first = ["spark"] + [scope for name in LONGEST_FILES for scope in self.workqueue
                                     if file_name(scope) == name]
                for scope in reversed([s for s in first if s in self.workqueue]):
                    self.workqueue.move_to_end(scope, last=False)
                self._ordered = True
            super()._assign_work_unit(node)

    if config.getoption("dist") != "loadfile":
        return None
    return LongestFirst(config, log)


def shared_store_names() -> list[str]:
    """Names of the broker-written reference stores, or [] when ../shared is absent."""
    if not SHARED_STORES.is_dir():
        return []
    return sorted(p.name for p in SHARED_STORES.iterdir() if (p / "store").is_dir())


def reference_dirs() -> list[Path]:
    """The copied fixture store plus every shared store (tests parametrise over these)."""
    return [FIXTURE_STORE] + [SHARED_STORES / n for n in shared_store_names()]


@functools.lru_cache(maxsize=None)
def write_log(ref: Path) -> dict:
    """The store's write.json(.gz): what was sent and what the broker answered ({} if absent)."""
    for name, opener in (("write.json.gz", gzip.open), ("write.json", open)):
        if (ref / name).is_file():
            with opener(ref / name, "rt", encoding="utf-8") as fh:
                return json.load(fh)
    return {}



def shared_json(name: str, file: str):
    """A shared store's JSON file (``.gz`` or plain), parsed; skips when it is absent."""
    path = SHARED_STORES / name / file
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    opener = gzip.open if file.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def invoke(*argv) -> tuple[int, str, str]:
    """Run the CLI in this process: (exit code, stdout, stderr)."""
    from contextlib import redirect_stderr, redirect_stdout
    from io import StringIO
    from mqtool.cli.main import run
    out, err = StringIO(), StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            run(["--no-progress", *map(str, argv)])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def leaf_commands(group=None, prefix=()):
    """Every command path of the CLI (("verify",), ("spark", "audit"), ...)."""
    import typer
    from mqtool.cli.main import app
    group = group or typer.main.get_command(app)
    for name, cmd in sorted(group.commands.items()):
        if hasattr(cmd, "commands"):
            yield from leaf_commands(cmd, prefix + (name,))
        else:
            yield prefix + (name,)

# Properties of a classic batch as a whole (MessageExtBatch): the client's MessageBatch carries
# WAIT, the broker adds CLUSTER. CommitLog's batch encoder appends them to every inner message's
# own property bytes.
CLASSIC_BATCH_PROPERTIES = ("WAIT", "CLUSTER")


@functools.lru_cache(maxsize=None)
def classic_batch_offsets(ref: Path) -> frozenset[int]:
    """CommitLog offsets of the records a classic batch send became (one per message), from the
    msgIds the broker answered (offsetMsgId: the offset is its last 16 hex digits)."""
    return frozenset(int(msg_id[-16:], 16)
                     for m in write_log(ref).get("messages", [])
                     if is_classic_batch(m) and m.get("msgId")
                     for msg_id in m["msgId"].split(","))


def is_classic_batch(sent: dict) -> bool:
    """A write.json send that was a classic batch (5.3.3 logs say ``kind``, head-* logs
    ``classicBatch``)."""
    return sent.get("kind") == "classicBatch" or sent.get("classicBatch") is True


DLEDGER_STORES = ("dledger-clean", "dledger-crash", "dledger-clean-damaged")


@pytest.fixture(scope="session")
def unpack_shared(tmp_path_factory):
    """``unpack_shared(name, tarball="store.tar.gz")``: the folder a shared store's tarball holds
    (store/ or recovered/), unpacked once per test session into a temporary folder. Tests must
    not change it: copy it first. Skips when ../shared or the tarball is absent."""
    base = tmp_path_factory.mktemp("shared-unpacked")
    unpacked: dict[tuple[str, str], Path] = {}

    def unpack(name: str, tarball: str = "store.tar.gz") -> Path:
        source = SHARED_STORES / name / tarball
        if not source.is_file():
            pytest.skip(f"{source} is absent")
        if (name, tarball) not in unpacked:
            # every tarball of a store holds one folder (store/, recovered/): they unpack side
            # by side, as the store's shared folder has them
            dest = base / name
            dest.mkdir(exist_ok=True)
            with tarfile.open(source) as archive:
                (top,) = {member.split("/", 1)[0] for member in archive.getnames()}
                archive.extractall(dest, filter="data")
            unpacked[name, tarball] = dest / top
        return unpacked[name, tarball]

    return unpack


@pytest.fixture(scope="session")
def dledger_stores(unpack_shared) -> dict[str, Path]:
    """The three DLedger-mode stores the real 4.9.8 broker wrote, unpacked: name -> store root."""
    return {name: unpack_shared(name) for name in DLEDGER_STORES}


@pytest.fixture
def shared_stores() -> Path:
    if not SHARED_STORES.is_dir():
        pytest.skip("../shared/rocketmq-stores is absent")
    return SHARED_STORES


@pytest.fixture(scope="session")
def v5_timer_crash_unpacked(unpack_shared) -> Path:
    """v5-timer-crash's store.tar.gz and recovered.tar.gz unpacked once per session: the folder
    holding ``store/`` and ``recovered/`` (shared by tests: copy before changing anything)."""
    unpack_shared("v5-timer-crash", "store.tar.gz")
    return unpack_shared("v5-timer-crash", "recovered.tar.gz").parent


# --- both record walks: the native core and the numpy path ----------------------------------------

WALK_PATHS = ("native", "numpy")


def available_walks() -> list[str]:
    """The record walks this install has (the numpy path always)."""
    from mqtool.scan import native
    return [p for p in WALK_PATHS if p == "numpy" or native.core is not None]


@contextlib.contextmanager
def use_walk(path: str):
    """Runs the block (in this process) on one record walk."""
    from mqtool.scan import native
    saved = native.core
    if path == "numpy":
        native.core = None
    try:
        yield
    finally:
        native.core = saved


@pytest.fixture(scope="module", params=WALK_PATHS)
def walk_path(request):
    """Runs a test once on each record walk: the native core (mqtool._native) and the numpy path
    (also in the mqtool processes the test starts, through MQTOOL_NATIVE=0). Conformance tests
    that reach the scanner's batches use it (``@pytest.mark.usefixtures("walk_path")``); module
    scope keeps hypothesis' function-scoped-fixture check quiet and each path's tests together."""
    from mqtool.scan import native
    saved_core, saved_env = native.core, os.environ.get("MQTOOL_NATIVE")
    if request.param == "native" and native.core is None:
        pytest.skip(f"no native core ({native.reason})")
    if request.param == "numpy":
        native.core = None
        os.environ["MQTOOL_NATIVE"] = "0"
    try:
        yield request.param
    finally:
        native.core = saved_core
        if saved_env is None:
            os.environ.pop("MQTOOL_NATIVE", None)
        else:
            os.environ["MQTOOL_NATIVE"] = saved_env


@pytest.fixture(scope="session")
def spark():
    """A Spark session on local[2], one per test process (one JVM): the Spark modules a
    process runs share it (a parallel run still places modules in different processes, each
    building its own when it first needs one)."""
    pytest.importorskip("pyspark")
    from mqtool.spark.session import build_session

    session = build_session("local[2]", app_name="mqtool-tests",
                            conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture
def fixture_store() -> Path:
    """The broker-written clean-small store shipped in fixtures/ (read-only: copy before use)."""
    return FIXTURE_STORE / "store"


@pytest.fixture
def store_copy(tmp_path) -> Path:
    """A writable copy of the fixtures/ store."""
    dest = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", dest)
    return dest


def run_mqtool(*args, check_no_traceback: bool = True, env=None, exec_python: bool = False,
               memory_headroom: int | None = None, **kwargs):
    """Run the CLI in a child process: its own pid, file descriptors, exit status (a signal
    that kills it is a negative return code) and working directory, as ``subprocess.run``.

    The child is forked from this test process, which has imported the CLI already: a new
    interpreter's start (~0.5 s of imports) is paid only with ``exec_python`` or an ``env``
    (environment variables are read at import: MQTOOL_NATIVE, the kill points), where the child
    runs ``python -m mqtool`` as a user's shell would. ``memory_headroom`` caps how far the
    child's address space may grow past what it starts with (RLIMIT_AS)."""
    argv = ["--no-progress", *map(str, args)]
    if exec_python or env is not None or set(kwargs) - {"cwd", "timeout", "input"}:
        proc = subprocess.run([sys.executable, "-m", "mqtool", *argv], capture_output=True,
                              text=True, env=env, **kwargs)
    else:
        proc = _forked_cli(argv, memory_headroom=memory_headroom, **kwargs)
    if check_no_traceback:
        assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@functools.cache
def _warm_cli() -> None:
    """What every command imports and builds at its start, done once before the forks (the
    parts each command imports lazily too, Spark excepted)."""
    import importlib
    from mqtool.cli.main import command
    command()
    for name in ("numpy", "mqtool.scan", "mqtool.verify", "mqtool.repair", "mqtool.inspect",
                 "mqtool.query", "mqtool.salvage", "mqtool.consumers", "mqtool.diff",
                 "mqtool.transactions", "mqtool.failover", "mqtool.forge", "mqtool.rocksdb_cq"):
        importlib.import_module(name)


def _address_space() -> int:
    with open("/proc/self/status") as fh:
        kib = next(line.split()[1] for line in fh if line.startswith("VmSize:"))
    return int(kib) << 10


def _forked_cli(argv: list[str], cwd=None, timeout=None, input=None,
                memory_headroom: int | None = None) -> subprocess.CompletedProcess:
    import signal
    import tempfile
    import time
    import traceback
    from mqtool.cli.main import run
    _warm_cli()

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryFile() as feed:
        if input is not None:
            feed.write(input.encode() if isinstance(input, str) else input)
            feed.seek(0)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:                                          # the child: never returns
            code = 1
            try:
                os.setpgid(0, 0)
                os.dup2(feed.fileno() if input is not None else os.open(os.devnull, os.O_RDONLY), 0)
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdin = open(0, "r", closefd=False)
                sys.stdout = open(1, "w", closefd=False)
                sys.stderr = open(2, "w", closefd=False)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                if cwd is not None:
                    os.chdir(cwd)
                if memory_headroom is not None:
                    import resource
                    limit = _address_space() + memory_headroom
                    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                try:
                    run(argv)
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                except BaseException:                      # noqa: BLE001 - as python would
                    traceback.print_exc()
                    code = 1
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise subprocess.TimeoutExpired(["mqtool", *argv], timeout)
            time.sleep(0.01)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            ["mqtool", *argv], os.waitstatus_to_exitcode(status),
            out.read().decode("utf-8", "surrogateescape"),
            err.read().decode("utf-8", "surrogateescape"))


@pytest.fixture
def mqtool():
    return run_mqtool


def sparse_copytree(source: Path, dest: Path) -> Path:
    """Copy a store keeping runs of zero MiBs as holes (a DLedger index is 160 MiB of mostly
    nothing); written independently of mqtool's own sparse copy, which tests check."""
    for folder, _dirs, files in os.walk(source):
        target = dest / Path(folder).relative_to(source)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            with open(Path(folder) / name, "rb") as src, open(target / name, "wb") as out:
                while chunk := src.read(1 << 20):
                    if chunk.count(0) == len(chunk):
                        out.seek(len(chunk), os.SEEK_CUR)
                    else:
                        out.write(chunk)
                out.truncate()
    return dest


def tree_digests(root: Path) -> dict[str, str]:
    """sha256 of every file below ``root`` by relative path, mqtool's backups left out."""
    import hashlib
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".mqtool")]
        for name in files:
            path = Path(folder) / name
            sha = hashlib.sha256()
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    sha.update(chunk)
            out[path.relative_to(root).as_posix()] = sha.hexdigest()
    return out
