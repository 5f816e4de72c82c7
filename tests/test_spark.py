"""``mqtool spark audit|export`` on a real Spark engine, checked against the single-process
commands on the same stores.

Every expected value comes from the single-process path (``verify_store``, the ``dump`` record
stream, ``store_info``) or from the forge's own description of what it damaged; the Spark side
is split scanning in executor processes, Parquet, and Spark SQL, and for store roots verify's
per-file checks as Spark tasks. Stores: the broker-written fixture, two byte-identical forged
brokers (every UNIQ_KEY stored in both), one forged store with eight kinds of damage, and one
whose first file has a blank record over older records; the same CommitLogs again as bare
CommitLog directories (the audit's own CommitLog checks). Split sizes of 64 KiB on 1 MiB files
cut records in half at every boundary.
"""
from __future__ import annotations

import base64
import collections
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from conftest import FIXTURE_STORE, REPO, SHARED_STORES, run_mqtool  # noqa: E402
from mqtool import forge  # noqa: E402
from mqtool.codec import BLANK_RECORD  # noqa: E402
from mqtool.formats import commitlog as cl_fmt  # noqa: E402
from mqtool.inspect import iter_commitlog_records, store_info  # noqa: E402
from mqtool.scan import MessageRecord, Scanner, expand_batches  # noqa: E402
from mqtool.spark.plan import (local_path, make_splits, resolve_inputs,  # noqa: E402
                               parse_split_size)
from mqtool.spark.splits import split_events  # noqa: E402
from mqtool.store import Store  # noqa: E402
from mqtool.verify import verify_store  # noqa: E402

pytestmark = pytest.mark.spark

SMALL_SPLIT = 64 * 1024
#: what a Spark audit's scan checks of a bare CommitLog directory, by verify's codes (the rest
#: need ConsumeQueues and IndexFiles; of a store root verify itself gives every code)
RECORD_CODES = {"CL_BAD_MAGIC", "CL_CRC_MISMATCH", "CL_PROP_CRC_MISMATCH", "CL_LENGTH_MISMATCH",
                "CL_TRUNCATED", "CL_OFFSET_MISMATCH", "CL_FILE_SIZE", "CL_GAP", "CL_STRAY_FILE"}
#: (kind, seed, options, the field or file the forge reports): applied in this order
GAMMA_DAMAGE = [
    ("bit-flip", 21, {"target": "header"}, "physical_offset"),
    ("bit-flip", 18, {"target": "header"}, "queue_offset"),
    ("bit-flip", 20, {"target": "header"}, "queue_id"),
    ("bit-flip", 45, {"target": "header"}, "magic_code"),
    ("bit-flip", 2, {}, "body"),
    ("zero-range", 4, {"file": "commitlog/00000000000001048576"}, None),
    ("delete-file", 0, {"file": "commitlog/00000000000002097152"}, None),
    ("truncate-file", 0, {"file": "commitlog/00000000000004194304"}, None),
    ("stray-file", 0, {}, None),
]


# --- stores --------------------------------------------------------------------------------------

def _stale_store(root: Path) -> int:
    """A store whose first file has a blank record written over a record in its middle, as when
    a file was refilled after a truncation: everything after it is stale but plausible.
    Returns the blank's offset."""
    forge.make_store(root, forge.ForgeOptions(messages=1500, seed=13))
    store = Store(root)
    first = store.commitlog.segments[0]
    records = [e for e in Scanner(store.commitlog).scan_segment(first)
               if type(e) is MessageRecord]
    victim = next(r for r in records if r.offset >= 300_000)
    with open(first.path, "r+b") as fh:
        fh.seek(victim.offset)
        fh.write(BLANK_RECORD.pack(first.length - victim.offset, cl_fmt.BLANK_MAGIC_CODE))
    return victim.offset


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("brokers")
    alpha = base / "alpha"
    forge.make_store(alpha, forge.ForgeOptions(messages=2500, seed=11))
    beta = base / "beta"
    shutil.copytree(alpha, beta)
    gamma = base / "gamma"
    forge.make_store(gamma, forge.ForgeOptions(messages=4000, seed=12))
    for kind, seed, options, expected in GAMMA_DAMAGE:
        report = forge.damage_store(gamma, kind, seed, **options)
        if expected is not None:
            assert report["field"] == expected, (kind, seed, report["field"])
    stale = base / "stale"
    blank_at = _stale_store(stale)
    empty = base / "empty" / "store"   # a broker whose CommitLog directory is empty
    (empty / "commitlog").mkdir(parents=True)
    return {"clean-small": FIXTURE_STORE / "store", "alpha": alpha, "beta": beta,
            "gamma": gamma, "stale": stale, "stale_blank": blank_at, "empty": empty}


BROKERS = ("clean-small", "alpha", "beta", "gamma", "stale", "empty")


def _sources(stores) -> list[str]:
    return [str(stores[n]) for n in BROKERS]


# --- single-process references -------------------------------------------------------------------

def _dump(root, unwrap: bool = False) -> list[dict]:
    """dump's records: the stored ones (an inner batch one record, as the audit counts it), or
    with ``unwrap`` its inner messages, as ``mqtool dump`` shows them."""
    store = Store(root)
    return list(iter_commitlog_records(store.commitlog, resync=True, messages_only=True,
                                       unwrap=unwrap))


def _queue_gaps(records: list[dict]) -> dict:
    """(file, offset) -> (expected, previous offset) of records whose queue offset is not the
    previous dispatched record's plus one, computed from dump's records alone."""
    out, last = {}, {}
    for r in sorted(records, key=lambda r: r["commitlog_offset"]):
        if r["transaction"] not in ("NOT", "COMMIT"):
            continue
        key = (r["topic"], r["queue_id"])
        if key in last and r["queue_offset"] != last[key][0]:
            out[(f"commitlog/{r['file']}", r["file_offset"])] = (last[key][0], last[key][1])
        last[key] = (r["queue_offset"] + 1, r["commitlog_offset"])
    return out


@pytest.fixture(scope="module")
def reference(stores) -> dict:
    out = {}
    for name in BROKERS:
        store = Store(stores[name])
        report = verify_store(store)
        out[name] = {"verify": report, "dump": _dump(stores[name]),
                     "info": store_info(Store(stores[name]))}
    return out


# --- Spark ---------------------------------------------------------------------------------------

SMALL_SPLIT_STORES = ("gamma", "stale")


@pytest.fixture(scope="module")
def audited(spark, stores, tmp_path_factory):
    """64 KiB splits on the damaged stores (records cut at every boundary; each task costs tens
    of milliseconds, so only there), and one task per file on all five brokers."""
    from mqtool.spark import job

    small_out = tmp_path_factory.mktemp("audit-small") / "out"
    small = job.audit(spark, [str(stores[n]) for n in SMALL_SPLIT_STORES], out=str(small_out),
                      split_size=SMALL_SPLIT)
    whole_out = tmp_path_factory.mktemp("audit-whole") / "out"
    whole = job.audit(spark, _sources(stores), out=str(whole_out))
    return {"small": (small, small_out), "whole": (whole, whole_out)}


AUDITS = ["small", "whole"]
#: brokers audited again as bare CommitLog directories (no queues, no IndexFiles)
BARE = ("gamma", "stale", "clean-small")


@pytest.fixture(scope="module")
def bare_audited(spark, stores, tmp_path_factory):
    """The CommitLogs of BARE copied into directories of their own (bare CommitLog directories:
    the audit's own checks of the CommitLog, in Spark SQL), 64 KiB splits, beside the store
    root alpha (verify's checks): one audit of both kinds of input."""
    from mqtool.spark import job

    base = tmp_path_factory.mktemp("bare")
    for name in BARE:
        shutil.copytree(Path(stores[name]) / "commitlog", base / name)
    out = tmp_path_factory.mktemp("audit-bare") / "out"
    result = job.audit(spark, [str(base / n) for n in BARE] + [str(stores["alpha"])],
                       broker_names=[*BARE, "alpha"], out=str(out), split_size=SMALL_SPLIT)
    return result, out


def _table(spark, out: Path, name: str) -> list[dict]:
    return [r.asDict() for r in spark.read.parquet(str(out / name)).collect()]


# --- splits without Spark: each record read exactly once -----------------------------------------

@pytest.mark.parametrize("split_size", [4096, 5000, SMALL_SPLIT, 100_003, 1 << 20])
def test_splits_read_every_event_of_the_sequential_scan_exactly_once(stores, split_size):
    for name in ("clean-small", "gamma", "stale"):
        brokers = resolve_inputs([str(stores[name])])
        sequential = list(Scanner(Store(stores[name]).commitlog, resync=True))
        splits = make_splits(brokers, split_size)
        local = [e for s in splits for e in split_events(s)]
        # the audit's path: runs of records as batches of numpy columns
        batched = [e for s in splits for e in expand_batches(split_events(s, batches=True))]
        # the byte-range reader of non-local schemes, given plain files to read
        ranged = [e for s in splits
                  for e in split_events(s, opener=lambda url: open(local_path(url), "rb"))]
        if name == "stale":
            # splits after the blank find the stale records; the driver drops them (below)
            blank = stores["stale_blank"]
            first = brokers[0].files[0]
            local = [e for e in local if not (first.base_offset <= e.offset < first.base_offset
                                              + first.length and e.offset > blank)]
            ranged = [e for e in ranged if not (first.base_offset <= e.offset < first.base_offset
                                                + first.length and e.offset > blank)]
            batched = [e for e in batched if not (first.base_offset <= e.offset < first.base_offset
                                                  + first.length and e.offset > blank)]
        assert local == sequential, name
        assert batched == sequential, name
        assert ranged == sequential, name


def test_small_splits_cut_records_in_half(stores):
    records = [r for r in _dump(stores["alpha"])]
    cut = [r for r in records if r["file_offset"] // SMALL_SPLIT
           != (r["file_offset"] + r["total_size"] - 1) // SMALL_SPLIT]
    assert len(cut) >= 40   # every 64 KiB boundary of the 1 MiB files lands inside a record


def test_split_size_syntax():
    assert parse_split_size("128m") == 128 << 20
    assert make_splits(resolve_inputs([str(FIXTURE_STORE / "store")]), 128 << 20)[0].end \
        == 1 << 20
    gib = 1 << 30
    assert len(range(0, gib, parse_split_size("128m"))) == 8


def test_broker_names_and_commitlog_directories(stores, tmp_path):
    fixture = resolve_inputs([str(FIXTURE_STORE / "store")])[0]
    assert fixture.name == "clean-small" and not fixture.bare
    bare = resolve_inputs([str(stores["alpha"] / "commitlog")])[0]
    assert (bare.name, bare.bare) == ("alpha", False)   # .../alpha/commitlog: alpha's CommitLog
    assert [f.name for f in bare.files] == [f.name for f in resolve_inputs(
        [str(stores["alpha"])])[0].files]
    named = resolve_inputs([str(stores["alpha"]), f"file://{stores['beta']}"], ["a", "b"])
    assert [b.name for b in named] == ["a", "b"] and named[1].files


def test_planning_through_a_lister_for_other_schemes(stores):
    """Non-local inputs are listed by a lister (the session's Hadoop FileSystem in the jobs);
    here one that serves an archive:// tree from the damaged store on disk."""
    from mqtool.spark.plan import ListedEntry, layout_findings

    root = stores["gamma"]

    def lister(url: str):
        path = root.parent / url[len("archive://"):]
        if not path.exists():
            return None
        return [ListedEntry(p.name, f"archive://{p.relative_to(root.parent).as_posix()}",
                            p.is_dir(), p.stat().st_size) for p in sorted(path.iterdir())]

    remote = resolve_inputs(["archive://gamma"], lister=lister)[0]
    local = resolve_inputs([str(root)])[0]
    assert not remote.local and remote.name == "gamma"
    assert [(f.name, f.base_offset, f.length) for f in remote.files] == \
        [(f.name, f.base_offset, f.length) for f in local.files]
    assert remote.stray == local.stray and remote.file_size == local.file_size == 1 << 20
    assert [(f["code"], f["file"]) for f in layout_findings(remote)] == \
        [(f["code"], f["file"]) for f in layout_findings(local)]
    assert all(s.url.startswith("archive://") for s in make_splits([remote], 1 << 19))


# --- the audit against verify and dump -----------------------------------------------------------

def _brokers(result) -> list[str]:
    return [b["broker"] for b in result.summary["brokers"]]


@pytest.mark.parametrize("which", AUDITS)
def test_audit_counts_records_as_verify_and_dump_do(audited, reference, spark, which):
    result, out = audited[which]
    by_broker = {b["broker"]: b for b in result.summary["brokers"]}
    messages = collections.Counter(r["broker"] for r in _table(spark, out, "messages"))
    for name in _brokers(result):
        ref = reference[name]
        assert by_broker[name]["records"] == ref["verify"].summary["messages_scanned"] \
            == len(ref["dump"]) == messages[name], name
        assert by_broker[name]["bytes"] == sum(r["total_size"] for r in ref["dump"])
    assert result.summary["totals"]["records"] == sum(len(reference[n]["dump"])
                                                      for n in _brokers(result))


@pytest.mark.parametrize("which", AUDITS)
def test_messages_table_equals_dump(audited, reference, spark, which):
    result, out = audited[which]
    columns = ("file", "file_offset", "commitlog_offset", "total_size", "topic", "queue_id",
               "queue_offset", "physical_offset", "sys_flag", "transaction", "born_timestamp",
               "store_timestamp", "reconsume_times", "tags", "keys", "uniq_key",
               "body_crc", "body_crc_ok", "prop_crc_ok", "body_length", "magic_version")
    rows = collections.defaultdict(set)
    for r in _table(spark, out, "messages"):
        rows[r["broker"]].add(tuple(r[c] for c in columns))
    for name in _brokers(result):
        expected = {tuple(d[c] for c in columns) for d in reference[name]["dump"]}
        assert rows[name] == expected, name


def _verify_findings(report) -> list[tuple]:
    return sorted((f.code, f.file, f.offset, f.severity, f.message) for f in report.findings)


def _audit_findings(rows, broker: str) -> list[tuple]:
    return sorted((f["code"], f["file"], f["offset"], f["severity"], f["message"]) for f in rows
                  if f["broker"] == broker)


def _severity_counts(rows) -> collections.Counter:
    return collections.Counter((f["code"], f["severity"]) for f in rows)


@pytest.mark.parametrize("which", AUDITS)
def test_store_root_findings_are_verifys(audited, reference, spark, which):
    """Every input of these audits is a store root on the local file system: its findings table
    is verify's findings, every code (the CommitLog's, the cross-checks of ConsumeQueue units
    and IndexFile entries against the records, the recovery prediction's), at the same files
    and offsets with the same severities and messages, and the summary counts them as verify."""
    result, out = audited[which]
    table = _table(spark, out, "findings")
    by_broker = {b["broker"]: b for b in result.summary["brokers"]}
    for name in _brokers(result):
        report = reference[name]["verify"]
        assert by_broker[name]["checked_by"] == "verify"
        assert _audit_findings(table, name) == _verify_findings(report), name
        assert by_broker[name]["by_code"] == report.summary["by_code"], name
        for key in ("errors", "warnings", "infos"):
            assert by_broker[name][key] == report.summary[key], (name, key)
        assert _severity_counts(f for f in table if f["broker"] == name) == \
            collections.Counter((f.code, f.severity) for f in report.findings)
    found = {f["code"] for f in table if f["broker"] == "gamma"}
    assert found >= {"CL_CRC_MISMATCH", "CL_OFFSET_MISMATCH", "CL_BAD_MAGIC", "CL_LENGTH_MISMATCH",
                     "CL_TRUNCATED", "CL_FILE_SIZE", "CL_GAP", "CL_STRAY_FILE", "CQ_QUEUE_GAP"}
    # what only verify's cross-checks and recovery prediction give
    assert found & {"CQ_DANGLING", "CQ_MISSING", "CQ_MISMATCH"} and \
        found & {"IDX_DANGLING", "IDX_HASH_MISMATCH", "RECOVERY_TRUNCATES"}
    assert not [f for f in table if f["broker"] == "clean-small"]


def test_bare_commitlog_directories_keep_the_scans_own_checks(bare_audited, reference, spark):
    """A bare CommitLog directory gets the audit's CommitLog checks: CL_* findings equal
    verify's on the same files (stray names of the CommitLog directory only), queue-offset gaps
    equal dump's over every record; no other code. The summary says which codes hold for which
    inputs: a store root in the same audit still gets verify's every code."""
    from mqtool.spark.job import SCAN_CODES, SCAN_NOTES, VERIFY_ONLY_NOTE
    from mqtool.vocabulary import CODES

    result, out = bare_audited
    table = _table(spark, out, "findings")
    by_broker = {b["broker"]: b for b in result.summary["brokers"]}
    for name in BARE:
        rows = [f for f in table if f["broker"] == name]
        assert by_broker[name]["checked_by"] == "scan"
        assert {f["code"] for f in rows} <= set(SCAN_CODES), name
        assert by_broker[name]["by_code"] == dict(collections.Counter(f["code"] for f in rows))
        found = {(f["code"], f["file"], f["offset"]): f for f in rows if f["code"] in RECORD_CODES}
        expected = {(f.code, f.file.removeprefix("commitlog/"), f.offset): f
                    for f in reference[name]["verify"].findings if f.code in RECORD_CODES
                    and (f.code != "CL_STRAY_FILE" or f.file.startswith("commitlog/"))}
        assert set(found) == set(expected), name
        for key, f in expected.items():
            # verify may append what its recovery prediction makes of a finding
            assert f.message.startswith(found[key]["message"]), key
            assert found[key]["commitlog_offset"] == f.commitlog_offset
        gaps = {(f["file"], f["offset"]): f for f in rows if f["code"] == "CQ_QUEUE_GAP"}
        expected_gaps = {(file.removeprefix("commitlog/"), offset): value for (file, offset), value
                         in _queue_gaps(reference[name]["dump"]).items()}
        assert set(gaps) == set(expected_gaps), name
        for key, (want, previous) in expected_gaps.items():
            assert json.loads(gaps[key]["details"]) == {"expected": want}
            assert f"after the record at {previous})" in gaps[key]["message"]
    assert {f["code"] for f in table if f["broker"] == "gamma"} >= {
        "CL_CRC_MISMATCH", "CL_OFFSET_MISMATCH", "CL_BAD_MAGIC", "CL_LENGTH_MISMATCH",
        "CL_TRUNCATED", "CL_FILE_SIZE", "CL_GAP", "CL_STRAY_FILE", "CQ_QUEUE_GAP"}
    assert not [f for f in table if f["broker"] == "clean-small"]
    # the store root beside them: verify's findings
    assert by_broker["alpha"]["checked_by"] == "verify"
    assert _audit_findings(table, "alpha") == _verify_findings(reference["alpha"]["verify"])
    assert by_broker["alpha"]["by_code"] == reference["alpha"]["verify"].summary["by_code"]
    checks = result.summary["checks"]
    assert set(checks["checked"]) == set(CODES) and checks["not_checked"] == []
    assert checks["notes"] == {**SCAN_NOTES, **{code: VERIFY_ONLY_NOTE for code in CODES
                                                if code not in SCAN_CODES}}


def test_an_audit_of_bare_directories_alone_lists_what_it_does_not_check(spark, stores,
                                                                          tmp_path):
    """Without a store root the audit checks the scan's codes only; every other code of
    verify's is listed as not checked, never reported with a wrong count."""
    from mqtool.spark import job
    from mqtool.vocabulary import CODES

    shutil.copytree(Path(stores["gamma"]) / "commitlog", tmp_path / "gamma")
    result = job.audit(spark, [str(tmp_path / "gamma")])
    checks = result.summary["checks"]
    assert checks["checked"] == list(job.SCAN_CODES)
    assert set(checks["not_checked"]) == set(CODES) - set(job.SCAN_CODES)
    assert {"CQ_DANGLING", "CQ_MISMATCH", "CQ_MISSING", "IDX_DANGLING", "IDX_HASH_MISMATCH",
            "IDX_MISSING_KEY", "RECOVERY_TRUNCATES", "CL_STALE_DATA"} <= set(checks["not_checked"])
    assert checks["notes"] == job.SCAN_NOTES
    (broker,) = result.summary["brokers"]
    assert broker["checked_by"] == "scan" and set(broker["by_code"]) <= set(job.SCAN_CODES)


@pytest.mark.parametrize("which", AUDITS)
def test_per_queue_figures_equal_info_and_dump(audited, reference, which):
    result, _ = audited[which]
    queues = {(q["broker"], q["topic"], q["queue_id"]): q for q in result.summary["queues"]}
    for name in _brokers(result):
        ref = reference[name]
        per_queue = collections.defaultdict(list)
        for d in ref["dump"]:
            per_queue[(d["topic"], d["queue_id"])].append(d)
        assert {k[1:] for k in queues if k[0] == name} == set(per_queue), name
        gap_at = set(_queue_gaps(ref["dump"]))
        for key, records in per_queue.items():
            q = queues[(name, *key)]
            dispatched = [r for r in records if r["transaction"] in ("NOT", "COMMIT")]
            assert q["records"] == len(records)
            assert q["messages"] == len(dispatched)
            assert q["bytes"] == sum(r["total_size"] for r in records)
            assert q["min_store_timestamp"] == min(r["store_timestamp"] for r in records)
            assert q["max_store_timestamp"] == max(r["store_timestamp"] for r in records)
            assert q["min_queue_offset"] == min((r["queue_offset"] for r in dispatched),
                                                default=None)
            assert q["max_queue_offset"] == max((r["queue_offset"] for r in dispatched),
                                                default=None)
            assert q["crc_failures"] == sum(1 for r in records if r["body_crc_ok"] is False
                                            and r["body_length"] > 0)
            assert q["gaps"] + q["duplicates"] == sum(
                1 for r in dispatched if (f"commitlog/{r['file']}", r["file_offset"]) in gap_at)
        if name in ("clean-small", "alpha", "beta"):
            # the clean stores: exactly info's topic/queue table
            for row in ref["info"]["topics"]:
                if row["commitlog"] is None:
                    continue
                q = queues[(name, row["topic"], row["queue_id"])]
                for field in ("messages", "min_queue_offset", "max_queue_offset", "prepared",
                              "rollback"):
                    assert q[field] == row["commitlog"][field], (name, row["topic"], field)


def test_uniq_keys_stored_in_two_brokers(audited, reference):
    result, _ = audited["whole"]
    brokers_of = collections.defaultdict(set)
    copies = collections.Counter()
    for name in _brokers(result):
        for d in reference[name]["dump"]:
            if d["uniq_key"]:
                brokers_of[d["uniq_key"]].add(name)
                copies[d["uniq_key"]] += 1
    summary = result.summary["uniq_keys"]
    assert summary["stored_more_than_once"] == sum(1 for k in copies if copies[k] > 1)
    assert summary["across_brokers"] == sum(1 for k in brokers_of if len(brokers_of[k]) > 1)
    alpha_keys = {d["uniq_key"] for d in reference["alpha"]["dump"] if d["uniq_key"]}
    assert summary["across_brokers"] >= len(alpha_keys) > 1000
    assert len(summary["across_brokers_sample"]) == 20
    assert all({"alpha", "beta"} <= set(s["brokers"]) for s in summary["across_brokers_sample"])


def test_stale_records_past_a_blank_are_dropped(audited, bare_audited, stores, reference,
                                                spark):
    blank = stores["stale_blank"]
    # the store root is read a file per task, which stops at the blank as the broker does; as
    # a bare CommitLog directory in 64 KiB splits, a split after the blank did read the stale
    # records, which must not count either
    bare, _ = bare_audited
    assert any(s["broker"] == "stale" and s["entry"] is not None and s["entry"] > blank
               and s["file"] == "00000000000000000000" for s in bare.sides)
    for result, out in (audited["small"], bare_audited):
        rows = [r for r in _table(spark, out, "messages") if r["broker"] == "stale"]
        assert len(rows) == len(reference["stale"]["dump"])
        assert not any(r["file"] == "00000000000000000000" and r["commitlog_offset"] > blank
                       for r in rows)
        figures = next(b for b in result.summary["brokers"] if b["broker"] == "stale")
        assert figures["records"] == len(reference["stale"]["dump"])


def test_summary_holes_files_and_outputs(audited, stores, spark):
    result, out = audited["small"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary == json.loads(json.dumps(result.summary))
    gamma = next(b for b in summary["brokers"] if b["broker"] == "gamma")
    kinds = collections.Counter(h["kind"] for h in summary["holes"] if h["broker"] == "gamma")
    assert kinds["file_gap"] == 1 and gamma["missing_bytes"] == 1 << 20
    assert kinds["corrupt"] == gamma["corrupt_regions"] >= 2
    files = {(f["broker"], f["file"]): f for f in _table(spark, out, "files")}
    files.update({(f["broker"], f["file"]): f
                  for f in _table(spark, audited["whole"][1], "files")})
    assert files[("clean-small", "00000000000000000000")]["end_kind"] == "blank"
    assert files[("gamma", "00000000000004194304")]["end_kind"] == "corrupt"
    assert files[("stale", "00000000000000000000")]["end_kind"] == "blank"
    assert files[("stale", "00000000000000000000")]["data_end"] == stores["stale_blank"]
    assert any((out / "messages" / "broker=gamma").glob("store_date=*/*.parquet"))
    assert (out / "uniq_key_duplicates").is_dir() and (out / "findings" / "broker=gamma").is_dir()
    assert result.errors == summary["totals"]["errors"] > 0
    assert summary["executor_code"] and summary["notes"] == []


def _files(result) -> list[dict]:
    return [{"length": side["length"], "file": side["file"]}
            for side in {(s["broker"], s["file"]): s for s in result.sides}.values()]


def test_one_task_per_file_gives_the_same_answers(audited):
    small, _ = audited["small"]
    whole, _ = audited["whole"]
    # store roots verify checks are read a file per task (verify's checks and the rows from
    # one read), whatever the split size; bare CommitLog directories keep their byte ranges
    # (bare_audited, test_bare_commitlog_directories_keep_the_scans_own_checks)
    assert small.summary["tasks"] == sum(1 for f in _files(small) if f["length"])
    assert whole.summary["tasks"] == sum(1 for f in _files(whole) if f["length"])
    for b in small.summary["brokers"]:
        other = next(x for x in whole.summary["brokers"] if x["broker"] == b["broker"])
        for key in ("records", "bytes", "by_code", "errors", "gaps", "duplicates",
                    "corrupt_regions", "crc_failures", "zero_holes", "missing_bytes"):
            assert b[key] == other[key], (b["broker"], key)
    assert small.summary["queues"] == [q for q in whole.summary["queues"]
                                       if q["broker"] in SMALL_SPLIT_STORES]


def test_audit_without_out_gives_the_same_answers(spark, stores, audited):
    """Without --out the tasks write nothing and return only their partials."""
    from mqtool.spark import job

    whole, _ = audited["whole"]
    kept = job.audit(spark, [str(stores["stale"]), str(stores["gamma"])], split_size=1 << 18)
    assert kept.out is None and kept.summary["out"] is None
    for b in kept.summary["brokers"]:
        other = next(x for x in whole.summary["brokers"] if x["broker"] == b["broker"])
        for key in ("records", "bytes", "by_code", "gaps", "duplicates", "crc_failures"):
            assert b[key] == other[key], (b["broker"], key)
    # both list their first LISTED_FINDINGS by broker, file, offset and code: where the whole
    # audit's list ends inside gamma and stale, it is the start of this one
    ordered = [(f["broker"], f["file"], f["offset"], f["code"]) for f in kept.findings]
    assert ordered == sorted(ordered)
    part = [(f["broker"], f["file"], f["offset"], f["code"]) for f in whole.findings
            if f["broker"] in ("stale", "gamma")]
    if len(whole.findings) < job.LISTED_FINDINGS:
        assert part == ordered
    else:
        assert part == ordered[:len(part)] and part


def test_the_table_tasks_write_equals_the_one_spark_writes(spark, stores, tmp_path):
    """A local --out: the tasks write the messages table with pyarrow. Spark's own partitioned
    writer, fed the same Arrow batches through mapInArrow, is the reference: the same
    partition directories and the same rows, damaged and stale stores included."""
    from mqtool.spark import scanpass, schema

    brokers, splits = scanpass.plan(spark, [str(stores["gamma"]), str(stores["stale"])], None,
                                SMALL_SPLIT)
    struct = schema.struct_type(schema.MESSAGE_COLUMNS + (("store_date", "string"),))
    by_tasks, by_spark = tmp_path / "tasks", tmp_path / "spark"
    sides, _, _ = scanpass.write_and_verify(spark, brokers, splits, True, str(by_tasks),
                                            "errorifexists")
    _, reports = scanpass.arrow_scan(spark, splits, True, struct, str(by_spark), "errorifexists")

    def reported(values):     # the worker's peak memory is its own; partials are the tasks'
        return [{k: v for k, v in side.items() if k not in ("peak_rss", "queues", "problems")}
                for side in scanpass.dedupe_sides(values)]

    assert reported(sides) == reported(reports)

    def folders(root):
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                      if p.is_dir())

    assert folders(by_tasks) == folders(by_spark) and len(folders(by_tasks)) > 2
    assert not list(by_tasks.rglob(".*inprogress"))
    columns = [*schema.names(schema.MESSAGE_COLUMNS), "store_date"]

    def rows(root):
        frame = spark.read.schema(struct).parquet(str(root))
        return sorted(tuple(r) for r in frame.select(*columns).collect())

    assert rows(by_tasks) == rows(by_spark)


def test_partition_folders_are_named_as_spark_names_them(spark, tmp_path):
    """Spark escapes some characters of a partition value in its folder's name and unescapes
    them when it reads the table back: the tasks' writer must name folders the same way."""
    from mqtool.spark.tablewrite import partition_dir

    values = ["plain-0", "a%b", "x:y=z", "q?#*", "sp ace+@.", "br[a]c{e}^'\"", "tab\tnl\n"]
    spark.createDataFrame([(v, 1) for v in values], "broker string, n int") \
        .write.partitionBy("broker").parquet(str(tmp_path / "t"))
    written = {p.name for p in (tmp_path / "t").iterdir() if p.is_dir()}
    assert written == {partition_dir("broker", v) for v in values}
    read = spark.read.parquet(str(tmp_path / "t")).select("broker").collect()
    assert sorted(r[0] for r in read) == sorted(values)


def test_a_split_written_twice_leaves_one_copy_of_its_rows(stores, tmp_path):
    """A retried or speculative task writes the same parts again: the table holds each row
    once, and no half-written file is left."""
    import pyarrow.dataset as ds

    from mqtool.spark.tablewrite import audit_write_partition

    brokers = resolve_inputs([str(stores["gamma"])])
    splits = make_splits(brokers, SMALL_SPLIT)
    table = tmp_path / "messages"
    def sides(numbers):
        return [value for key, value in audit_write_partition(numbers, splits, True, str(table))
                if key == "side"]

    first = sides(range(len(splits)))

    def read():
        return ds.dataset(str(table), format="parquet", partitioning="hive").to_table()

    written = read()
    # a record per row, and an opened inner batch's messages after it
    assert written.num_rows >= sum(s["messages"] for s in first) > 0
    files = sorted(p.relative_to(table) for p in table.rglob("*.parquet"))
    again = sides([3, 0])
    assert [(s["file"], s["index"]) for s in again] == \
        [(splits[3].name, splits[3].index), (splits[0].name, splits[0].index)]
    assert sorted(p.relative_to(table) for p in table.rglob("*.parquet")) == files
    assert not [p for p in table.rglob("*") if p.name.startswith(".")]
    def keys(t):
        return sorted(zip(t.column("commitlog_offset").to_pylist(),
                          t.column("inner_position").to_pylist(),
                          t.column("body_crc").to_pylist()), key=repr)

    assert keys(read()) == keys(written)


def test_audit_tables_render_on_stdout(audited, capsys):
    from mqtool.cli.spark_cmds import _render_audit

    result, _ = audited["whole"]
    _render_audit(result.summary, result.findings, show_queues=True)
    text = capsys.readouterr().out
    for name in BROKERS:
        assert name in text
    assert "UNIQ_KEYs stored more than once" in text and "CL_CRC_MISMATCH" in text
    assert "%RETRY%GroupA" in text      # data is printed as text, never as rich markup


def test_hadoop_lister_lists_file_urls(spark, stores):
    from mqtool.spark.session import hadoop_lister

    lister = hadoop_lister(spark)
    entries = lister(f"file://{stores['alpha']}/commitlog")
    assert sorted(e.name for e in entries if not e.is_dir) == \
        [s.name for s in Store(stores["alpha"]).commitlog.segments]
    assert all(e.length == 1 << 20 for e in entries)
    assert lister(f"file://{stores['alpha']}/missing") is None


# --- export --------------------------------------------------------------------------------------

def test_export_parquet_equals_dump_with_bodies(spark, stores, reference, tmp_path):
    from mqtool.spark import job

    out = tmp_path / "export"
    summary = job.export(spark, [str(stores["clean-small"]), str(stores["gamma"])], str(out),
                         split_size=4 * SMALL_SPLIT)
    rows = [r.asDict() for r in spark.read.parquet(str(out)).collect()]
    assert summary["exported"] == len(rows)
    for name in ("clean-small", "gamma"):
        got = {r["commitlog_offset"]: r for r in rows if r["broker"] == name}
        expected = reference[name]["dump"]
        assert len(got) == len(expected)
        for d in expected:
            r = got[d["commitlog_offset"]]
            body = base64.b64decode(d["body"]) if d["body"] is not None else None
            assert r["body"] == body
            assert dict(r["properties"]) == d["properties"]
            for field in ("file", "file_offset", "total_size", "magic_code", "body_crc",
                          "body_crc_ok", "queue_id", "queue_offset", "sys_flag", "transaction",
                          "born_host", "store_host", "topic", "msg_id", "uniq_key",
                          "body_compression", "body_decompressed", "body_stored_length"):
                assert r[field] == d[field], field


def test_export_json_of_one_topic(spark, stores, reference, tmp_path):
    from mqtool.spark import job

    out = tmp_path / "json"
    job.export(spark, [str(stores["alpha"])], str(out), fmt="json", topics=["TopicTest"])
    lines = [json.loads(line) for p in out.rglob("*.json") for line in p.read_text().splitlines()]
    expected = [d for d in reference["alpha"]["dump"] if d["topic"] == "TopicTest"]
    assert sorted(r["commitlog_offset"] for r in lines) == \
        sorted(d["commitlog_offset"] for d in expected)
    # Spark writes binary as base64, as dump does
    bodies = {d["commitlog_offset"]: d["body"] for d in expected}
    assert all(r.get("body") == bodies[r["commitlog_offset"]] for r in lines if bodies.get(
        r["commitlog_offset"]))


# --- the CLI -------------------------------------------------------------------------------------

def test_cli_import_leaves_pyspark_out():
    code = "import sys, mqtool.cli.main; print('pyspark' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "False"


def test_cli_without_pyspark_says_so_in_one_line(tmp_path):
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "from mqtool.cli.main import run\n"
            f"run(['--no-progress', 'spark', 'audit', {str(FIXTURE_STORE / 'store')!r}])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "mqtool: error: pyspark is not installed; install 'mqtool[spark]' (and Java 17+)"]


@pytest.mark.parametrize("args, message", [
    (["/nonexistent-store"], "no such file or directory"),
    (["--split-size", "12", "STORE"], "--split-size must be at least 4096 bytes"),
    (["--split-size", "lots", "STORE"], "not a size"),
    (["STORE", "STORE"], "give --broker-name once per path"),
    (["--broker-name", "x", "STORE", "STORE"], "give it once per path"),
    (["--conf", "novalue", "STORE"], "--conf wants KEY=VALUE"),
])
def test_cli_usage_errors_before_any_jvm(args, message):
    store = str(FIXTURE_STORE / "store")
    args = [store if a == "STORE" else a for a in args]
    started = time.perf_counter()
    proc = run_mqtool("spark", "audit", *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mqtool: error: ") and message in lines[0]
    assert time.perf_counter() - started < 20


# --- a real standalone cluster -------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout: float, what: str, logs: list[Path]):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    tails = "\n".join(p.read_text(errors="replace")[-3000:] for p in logs if p.exists())
    pytest.fail(f"{what} within {timeout} s\n{tails}")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A Spark master and two workers of one core each from the pyspark installation, on
    127.0.0.1 (a cluster's executors are separate processes with their own Python workers)."""
    import pyspark

    spark_home = Path(pyspark.__file__).resolve().parent
    spark_class = spark_home / "bin" / "spark-class"
    work = tmp_path_factory.mktemp("standalone")
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_NO_DAEMONIZE": "1"}
    port, master_ui = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    master_log = work / "master.log"
    worker_logs = [work / f"worker-{n}.log" for n in range(2)]
    processes = []

    def start(args, log):
        with open(log, "wb") as fh:
            processes.append(subprocess.Popen([str(spark_class), *args], stdout=fh,
                                              stderr=subprocess.STDOUT, env=env,
                                              stdin=subprocess.DEVNULL))

    def registered() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=2) as r:
                return json.load(r).get("aliveworkers", 0) >= 2
        except OSError:
            return master_log.read_text(errors="replace").count("Registering worker") >= 2

    try:
        start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
               str(port), "--webui-port", str(master_ui)], master_log)
        _wait(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, 90,
              "the master did not listen", [master_log])
        for n, worker_log in enumerate(worker_logs):
            start(["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                   "--webui-port", str(_free_port()), "--cores", "1", "--memory", "1g",
                   "--work-dir", str(work / f"work-{n}")], worker_log)
        _wait(registered, 120, "the workers did not register", [master_log, *worker_logs])
        yield url
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_audit_on_a_standalone_cluster_ships_mqtool_and_agrees(standalone, stores, audited,
                                                             tmp_path):
    local, _ = audited["whole"]
    out = tmp_path / "cluster"
    # no PYSPARK_PYTHON: the executors must get the driver's interpreter from mqtool
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    proc = run_mqtool("spark", "audit", "--master", standalone, "--json", "--out", out,
                      "--split-size", "256k", "--conf", "spark.executor.memory=768m",
                      "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2",
                      "--conf", "spark.sql.shuffle.partitions=2",
                      str(stores["gamma"]), env=env, cwd=REPO)
    assert proc.returncode == 1, proc.stderr[-3000:]       # gamma has errors
    summary = json.loads(proc.stdout)
    assert summary["master"] == standalone
    # executors imported mqtool from the zip the driver shipped, not from this checkout
    assert summary["executor_code"] and all(".zip" in origin for origin in summary["executor_code"])
    for b in summary["brokers"]:
        other = next(x for x in local.summary["brokers"] if x["broker"] == b["broker"])
        for key in ("records", "bytes", "by_code", "errors", "gaps", "duplicates", "topics",
                    "queues", "min_store_timestamp", "max_store_timestamp"):
            assert b[key] == other[key], (b["broker"], key)
    assert [b["broker"] for b in summary["brokers"]] == ["gamma"]
    assert summary["queues"] == [q for q in local.summary["queues"] if q["broker"] == "gamma"]
    assert (out / "summary.json").is_file()
    assert "mqtool: spark audit:" in proc.stderr


# --- the columnar path and the rocketmq data source ----------------------------------------------

MESSAGE_FIELDS = ("file", "file_offset", "commitlog_offset", "total_size", "topic", "queue_id",
                  "queue_offset", "physical_offset", "sys_flag", "transaction", "born_timestamp",
                  "store_timestamp", "reconsume_times", "tags", "keys", "uniq_key", "body_crc",
                  "body_crc_ok", "prop_crc_ok", "body_length", "magic_version")

#: broker-written stores with what the forge does not make: V2 records, property CRCs (also
#: damaged), inner-batch records, non-ASCII topics and properties
REAL_STORES = ("v5-clean", "v5-propcrc-damaged", "v5-batchcq-clean", "v6-unicode-small",
               "clean-small-damaged")


def _real_store(name: str) -> Path:
    from conftest import SHARED_STORES

    root = SHARED_STORES / name / "store"
    if not (root / "commitlog").is_dir():
        pytest.skip(f"{root} is not here")
    return root


@pytest.mark.parametrize("name", REAL_STORES)
def test_arrow_batches_equal_dump_on_broker_written_stores(name):
    """The executor's columns (numpy -> Arrow, properties by Arrow's regular expressions) are
    dump's fields of every record, without Spark."""
    from mqtool.spark.arrow import split_batches

    root = _real_store(name)
    expected = [tuple(d[c] for c in MESSAGE_FIELDS) for d in _dump(root)]
    brokers = resolve_inputs([str(root)])
    for size in (SMALL_SPLIT, 1 << 30):
        got = []
        for split in make_splits(brokers, size):
            for batch in split_batches(split, bodies=True):
                rows = batch.to_pydict()
                got += [tuple(rows[c][i] for c in MESSAGE_FIELDS) for i in range(batch.num_rows)]
        assert got == expected, (name, size)


@pytest.mark.parametrize("name", REAL_STORES)
def test_arrow_batches_unwrapped_equal_dump_on_broker_written_stores(name):
    """With ``unwrap`` the executor's rows are dump's (unwrapped) records, bodies included
    (stored bytes: those dump shows inflated are not compared); inner messages say where they
    lie."""
    from mqtool.spark.arrow import split_batches

    root = _real_store(name)
    reference = _dump(root, unwrap=True)
    inflated = [bool(d.get("body_decompressed")) for d in reference]
    expected = [tuple(d[c] for c in MESSAGE_FIELDS) + (
        None if inflated[i] else base64.b64decode(d["body"]) if d["body"] is not None else b"",
        (d.get("inner_batch") or {}).get("position"),
        (d.get("inner_batch") or {}).get("commitlog_offset")) for i, d in enumerate(reference)]
    fields = MESSAGE_FIELDS + ("body", "inner_position", "outer_commitlog_offset")
    brokers = resolve_inputs([str(root)])
    for size in (SMALL_SPLIT, 1 << 30):
        got = []
        for split in make_splits(brokers, size):
            for batch in split_batches(split, bodies=True, unwrap=True):
                rows = batch.to_pydict()
                got += [tuple(rows[c][i] for c in fields) for i in range(batch.num_rows)]
        assert len(got) == len(expected), (name, size)
        got = [g[:-3] + (None,) + g[-2:] if inflated[i] else g for i, g in enumerate(got)]
        assert got == expected, (name, size)


def test_rocketmq_data_source_reads_the_messages_columns(spark, stores, reference):
    import mqtool.spark

    mqtool.spark.register(spark)
    frame = spark.read.format("rocketmq").option("splitSize", "64k") \
        .load([str(stores["clean-small"]), str(stores["gamma"])])
    assert frame.columns == list(schema_names())
    rows = collections.defaultdict(set)
    for r in frame.collect():
        rows[r["broker"]].add(tuple(r[c] for c in MESSAGE_FIELDS))
    for name in ("clean-small", "gamma"):
        assert rows[name] == {tuple(d[c] for c in MESSAGE_FIELDS)
                              for d in reference[name]["dump"]}, name
    assert frame.rdd.getNumPartitions() == sum(
        -(-f.length // SMALL_SPLIT) for n in ("clean-small", "gamma")
        for f in resolve_inputs([str(stores[n])])[0].files if f.length)
    # the user's own SQL over it
    frame.createOrReplaceTempView("messages")
    topics = {r["topic"]: r["n"] for r in spark.sql(
        "SELECT topic, count(*) AS n FROM messages WHERE broker = 'clean-small' GROUP BY topic")
        .collect()}
    assert topics == collections.Counter(d["topic"] for d in reference["clean-small"]["dump"])


def test_rocketmq_data_source_options(spark, stores, reference):
    import mqtool.spark

    mqtool.spark.register(spark)
    frame = spark.read.format("rocketmq").option("bodies", "true").option("checkCrc", "false") \
        .option("brokerName", "b1").load(str(stores["alpha"]))
    assert frame.columns[-1] == "body"
    rows = frame.select("broker", "commitlog_offset", "body_crc_ok", "body").collect()
    dump = {d["commitlog_offset"]: d for d in reference["alpha"]["dump"]}
    assert len(rows) == len(dump) and {r["broker"] for r in rows} == {"b1"}
    compared = 0
    for r in rows:
        d = dump[r["commitlog_offset"]]
        assert r["body_crc_ok"] is None or d["body_length"] <= 0
        if not d.get("body_decompressed"):   # dump shows compressed bodies inflated
            assert r["body"] == (base64.b64decode(d["body"]) if d["body"] is not None else b"")
            compared += 1
    assert compared > len(rows) // 2
    with pytest.raises(Exception, match="checkCrc must be true or false"):
        spark.read.format("rocketmq").option("checkCrc", "maybe") \
            .load(str(stores["alpha"])).count()


def _plan(frame) -> str:
    return frame._jdf.queryExecution().optimizedPlan().toString()


def test_rocketmq_data_source_reads_only_what_the_filters_need(spark, stores, reference):
    """Filters on topic, queue, store time and UNIQ_KEY / KEYS reach the reader (they leave
    Spark's plan), a UNIQ_KEY or key lookup reads only the splits its IndexFile entries point
    into, and the rows are exactly dump's that match."""
    import mqtool.spark

    mqtool.spark.register(spark)
    dump = reference["alpha"]["dump"]
    frame = spark.read.format("rocketmq").option("splitSize", "64k").load(str(stores["alpha"]))
    every = frame.rdd.getNumPartitions()
    topic, queue = dump[len(dump) // 2]["topic"], dump[len(dump) // 2]["queue_id"]
    since = sorted(d["store_timestamp"] for d in dump)[len(dump) // 3]
    picked = frame.where(f"topic = '{topic}' AND queue_id = {queue} "
                         f"AND store_timestamp >= {since}")
    assert "Filter" not in _plan(picked), _plan(picked)     # the reader applied them all
    assert sorted(r["commitlog_offset"] for r in picked.select("commitlog_offset").collect()) \
        == [d["commitlog_offset"] for d in dump if d["topic"] == topic
            and d["queue_id"] == queue and d["store_timestamp"] >= since]
    # a filter the reader does not take stays Spark's
    assert "Filter" in _plan(frame.where("body_length % 2 = 1"))

    target = next(d for d in dump[len(dump) // 2:] if d["uniq_key"] and d["keys"])
    files = {d["file"] for d in dump}
    for column in ("uniq_key", "keys"):
        value = target[column]
        found = frame.where(f"{column} = '{value}'")
        assert "Filter" not in _plan(found)
        expected = [d["commitlog_offset"] for d in dump if d[column] == value]
        assert sorted(r["commitlog_offset"] for r in found.collect()) == expected, column
        # the IndexFile points at the records' splits: the other splits are never read
        assert found.rdd.getNumPartitions() <= len(expected) < every, column
    scanned = frame.where(f"uniq_key = '{target['uniq_key']}'")
    assert scanned.rdd.getNumPartitions() < every
    unindexed = spark.read.format("rocketmq").option("splitSize", "64k") \
        .option("useIndex", "false").load(str(stores["alpha"])) \
        .where(f"uniq_key = '{target['uniq_key']}'")
    assert unindexed.rdd.getNumPartitions() == every and unindexed.count() == \
        sum(d["uniq_key"] == target["uniq_key"] for d in dump)
    assert len(files) >= 2


# --- system topics: dump's ``system`` objects as a column ------------------------------------

@pytest.fixture(scope="module")
def system_stores(tmp_path_factory, unpack_shared) -> dict:
    """The forged system-topics store (trace, pop, delayed, timer, DLQ/retry, priority) and the
    broker-written transaction store (op bodies, half messages), with dump's ``system`` object
    of every message (None where dump gives none)."""
    from mqtool.forge.systopics import make_system_topic_store

    forged = tmp_path_factory.mktemp("systopics") / "store"
    make_system_topic_store(forged)
    roots = {"system-topics": forged}
    if (SHARED_STORES / "v5-txn-crash" / "store.tar.gz").is_file():
        roots["v5-txn-crash"] = unpack_shared("v5-txn-crash")
    return {name: (root, {d["commitlog_offset"]: d.get("system") for d in _dump_messages(root)})
            for name, root in roots.items()}


def test_system_column_is_dumps_system_object(system_stores):
    """The executor's ``system`` column, split at 64 KiB and whole, without Spark."""
    from mqtool.spark.arrow import split_batches

    for name, (root, expected) in system_stores.items():
        assert sum(v is not None for v in expected.values()) >= 8, name
        for size in (SMALL_SPLIT, 1 << 30):
            got = {}
            for split in make_splits(resolve_inputs([str(root)]), size):
                for batch in split_batches(split):
                    rows = batch.to_pydict()
                    got.update(zip(rows["commitlog_offset"], rows["system"]))
            assert {k: json.loads(v) if v is not None else None
                    for k, v in got.items()} == expected, (name, size)


def test_rocketmq_data_source_system_column(spark, system_stores, tmp_path):
    """The table a notebook reads, and ``spark export``'s rows, carry dump's ``system``."""
    import mqtool.spark
    from mqtool.spark.job import export

    mqtool.spark.register(spark)
    root, expected = system_stores["system-topics"]
    rows = spark.read.format("rocketmq").load(str(root)) \
        .select("commitlog_offset", "system").collect()
    assert {r["commitlog_offset"]: json.loads(r["system"]) if r["system"] else None
            for r in rows} == expected
    # the user's SQL over the JSON text: the trace records' context types
    kinds = spark.read.format("rocketmq").load(str(root)) \
        .selectExpr("get_json_object(system, '$.kind') AS kind").where("kind IS NOT NULL") \
        .distinct().collect()
    assert {r["kind"] for r in kinds} == {v["kind"] for v in expected.values() if v}
    out = tmp_path / "export"
    export(spark, [str(root)], str(out), fmt="json")
    exported = [json.loads(line) for f in out.rglob("*.json") for line in f.open()]
    assert {d["commitlog_offset"]: json.loads(d["system"]) if d.get("system") else None
            for d in exported} == expected


# --- 5.x inner batches (BatchCQ) ---------------------------------------------------------------

def _dump_messages(root, *extra) -> list[dict]:
    """``mqtool dump --json`` of a store's messages, run as the user runs it."""
    proc = run_mqtool("dump", "--json", "--messages-only", *extra, root)
    assert proc.returncode == 0, proc.stderr
    return [d for d in map(json.loads, proc.stdout.splitlines())
            if d["record_type"] == "commitlog/message"]


def _placed(d: dict) -> tuple:
    """Where a message lies and who it is: (outer CommitLog offset, position in the batch or
    None, queue offset, UNIQ_KEY, KEYS, TAGS)."""
    where = d.get("inner_batch")
    if where is not None:
        return (where["commitlog_offset"], where["position"], d["queue_offset"], d["uniq_key"],
                d["keys"], d["tags"])
    return (d["commitlog_offset"], None, d["queue_offset"], d["uniq_key"], d["keys"], d["tags"])


def _placed_row(r) -> tuple:
    if r["inner_position"] is None:
        assert r["outer_commitlog_offset"] is None
        return (r["commitlog_offset"], None, r["queue_offset"], r["uniq_key"], r["keys"],
                r["tags"])
    return (r["outer_commitlog_offset"], r["inner_position"], r["queue_offset"], r["uniq_key"],
            r["keys"], r["tags"])


def test_spark_outputs_unwrap_inner_batches_as_dump_does(spark, tmp_path):
    """On a broker-written BatchCQ store the data source and ``spark export`` give one row per
    inner message, exactly dump's, and the stored records with unwrap off."""
    import mqtool.spark
    from mqtool.spark import job

    root = _real_store("v5-batchcq-clean")
    unwrapped = _dump_messages(root)
    stored = _dump_messages(root, "--no-unwrap")
    inner = [d for d in unwrapped if d.get("inner_batch")]
    assert inner and len(unwrapped) > len(stored)   # the store does hold inner batches
    expected = {_placed(d) for d in unwrapped}
    assert len(expected) == len(unwrapped)
    expected_stored = {_placed(d) for d in stored}

    mqtool.spark.register(spark)
    reader = spark.read.format("rocketmq").option("splitSize", "64k")
    frame = reader.option("bodies", "true").load(str(root))
    assert frame.columns == list(schema_names()) + ["body"]
    rows = frame.collect()
    assert len(rows) == len(unwrapped)
    assert {_placed_row(r) for r in rows} == expected
    bodies = {_placed(d): base64.b64decode(d["body"]) for d in inner}
    inner_rows = [r for r in rows if r["inner_position"] is not None]
    assert len(inner_rows) == len(inner)
    for r in inner_rows:
        body = bodies[_placed_row(r)]
        assert r["body"] == body and r["body_length"] == len(body) and r["inner_num"] is None

    kept = reader.option("unwrap", "false").load(str(root)).collect()
    assert len(kept) == len(stored)
    assert {_placed_row(r) for r in kept} == expected_stored

    for unwrap, want, count in ((True, expected, len(unwrapped)),
                                (False, expected_stored, len(stored))):
        out = tmp_path / f"export-{unwrap}"
        summary = job.export(spark, [str(root)], str(out), split_size=4 * SMALL_SPLIT,
                             unwrap=unwrap)
        exported = spark.read.parquet(str(out)).collect()
        assert summary["exported"] == len(exported) == count
        assert {_placed_row(r) for r in exported} == want, unwrap
    # the inner messages' own properties and bodies, as dump shows them
    by_place = {_placed(d): d for d in inner}
    for r in spark.read.parquet(str(tmp_path / "export-True")).where("inner_position IS NOT NULL").collect():
        d = by_place[_placed_row(r)]
        assert dict(r["properties"]) == d["properties"]
        assert r["body"] == base64.b64decode(d["body"])


@pytest.mark.parametrize("name", ["v5-batchcq-clean", "v5-batchcq-crash"])
def test_audit_messages_are_the_inner_messages_the_clients_sent(spark, name, tmp_path):
    """The audit's ``messages`` table gives one row per inner message (as the data source and
    ``spark export``), each equal to what the client sent (write.json's ``inner`` lists, not
    mqtool's reading); its findings and record counts stay verify's, an inner batch one record."""
    from conftest import write_log
    from mqtool.spark import job
    from test_inner_messages import ref_of, sent_batches

    ref = ref_of(name)
    root = ref / "store"
    out = tmp_path / "out"
    result = job.audit(spark, [str(root)], out=str(out), split_size=4 * SMALL_SPLIT)
    rows = _table(spark, out, "messages")
    sent = sent_batches(ref)
    assert len(rows) == write_log(ref)["logicalMessages"]
    by_batch = collections.defaultdict(list)
    for r in rows:
        if r["inner_position"] is not None:
            by_batch[r["outer_commitlog_offset"]].append(r)
        else:
            assert r["outer_commitlog_offset"] is None and r["commitlog_offset"] not in sent
    assert set(by_batch) == set(sent)
    for offset, send in sent.items():
        got = sorted(by_batch[offset], key=lambda r: r["inner_position"])
        assert [r["inner_position"] for r in got] == list(range(send["innerNum"]))
        for r, inner in zip(got, send["inner"]):
            assert r["commitlog_offset"] == offset
            assert (r["topic"], r["queue_id"]) == (send["topic"], send["queueId"])
            assert r["queue_offset"] == send["queueOffset"] + inner["j"]
            assert (r["tags"], r["keys"], r["uniq_key"]) == \
                (inner["tags"], inner["keys"], inner["uniqKey"])
            assert (r["body_length"], r["body_crc"]) == (inner["bodyLen"], inner["bodyCRC"])
            assert r["inner_num"] is None
    report = verify_store(Store(root))
    broker = result.summary["brokers"][0]
    assert broker["records"] == report.summary["messages_scanned"] \
        == len(rows) - sum(s["innerNum"] - 1 for s in sent.values())
    assert broker["inner_messages"] == sum(s["innerNum"] for s in sent.values())
    assert {c: n for c, n in broker["by_code"].items() if c in RECORD_CODES} == \
        dict(collections.Counter(f.code for f in report.findings if f.code in RECORD_CODES))


def test_audit_of_store_roots_checks_every_code_of_verifys(audited, reference):
    """An audit whose inputs are all store roots the executors read checks every code of
    verify's (verify itself runs on them); none is left out, none needs a note."""
    from mqtool.vocabulary import CODES

    result, _ = audited["whole"]
    checks = result.summary["checks"]
    assert set(checks["checked"]) == set(CODES) and checks["not_checked"] == []
    assert checks["notes"] == {}
    seen = set()
    for b in result.summary["brokers"]:
        assert set(b["by_code"]) == {f.code for f in reference[b["broker"]]["verify"].findings}
        seen |= set(b["by_code"])
    assert {"CQ_DANGLING", "CQ_MISSING"} & seen, seen


def schema_names():
    from mqtool.spark.schema import MESSAGE_COLUMNS, names

    return names(MESSAGE_COLUMNS)


# --- bad input -----------------------------------------------------------------------------------

def test_existing_output_folder_is_refused_in_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "something").write_text("x")
    proc = run_mqtool("spark", "audit", "--master", "local[1]", "--out", out,
                      str(FIXTURE_STORE / "store"))
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == f"mqtool: error: {out} exists and is not empty; give --overwrite or a " \
                        f"new directory", proc.stderr
    assert not any(line.startswith(("Traceback", "py4j", "\tat ")) for line in lines)


def test_remote_uri_without_its_file_system_is_one_line(tmp_path):
    """Azure's abfs:// needs adlfs, which is not installed: said before Spark starts."""
    url = "abfs://archive@account.dfs.core.windows.net/broker-a/store"
    started = time.perf_counter()
    proc = run_mqtool("spark", "audit", "--master", "local[1]", url)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"mqtool: error: {url}: nothing installed reads abfs:// by byte range; install fsspec "
        f"and adlfs on the driver and every executor, or give local / file:// paths (a shared "
        f"mount works)"]
    assert time.perf_counter() - started < 20


def test_a_split_that_cannot_be_read_fails_in_one_line(spark, stores, tmp_path):
    """A CommitLog file that shrank after the audit was planned: the task's error, not a Spark
    stack trace."""
    from mqtool.errors import MqtoolError
    from mqtool.spark import job, scanpass, session

    root = tmp_path / "shrinking"
    shutil.copytree(stores["alpha"], root)
    brokers, splits = scanpass.plan(spark, [str(root)], None, 1 << 18)
    victim = root / "commitlog" / brokers[0].files[0].name
    os.truncate(victim, 1000)
    with pytest.raises(MqtoolError) as caught, session.spark_failures():
        scanpass.scan_audit(spark, brokers, splits, True, job._labeller(brokers), None,
                            "errorifexists")
    text = str(caught.value)
    assert "\n" not in text and text.startswith("a Spark task failed: ")
    assert f"{victim}: 1000 bytes now, {1 << 20} when the audit was planned" in text


# --- remote archives: s3:// by byte range --------------------------------------------------------

def _python_with(module: str) -> str | None:
    for python in (sys.executable, shutil.which("python3")):
        if python and subprocess.run([python, "-c", f"import {module}"],
                                     capture_output=True).returncode == 0:
            return python
    return None


@pytest.fixture(scope="module")
def s3_emulator(tmp_path_factory):
    """moto's standalone server: an S3 emulator (no AWS account, nothing leaves this machine)
    on 127.0.0.1, started and stopped here. Yields the environment that points S3 clients
    (s3fs/botocore and pyarrow read AWS_ENDPOINT_URL) at it."""
    pytest.importorskip("s3fs")
    python = _python_with("moto.server")
    if python is None:
        pytest.skip("moto's server is not installed")
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as fh:
        server = subprocess.Popen([python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    try:
        _wait(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, 60,
              "the S3 emulator did not listen", [log])
        yield env
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_audit_of_s3_archives_reads_byte_ranges_and_agrees(s3_emulator, stores, bare_audited,
                                                           tmp_path):
    """A remote store gets the audit's CommitLog checks, as a local bare CommitLog directory
    does: the same counts and figures."""
    import s3fs

    fs = s3fs.S3FileSystem(key="testing", secret="testing",
                           client_kwargs={"endpoint_url": s3_emulator["AWS_ENDPOINT_URL"],
                                          "region_name": "us-east-1"})
    fs.call_s3("create_bucket", Bucket="archive")
    for name in ("gamma", "clean-small"):
        for path in sorted((Path(stores[name]) / "commitlog").iterdir()):
            fs.put_file(str(path), f"archive/{name}/store/commitlog/{path.name}")
    local, _ = bare_audited
    env = {**os.environ, **s3_emulator, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = run_mqtool("spark", "audit", "--master", "local[2]", "--json", "--split-size", "256k",
                      "--conf", "spark.sql.shuffle.partitions=2",
                      "s3://archive/gamma/store", "s3://archive/clean-small/store", env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]      # gamma has errors
    summary = json.loads(proc.stdout)
    assert [b["broker"] for b in summary["brokers"]] == ["gamma", "clean-small"]
    for b in summary["brokers"]:
        other = next(x for x in local.summary["brokers"] if x["broker"] == b["broker"])
        for key in ("records", "bytes", "by_code", "errors", "gaps", "duplicates", "topics",
                    "queues", "corrupt_regions", "min_store_timestamp", "max_store_timestamp"):
            assert b[key] == other[key], (b["broker"], key)
    assert summary["tasks"] > 8
