"""``mqtool spark audit`` of store roots reports what ``mqtool verify`` reports, every code, file,
offset, severity and message: on every broker-written store (plain 4.9.8 and 5.3.3, the timer
store, the DLedger-mode ones) and on copies of stores that ``mqtool fixture damage`` or raw byte
writes broke in their DLedger entry headers, ConsumeQueues, IndexFiles and the store's own
files. The expected findings are ``verify_store``'s on the same files.

These audits need no store of test_spark.py: they are a module of their own, with their own
Spark session, so that a parallel test run can place them beside it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from conftest import FIXTURE_STORE, run_mqtool  # noqa: E402
from mqtool import forge  # noqa: E402
from mqtool.store import Store  # noqa: E402
from mqtool.verify import verify_store  # noqa: E402

pytestmark = pytest.mark.spark

#: splits that cut records in half at every boundary of the small stores
SMALL_SPLIT = 64 * 1024


def _verify_findings(report) -> list[tuple]:
    return sorted((f.code, f.file, f.offset, f.severity, f.message) for f in report.findings)


def _audit_findings(rows, broker: str) -> list[tuple]:
    return sorted((f["code"], f["file"], f["offset"], f["severity"], f["message"]) for f in rows
                  if f["broker"] == broker)

def _dledger_template(base: Path) -> tuple[Path, list[dict], list[str]]:
    """A forged DLedger-mode store of 300 messages in 64 KiB data files, to copy and break: its
    root, its entries and the data files they are in."""
    from test_dledger_forge import options, walk_entries

    template = base / "template"
    forge.make_store(template, options(messages=300, commitlog_file_size=64 * 1024,
                                       body_mean=512, body_max=2048))
    entries, _ = walk_entries(template / "dledger-n0" / "data")
    return template, entries, sorted({e["file"] for e in entries})



def test_audit_counts_equal_verify_on_every_reference_store(spark, dledger_stores,
                                                           unpack_shared):
    """One audit over every broker-written store (plain 4.9.8 and 5.3.3, the timer store, and
    the DLedger-mode ones read through their entries): per broker, the records, every code's
    count and every finding (code, file, offset, severity, message) are verify's."""
    from conftest import SHARED_STORES, shared_store_names
    from mqtool.spark import job

    roots = {name: SHARED_STORES / name / "store" for name in shared_store_names()}
    roots.update(dledger_stores)
    if "v5-timer-crash" not in roots and (SHARED_STORES / "v5-timer-crash").is_dir():
        roots["v5-timer-crash"] = unpack_shared("v5-timer-crash")
    result = job.audit(spark, [str(r) for r in roots.values()], broker_names=list(roots),
                       split_size=1 << 18)
    assert result.summary["checks"]["not_checked"] == []
    seen = set()
    for b in result.summary["brokers"]:
        report = verify_store(Store(roots[b["broker"]]))
        assert b["records"] == report.summary["messages_scanned"], b["broker"]
        assert b["by_code"] == report.summary["by_code"], b["broker"]
        for key in ("errors", "warnings", "infos"):
            assert b[key] == report.summary[key], (b["broker"], key)
        assert _audit_findings(result.findings, b["broker"]) == _verify_findings(report), \
            b["broker"]
        seen |= set(report.summary["by_code"])
    assert len(result.summary["brokers"]) == len(roots) >= 3
    if len(roots) > 3:   # the plain stores are here: damaged ones exercise both kinds of code
        assert {"CL_CRC_MISMATCH", "CQ_MISSING", "IDX_DANGLING", "RECOVERY_TRUNCATES",
                "IDX_HASH_MISMATCH", "IDX_MISSING_KEY", "ABORT_PRESENT"} <= seen
    assert not result.summary["notes"]    # DLedger entries chain across splits, headers between


#: the DLedger entry-header fields `fixture damage --target entry-header` breaks whose code the
#: scanner gives (index and term break the sequence of the DLedger walk: DL_INDEX_*, DL_TERM_*)
ENTRY_HEADER_CODES = {"magic": "DL_ENTRY_MAGIC", "pos": "DL_ENTRY_POS", "size": "DL_ENTRY_SIZE",
                      "body_size": "DL_ENTRY_SIZE"}


def test_audit_reports_dledger_entry_header_damage_as_verify_does(spark, tmp_path):
    """Forged DLedger stores, one entry header broken per store by `fixture damage` (entries of
    the last three data files, where the broker's recovery walk looks, and one before), and one
    whose last data file ends inside an entry (DL_ENTRY_TRUNCATED): the audit's findings are
    verify's, every code, at the same files and offsets with the same severities, counted as
    verify counts them."""
    from mqtool.spark import job

    template, entries, files = _dledger_template(tmp_path)
    roots = {}
    for i, field in enumerate(sorted(ENTRY_HEADER_CODES)):
        root = tmp_path / field
        shutil.copytree(template, root)
        victim = [e for e in entries if e["file"] == files[-2 - i % 3]][7]
        proc = run_mqtool("fixture", "damage", root, "--kind", "bit-flip", "--target",
                          "entry-header", "--field", field, "--offset", victim["pos"] + 5,
                          "--seed", "1")
        assert proc.returncode == 0, proc.stderr
        roots[field] = root
    # and a last data file cut in the middle of an entry
    root = tmp_path / "truncated"
    shutil.copytree(template, root)
    victim = [e for e in entries if e["file"] == files[-1]][5]
    os.truncate(root / "dledger-n0" / "data" / files[-1], victim["pos"] - int(files[-1]) + 100)
    roots["truncated"] = root
    result = job.audit(spark, [str(r) for r in roots.values()], broker_names=list(roots),
                       split_size=16 * 1024)
    checked = set(result.summary["checks"]["checked"])
    assert set(ENTRY_HEADER_CODES.values()) <= checked
    for b in result.summary["brokers"]:
        report = verify_store(Store(roots[b["broker"]]))
        assert ENTRY_HEADER_CODES.get(b["broker"], "DL_ENTRY_TRUNCATED") in report.summary["by_code"]
        assert b["by_code"] == report.summary["by_code"], b["broker"]
        assert _audit_findings(result.findings, b["broker"]) == _verify_findings(report), \
            b["broker"]
        assert sorted((f["code"], f["file"], f["offset"]) for f in result.findings
                      if f["broker"] == b["broker"] and f["code"].startswith("DL_ENTRY_")) == \
            sorted((f.code, f.file, f.offset) for f in report.findings
                   if f.code.startswith("DL_ENTRY_"))


def test_audit_checks_consume_queue_files_as_verify_does(spark, tmp_path):
    """A forged store with three broken ConsumeQueue files (one cut short before the next file,
    one with 7 bytes appended, an empty file after the last one): the audit reports verify's
    CQ_FILE_SIZE findings, the same files, offsets and messages, and every other finding of
    verify's, counted as verify counts it."""
    from mqtool.formats import consumequeue as cq_fmt
    from mqtool.spark import job

    root = tmp_path / "store"
    forge.make_store(root, forge.ForgeOptions(messages=600, seed=3, commitlog_file_size=256 * 1024,
                                              cq_units=50))
    queues = sorted(q for q in (root / "consumequeue").glob("*/*") if len(list(q.iterdir())) >= 2)
    assert len(queues) >= 3
    first = sorted(queues[0].iterdir())[0]
    os.truncate(first, first.stat().st_size // 2)
    with open(sorted(queues[1].iterdir())[0], "ab") as f:
        f.write(b"x" * 7)
    last = sorted(queues[2].iterdir())[-1]
    (queues[2] / f"{int(last.name) + 50 * cq_fmt.CQ_STORE_UNIT_SIZE:020d}").write_bytes(b"")
    result = job.audit(spark, [str(root)], broker_names=["cq"], split_size=SMALL_SPLIT)
    report = verify_store(Store(root))
    checked = set(result.summary["checks"]["checked"])
    assert "CQ_FILE_SIZE" in checked
    (broker,) = result.summary["brokers"]
    assert broker["by_code"] == report.summary["by_code"]
    assert _audit_findings(result.findings, "cq") == _verify_findings(report)
    audited_files = sorted((f["file"], f["offset"], f["severity"], f["message"])
                           for f in result.findings if f["code"] == "CQ_FILE_SIZE")
    assert audited_files == sorted((f.file, f.offset, f.severity, f.message)
                                   for f in report.findings if f.code == "CQ_FILE_SIZE")
    assert {f[0].rsplit("/", 1)[0] for f in audited_files} == \
        {q.relative_to(root).as_posix() for q in queues[:3]}


#: the cross-check codes the fault stores below must show between them
CROSS_CHECK_CODES = {"CQ_DANGLING", "CQ_MISMATCH", "CQ_MISSING", "IDX_DANGLING",
                     "IDX_HASH_MISMATCH", "IDX_MISSING_KEY", "BCQ_DANGLING", "BCQ_MISMATCH",
                     "BCQ_GAP", "BCQ_MISSING"}


def _fault_stores(base: Path) -> dict[str, Path]:
    """Copies of the fixture store with ConsumeQueue and IndexFile faults, located from the raw
    bytes: a unit's size changed (CQ_MISMATCH) and another's offset moved off its record
    (CQ_DANGLING, and its record's CQ_MISSING); a ConsumeQueue file deleted by
    ``mqtool fixture damage``; an index entry pointing past the CommitLog (IDX_DANGLING), one
    whose hash is not its key's (IDX_HASH_MISMATCH), a slot emptied (IDX_MISSING_KEY);
    test_verify's random cross-check faults on three seeds; and a forged 5.x store whose
    BatchConsumeQueue units are broken as test_batchcq breaks them (BCQ_MISMATCH, BCQ_GAP,
    BCQ_DANGLING) and whose last units of another queue are erased (BCQ_MISSING)."""
    import random
    import struct

    from test_verify import CQ_UNIT, ENTRY, SLOTS, _damage_raw, _entry_position, _patch

    def copy(name: str) -> Path:
        root = base / name
        shutil.copytree(FIXTURE_STORE / "store", root)
        return root

    def queue_files(root: Path) -> list[Path]:
        return sorted(p for p in (root / "consumequeue").rglob("*") if p.is_file())

    roots = {}
    root = roots["cq-units"] = copy("cq-units")
    first, second = queue_files(root)[:2]
    offset, size, _ = CQ_UNIT.unpack_from(first.read_bytes(), 5 * 20)
    _patch(first, 5 * 20 + 8, struct.pack(">i", size + 10))
    offset, size, _ = CQ_UNIT.unpack_from(second.read_bytes(), 7 * 20)
    _patch(second, 7 * 20, struct.pack(">q", offset + 1))

    root = roots["cq-deleted"] = copy("cq-deleted")
    victim = queue_files(root)[3].relative_to(root).as_posix()
    proc = run_mqtool("fixture", "damage", root, "--kind", "delete-file", "--file", victim)
    assert proc.returncode == 0, proc.stderr

    root = roots["index"] = copy("index")
    first, second = sorted((root / "index").iterdir())[:2]
    data = first.read_bytes()
    count = struct.unpack_from(">i", data, 36)[0]
    _patch(first, _entry_position(count // 2) + 4, struct.pack(">q", 10 ** 12))
    for slot in range(SLOTS):     # a chain of one entry: emptying its slot hides the entry
        head = struct.unpack_from(">i", data, 40 + 4 * slot)[0]
        if head > 0 and head != count // 2 and ENTRY.unpack_from(data, _entry_position(head))[3] == 0:
            break
    _patch(first, 40 + 4 * slot, bytes(4))
    data = second.read_bytes()
    number = struct.unpack_from(">i", data, 36)[0] // 2
    key_hash = ENTRY.unpack_from(data, _entry_position(number))[0]
    _patch(second, _entry_position(number), struct.pack(">i", key_hash ^ 0x10))

    for seed in range(3):
        root = roots[f"random-{seed}"] = copy(f"random-{seed}")
        rng = random.Random(seed)
        for _ in range(3):
            _damage_raw(root, rng)

    root = roots["batch-cq"] = base / "batch-cq"
    forge.make_store(root, forge.ForgeOptions(messages=500, seed=4, broker_version=5,
                                              batch_cq_topics=("OrderTopic",)))
    queues = root / "batchconsumequeue" / "OrderTopic"
    units = bytearray((queues / "1" / f"{0:020d}").read_bytes())
    units[8:12] = struct.pack(">i", 17)                   # unit 0: wrong size
    units[46 + 28:46 + 36] = struct.pack(">q", 99)        # unit 1: msgBaseOffset off the sequence
    units[92:100] = struct.pack(">q", 5)                  # unit 2: points into a record
    (queues / "1" / f"{0:020d}").write_bytes(bytes(units))
    units = bytearray((queues / "2" / f"{0:020d}").read_bytes())
    used = next(i for i in range(len(units) // 46) if units[46 * i:46 * i + 46] == bytes(46))
    units[46 * (used - 3):46 * used] = bytes(46 * 3)
    (queues / "2" / f"{0:020d}").write_bytes(bytes(units))
    return roots


def test_audit_cross_checks_queues_and_indexes_as_verify_does(spark, tmp_path):
    """Stores with ConsumeQueue and IndexFile faults: the audit (verify's per-file joins of
    units and entries with the records as Spark tasks, verify's merge on the driver) reports
    verify's findings, every code, file, offset, severity and message, counted as verify
    counts them."""
    from mqtool.spark import job

    roots = _fault_stores(tmp_path)
    result = job.audit(spark, [str(r) for r in roots.values()], broker_names=list(roots),
                       split_size=SMALL_SPLIT)
    seen = set()
    for b in result.summary["brokers"]:
        report = verify_store(Store(roots[b["broker"]]))
        assert b["checked_by"] == "verify"
        assert b["by_code"] == report.summary["by_code"], b["broker"]
        for key in ("errors", "warnings", "infos"):
            assert b[key] == report.summary[key], (b["broker"], key)
        assert _audit_findings(result.findings, b["broker"]) == _verify_findings(report), \
            b["broker"]
        seen |= set(b["by_code"])
    assert CROSS_CHECK_CODES <= seen, CROSS_CHECK_CODES - seen
    assert len(result.findings) < job.LISTED_FINDINGS    # every finding compared


def test_audit_checks_a_stores_own_files_as_verify_does(spark, tmp_path, unpack_shared):
    """Forged stores with damage only a store's own files show: DLedger entries whose index or
    term `fixture damage` broke (DL_INDEX_SEQUENCE, DL_TERM_ORDER, DL_INDEX_UNIT), a garbled
    DLedger checkpoint, a missing currterm and a topic left out of topics.json (DL_CHECKPOINT,
    TOPIC_NOT_IN_CONFIG); a plain store with an IndexFile header out of range (IDX_HEADER), no
    checkpoint, an abort file, its lock held by this process, a torn consumerOffset.json and a
    delay offset that is no number (CKPT_MISSING, ABORT_PRESENT, LOCK_HELD, CFG_*); and, where
    ../shared is, the broker's timer store with a unit and a slot broken (TIMER_*). Per store,
    every code counts as ``mqtool verify --json`` counts it, and every finding is verify's,
    file, offset, severity and message. The lock is held by another process, as a broker
    holds it (a process never sees its own POSIX lock)."""
    from mqtool.spark import job
    from mqtool.timer import iter_timerwheel

    template, entries, files = _dledger_template(tmp_path)
    roots = {}
    for field in ("index", "term"):
        root = roots[field] = tmp_path / field
        shutil.copytree(template, root)
        victim = [e for e in entries if e["file"] == files[-2]][7]
        proc = run_mqtool("fixture", "damage", root, "--kind", "bit-flip", "--target",
                          "entry-header", "--field", field, "--offset", victim["pos"] + 5,
                          "--seed", "1")
        assert proc.returncode == 0, proc.stderr
    root = roots["dledger-files"] = tmp_path / "dledger-files"
    shutil.copytree(template, root)
    (root / "dledger-n0" / "checkpoint").write_text("committedIndex=x\n")
    (root / "dledger-n0" / "currterm").unlink()
    topics = json.loads((root / "config" / "topics.json").read_text())
    del topics["topicConfigTable"]["OrderTopic"]
    (root / "config" / "topics.json").write_text(json.dumps(topics))

    root = roots["plain"] = tmp_path / "plain"
    forge.make_store(root, forge.ForgeOptions(messages=300, seed=5, commitlog_file_size=64 * 1024,
                                              index_slots=100, index_entries=400))
    index_file = sorted((root / "index").iterdir())[0]
    with open(index_file, "r+b") as f:
        f.seek(36)                      # indexCount
        f.write((10_000).to_bytes(4, "big"))
    (root / "checkpoint").unlink()
    (root / "abort").write_text("4242")
    (root / "config" / "consumerOffset.json").write_text('{"offsetTable":{')
    (root / "config" / "delayOffset.json").write_text('{"offsetTable":{2:"x",5:0}}')
    try:
        timer = unpack_shared("v5-timer-crash", "store.tar.gz")
    except pytest.skip.Exception:
        timer = None
    if timer is not None:
        root = roots["timer"] = tmp_path / "timer"
        shutil.copytree(timer, root)
        log = sorted((root / "timerlog").iterdir())[0]
        with open(log, "r+b") as f:
            f.seek(52 + 12)             # unit 1's magic
            f.write((8).to_bytes(4, "big"))
        used = next(iter_timerwheel(root / "timerwheel"))
        with open(root / "timerwheel", "r+b") as f:
            f.seek(used["file_offset"] + 16)    # the slot's lastPos, to nowhere
            f.write((999_999).to_bytes(8, "big"))

    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys\n"
         "lock = open(sys.argv[1], 'r+b')\n"
         "fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
         "print('held', flush=True)\n"
         "sys.stdin.read()\n", str(roots["plain"] / "lock")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        result = job.audit(spark, [str(r) for r in roots.values()], broker_names=list(roots),
                           split_size=16 * 1024)
        verified = {}
        for name, root in roots.items():
            proc = run_mqtool("verify", "--json", root)
            assert proc.returncode in (0, 1), proc.stderr
            verified[name] = json.loads(proc.stdout)
    finally:
        holder.communicate(timeout=30)
    assert result.summary["checks"]["not_checked"] == []
    seen = set()
    for b in result.summary["brokers"]:
        name = b["broker"]
        assert b["by_code"] == verified[name]["summary"]["by_code"], name
        assert sorted((f["code"], f["file"], f["offset"], f["severity"], f["message"])
                      for f in result.findings if f["broker"] == name) == \
            sorted((f["code"], f["file"], f["offset"], f["severity"], f["message"])
                   for f in verified[name]["findings"]), name
        seen |= set(b["by_code"])
    wanted = {"DL_INDEX_SEQUENCE", "DL_TERM_ORDER", "DL_INDEX_UNIT", "DL_CHECKPOINT",
              "IDX_HEADER", "CKPT_MISSING", "ABORT_PRESENT", "LOCK_HELD", "CFG_UNREADABLE",
              "CFG_BAD_VALUE", "TOPIC_NOT_IN_CONFIG"}
    if timer is not None:
        wanted |= {"TIMER_MAGIC", "TIMER_SLOT_POINTER"}
    assert wanted <= seen, wanted - seen
