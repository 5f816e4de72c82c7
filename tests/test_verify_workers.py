"""verify in worker processes reports exactly what it reports in one process: the same findings
in the same order and the same recovery prediction, on clean and damaged stores of several
CommitLog files (broker-written ones, and forge stores damaged in several files at once)."""
from __future__ import annotations

import pytest

from conftest import SHARED_STORES, shared_store_names
from mqtool import forge
from mqtool.store import Store
from mqtool.verify import verify_store
from mqtool.cores import available_cores
from mqtool.verify.run import _auto_workers, _threads

# broker-written stores of several CommitLog files, clean, crashed and damaged
REFERENCE = ("clean-small-damaged", "crash-small", "v5-damaged", "v5-propcrc-damaged",
             "clean-multi")


def _outcome(report) -> tuple[list[dict], dict, dict]:
    summary = dict(report.summary)
    return [f.to_dict() for f in report.findings], report.recovery.to_dict(), summary


def _assert_same_for_worker_counts(root, counts=(2, 3), geometry=None, **options):
    def run(workers):
        return _outcome(verify_store(Store(root, **(geometry or {})), workers=workers, **options))
    serial = run(1)
    for count in counts:
        assert run(count) == serial, count
    return serial


@pytest.mark.parametrize("name", [n for n in REFERENCE if n in shared_store_names()] or
                         [pytest.param("absent", marks=pytest.mark.skip("../shared is absent"))])
def test_reference_stores(name):
    root = SHARED_STORES / name / "store"
    assert len(Store(root).commitlog.segments) >= 2
    _assert_same_for_worker_counts(root)


FORGE = dict(cq_units=120, index_slots=200, index_entries=900)
# the forge stores' small geometry is not the broker default (the broker ones say theirs)
GEOMETRY = dict(cq_units_per_file=120, index_slots=200, index_entries=900)


@pytest.fixture(scope="module")
def forged(tmp_path_factory):
    root = tmp_path_factory.mktemp("forged") / "store"
    forge.make_store(root, forge.ForgeOptions(
        messages=2500, seed=13, commitlog_file_size=256 * 1024, delay_ratio=0.05,
        transaction_ratio=0.09, compress_ratio=0.05, **FORGE))
    return root


def test_forge_store_clean(forged):
    assert len(Store(forged).commitlog.segments) >= 5
    findings, _, _ = _assert_same_for_worker_counts(forged, counts=(2, 4),
                                                    geometry=GEOMETRY)
    assert not [f for f in findings if f["severity"] == "error"]


def test_forge_store_damaged_in_several_files(forged, tmp_path):
    import shutil
    root = tmp_path / "store"
    shutil.copytree(forged, root)
    names = [s.name for s in Store(root).commitlog.segments]
    # faults in different files, so that several workers each find some
    forge.damage_store(root, "bit-flip", seed=1, file=names[0], target="body")
    forge.damage_store(root, "bit-flip", seed=2, file=names[2], target="header")
    forge.damage_store(root, "zero-range", seed=3, file=names[3], length=700)
    forge.damage_store(root, "bit-flip", seed=4, file=names[1], target="body")
    findings, _, _ = _assert_same_for_worker_counts(root, counts=(2, 3), geometry=GEOMETRY)
    assert len({f["file"] for f in findings if f["code"].startswith("CL_")}) >= 3
    # --quick checks the same way in workers
    _assert_same_for_worker_counts(root, counts=(2,), geometry=GEOMETRY, quick=True)


def test_workers_left_over_by_the_files_are_threads_of_the_native_pass():
    assert _threads(100, 2) == 1 and _threads(1, 2) == 2 and _threads(3, 8) == 2
    assert _threads(1, 1) == 1 and _threads(1, None) == available_cores()


def test_one_file_on_two_threads_reports_what_one_thread_does(tmp_path):
    """One CommitLog file and two workers: one process whose native pass runs on two threads
    (batches of more than 2 x 4096 records are split), the same report."""
    root = tmp_path / "store"
    forge.make_store(root, forge.ForgeOptions(
        messages=20000, seed=5, commitlog_file_size=64 << 20, delay_ratio=0.05,
        transaction_ratio=0.05, **FORGE))
    forge.damage_store(root, "bit-flip", seed=1, target="body")
    assert len(Store(root).commitlog.segments) == 1
    _assert_same_for_worker_counts(root, counts=(2,), geometry=GEOMETRY)


def test_default_is_one_worker_per_core_and_never_more_than_files():
    assert _auto_workers(100, None) == available_cores()
    assert _auto_workers(1, None) == 1
    assert _auto_workers(3, 8) == 3
    assert _auto_workers(5, 2) == 2


def _one_pass_findings(root) -> list[dict]:
    """verify's findings with every structure check made before any CommitLog file is checked
    (the order of a single pass over the store), for comparison with verify_store, which checks
    IndexFile chains while its workers check the files."""
    from mqtool.verify import run
    store = Store(root, **GEOMETRY)
    checks = run.prepare_checks(store)
    checks.run_later()
    results = [run.check_file(checks.ctx, i, None, store.commitlog)
               for i in range(len(checks.ctx.segments))]
    sink, plan = run.merge_checks(checks, results)
    return [f.to_dict() for f in run._report(store, sink, plan, results).findings]


def test_index_chain_damage_is_reported_alike_by_any_worker_count(forged, tmp_path):
    """IndexFile slots and chains broken (bytes written at the positions the spec gives: a
    40-byte header, 4-byte slots, 20-byte entries of hash, offset, timeDiff, prev_index): the
    findings equal, in content and order, those of a single pass."""
    import shutil
    import struct
    root = tmp_path / "store"
    shutil.copytree(forged, root)
    index = sorted((root / "index").iterdir())[0]
    slots = GEOMETRY["index_slots"]

    def entry(i: int) -> int:
        return 40 + 4 * slots + 20 * i

    with open(index, "r+b") as fh:
        fh.seek(entry(30) + 16)
        fh.write(struct.pack(">i", 29_000))         # prev_index past indexCount
        fh.seek(entry(41) + 16)
        fh.write(struct.pack(">i", 41))             # a link to itself
        fh.seek(entry(52) + 12)
        fh.write(struct.pack(">i", -5))             # a negative timeDiff
        fh.seek(entry(63))
        fh.write(struct.pack(">i", 12345))          # a key hash no key has
        fh.seek(40 + 4 * 7)
        fh.write(struct.pack(">i", 100_000))        # a slot past indexCount
    findings, _, _ = _assert_same_for_worker_counts(root, counts=(2,), geometry=GEOMETRY)
    codes = {f["code"] for f in findings}
    assert {"IDX_DANGLING", "IDX_MISSING_KEY"} <= codes, codes
    assert findings == _one_pass_findings(root)


def test_worker_counts_follow_the_cpu_affinity_not_the_machine():
    """A process confined to one core (taskset, a container's cpuset) defaults to one worker
    for verify and for the repairs, whatever os.cpu_count() says."""
    import os
    import subprocess
    import sys
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this system")
    code = ("import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
            "from mqtool.verify.run import _auto_workers; "
            "from mqtool.cores import available_cores; "
            "print(_auto_workers(100, None), available_cores(), os.cpu_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[:2] == ["1", "1"], out


def test_threads_on_the_cores_start_the_costliest_item_first_and_keep_the_order():
    """map_on_cores (the repairs' compares and backup digests) returns results in the items'
    order whatever order they ran in; the costliest item starts first, so a large IndexFile
    is not left to run alone at the end."""
    import threading
    import time
    from mqtool.cores import map_on_cores

    started: list[int] = []
    lock = threading.Lock()

    def work(item: int) -> int:
        with lock:
            started.append(item)
        time.sleep(0.01)
        return item * item

    items = [3, 1, 40, 2, 7, 5]
    assert map_on_cores(work, items, cost=lambda item: item) == [x * x for x in items]
    if available_cores() >= 2:
        assert 40 in started[:2], started
    assert map_on_cores(work, []) == []
    with pytest.raises(ZeroDivisionError):
        map_on_cores(lambda item: 1 // item, [1, 0, 2], cost=lambda item: item)
