"""The Spark jobs: ``audit`` (messages, findings, files, UNIQ_KEY duplicates and a summary) and
``export`` (every message with its body).

One read of every byte. With ``--out`` on a file system the executors write by local path, or
without ``--out``, the audit is one Spark job (:func:`mqtool.spark.scanpass.write_and_verify`):
each task scans its range once, writes its ``messages`` rows with pyarrow
(:mod:`mqtool.spark.tablewrite`; nowhere without ``--out``) and returns its side report (where
its records began and ended, blank records, corrupt regions, runs of zeros) with mergeable
partial results (:mod:`mqtool.spark.partials`: per-queue figures and queue-offset runs, the
records whose checks failed, UNIQ_KEY hashes shuffled by bucket). A file of a store root that
verify checks is one task, which runs verify's per-file checks (:mod:`mqtool.spark.crosscheck`)
on the events of the same scan. The driver merges the partials into the per-queue figures, the
``CQ_QUEUE_GAP`` findings and the UNIQ_KEY duplicates; no Spark SQL runs over the rows.

Findings of an input that is a store root on a file system every executor reads are
``verify``'s own, every code, the same files, offsets, severities and counts (its merge and
recovery prediction run on the driver). Of a bare CommitLog directory or a remote store
(``s3://``, ...) the audit checks the CommitLog alone, from the tasks' partials, by verify's
rules and with its codes and wording (:data:`SCAN_CODES`); severities are then the codes'
defaults.

With ``--out`` on ``hdfs://`` or ``s3a://``, ``mapInArrow``
(:func:`mqtool.spark.arrow.audit_arrow_partition`) hands the batches to Spark, which writes
them; verify's checks are then a job of their own (a second read of a store root), and the
figures are Spark SQL over the written rows (:func:`_queue_table`, :func:`queue_steps`,
:func:`_uniq_keys`). The rows hold the stored records and, after an inner batch's record, its
inner messages: the ``messages`` table published is the message view (as
``spark.read.format("rocketmq")`` gives it); findings and figures are about the record view
(verify's unit).
"""
from __future__ import annotations

import concurrent.futures
import functools
import json
import time
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from .. import __version__
from ..formats import commitlog as cl_fmt
from ..verify import CODES, ERROR, INFO, WARNING
from . import scanpass, schema, session
from .arrow import OPENED_RECORD
from .crosscheck import verified_by_verify
from .plan import (DEFAULT_SPLIT_SIZE, BrokerInput, Split, check_output, finding,
                   layout_findings)
from .splits import export_partition
from .partials import merge_queues
from .tablewrite import write_small_table, write_uniq_table, writes_locally

#: verify's finding codes the audit's scan computes, by verify's rules, from the CommitLog files
#: alone: what it checks of a bare CommitLog directory or a remote store
SCAN_CODES = ("CL_BAD_MAGIC", "CL_CRC_MISMATCH", "CL_PROP_CRC_MISMATCH", "CL_LENGTH_MISMATCH",
              "CL_TRUNCATED", "CL_OFFSET_MISMATCH", "CL_FILE_SIZE", "CL_GAP", "CL_STRAY_FILE",
              "DL_ENTRY_MAGIC", "DL_ENTRY_POS", "DL_ENTRY_SIZE", "DL_ENTRY_TRUNCATED",
              "CQ_QUEUE_GAP")
#: where a scan code's count can differ from verify's on the same store
SCAN_NOTES = {
    "CL_STRAY_FILE": "bare CommitLog directories and remote stores: names in the CommitLog "
                     "directory only (verify also reports unknown files and folders of the store "
                     "root)",
    "CQ_QUEUE_GAP": "bare CommitLog directories and remote stores: over every record (verify "
                    "leaves out records past the end its recovery prediction keeps)",
}
VERIFY_ONLY_NOTE = ("store roots on a file system every executor reads (local, file://, a shared "
                    "mount), by verify itself; not checked for bare CommitLog directories and "
                    "remote stores")


def checks(brokers: list[BrokerInput]) -> dict:
    """What an audit of ``brokers`` checks, for the summary: every code of verify's when an
    input is a store root the executors read (verify itself checks those), else the codes of the
    CommitLog scan; the rest is not checked (run ``mqtool verify`` on the store for those).
    ``notes`` says which inputs a code's count holds for, when the inputs are of both kinds."""
    by_verify = [verified_by_verify(b) for b in brokers]
    checked = list(CODES) if any(by_verify) else list(SCAN_CODES)
    notes = {}
    if not all(by_verify):
        notes.update(SCAN_NOTES)
        if any(by_verify):
            notes.update({code: VERIFY_ONLY_NOTE for code in CODES if code not in SCAN_CODES})
    return {"checked": checked,
            "not_checked": sorted(set(CODES) - set(checked)),
            "notes": notes}


#: findings returned to the caller (the tables hold all of them)
LISTED_FINDINGS = 1000
#: holes listed in the summary (the files table counts all of them)
LISTED_HOLES = 1000
UNIQ_KEY_SAMPLE = 20
_DISPATCHED = [cl_fmt.TRANSACTION_NAMES[cl_fmt.TRANSACTION_NOT_TYPE],
               cl_fmt.TRANSACTION_NAMES[cl_fmt.TRANSACTION_COMMIT_TYPE]]
_PREPARED = cl_fmt.TRANSACTION_NAMES[cl_fmt.TRANSACTION_PREPARED_TYPE]
_ROLLBACK = cl_fmt.TRANSACTION_NAMES[cl_fmt.TRANSACTION_ROLLBACK_TYPE]
_WIDE = "decimal(38,0)"          # damaged queue offsets make differences past 64 bits


@dataclass
class AuditResult:
    summary: dict
    findings: list[dict]            # the first LISTED_FINDINGS, by broker, file, offset
    out: str | None
    splits: int
    sides: list[dict] = field(repr=False, default_factory=list)

    @property
    def errors(self) -> int:
        return self.summary["totals"]["errors"]


# --- findings ------------------------------------------------------------------------------------

def _finding_tuples(rows: list[dict]) -> list[tuple]:
    """Findings as rows of the findings table (details as JSON text)."""
    cols = schema.names(schema.FINDING_COLUMNS)
    return [tuple(json.dumps(r[c], sort_keys=True) if c == "details" and r[c] is not None
                  else r[c] for c in cols) for r in rows]


def _finding_frame(spark: SparkSession, rows: list[dict]) -> DataFrame:
    return spark.createDataFrame(_finding_tuples(rows), schema.struct_type(schema.FINDING_COLUMNS),
                                 verifySchema=False)


def _write_findings(findings: DataFrame, path: str, mode: str, brokers: int) -> None:
    # repartition, not coalesce: coalesce would run the scans feeding the findings (the
    # messages table, the queue windows) in as few tasks as there are output files
    findings.repartition(max(1, min(8, brokers)), "broker").write.mode(mode) \
        .partitionBy("broker").parquet(path)


def _first_findings(rows: list[dict], limit: int) -> list[dict]:
    """The first ``limit`` of ``rows`` in the findings table's order (broker, file, offset,
    code; nulls first, as Spark sorts), each as the table gives it back: its columns, details
    as their JSON text."""
    def key(row):
        return tuple((row[c] is not None, row[c] if row[c] is not None else 0)
                     for c in ("broker", "file", "offset", "code"))

    cols = schema.names(schema.FINDING_COLUMNS)
    return [dict(zip(cols, row)) for row in _finding_tuples(sorted(rows, key=key)[:limit])]


def _labeller(brokers: list[BrokerInput]):
    """(broker, file name) -> the file as verify names it."""
    by_name = {b.name: b for b in brokers}
    return lambda broker, name: by_name[broker].label(name)


def _file_label(brokers: list[BrokerInput]):
    """The ``file`` column as verify names the file (``commitlog/<name>`` in plain mode; a
    DLedger-mode store's data files are under ``dledger-<id>/data/``)."""
    plain = F.concat(F.lit("commitlog/"), F.col("file"))
    odd = [(b.name, f.name, f.label()) for b in brokers for f in b.files
           if f.label() != "commitlog/" + f.name]
    if not odd:
        return plain
    labels = F.create_map(*[F.lit(x) for broker, name, label in odd
                            for x in (broker + "/" + name, label)])
    return F.coalesce(labels[F.concat(F.col("broker"), F.lit("/"), F.col("file"))], plain)


def _record_findings(messages: DataFrame, rel) -> DataFrame:
    """CL_CRC_MISMATCH, CL_PROP_CRC_MISMATCH and CL_OFFSET_MISMATCH, worded as verify words them."""
    null_long = F.lit(None).cast("long")
    crc = messages.filter((F.col("body_crc_ok") == F.lit(False)) & (F.col("body_length") > 0)) \
        .select(F.lit("CL_CRC_MISMATCH").alias("code"), rel.alias("f"), "file_offset",
                F.format_string("body CRC %d does not match the %d-byte body of the record at %d",
                                "body_crc", "body_length", "commitlog_offset").alias("message"),
                "commitlog_offset", "topic", "queue_id", "queue_offset", "broker")
    prop = messages.filter(F.col("prop_crc_ok") == F.lit(False)) \
        .select(F.lit("CL_PROP_CRC_MISMATCH").alias("code"), rel.alias("f"), "file_offset",
                F.format_string("property CRC does not match the record at %d",
                                "commitlog_offset").alias("message"),
                "commitlog_offset", "topic", "queue_id", "queue_offset", "broker")
    moved = messages.filter(F.col("physical_offset") != F.col("commitlog_offset")) \
        .select(F.lit("CL_OFFSET_MISMATCH").alias("code"), rel.alias("f"), "file_offset",
                F.format_string("PHYSICALOFFSET field says %d but the record is at %d; a "
                                "re-dispatch would point its ConsumeQueue unit and index "
                                "entries there", "physical_offset",
                                "commitlog_offset").alias("message"),
                "commitlog_offset", "topic", "queue_id", null_long.alias("queue_offset"),
                "broker")
    severity = F.create_map(*[x for code in ("CL_CRC_MISMATCH", "CL_PROP_CRC_MISMATCH",
                                             "CL_OFFSET_MISMATCH")
                              for x in (F.lit(code), F.lit(CODES[code][0]))])
    return crc.unionByName(prop).unionByName(moved).select(
        "broker", "code", severity[F.col("code")].alias("severity"), F.col("f").alias("file"),
        F.col("file_offset").alias("offset"), "message", "commitlog_offset", "topic", "queue_id",
        "queue_offset", F.lit(None).cast("long").alias("count"),
        F.lit(None).cast("string").alias("details"))


def queue_steps(messages: DataFrame) -> DataFrame:
    """Dispatched records (NOT/COMMIT) with the queue offset the previous record of their queue
    makes them expect (its queue offset plus its INNER_NUM step), in CommitLog order."""
    # the queue's hash leads the window's sort key: Spark sorts on an 8-byte prefix of the
    # first key, which for the broker's name is the same for a whole broker (every comparison
    # then goes to the full row); the queue's own columns follow, so a hash collision cannot
    # merge two queues (4.4 M records, warm: 8.5 s -> 7 s)
    window = Window.partitionBy("queue_hash", "broker", "topic", "queue_id") \
        .orderBy("commitlog_offset")
    step = F.coalesce(F.col("inner_num").cast("long"), F.lit(1).cast("long"))
    return messages.filter(F.col("transaction").isin(_DISPATCHED)) \
        .select(F.xxhash64("broker", "topic", "queue_id").alias("queue_hash"),
                "broker", "topic", "queue_id", "file", "file_offset", "commitlog_offset",
                "queue_offset", (F.col("queue_offset") + step).alias("next_expected")) \
        .withColumn("expected", F.lag("next_expected").over(window)) \
        .withColumn("previous_offset", F.lag("commitlog_offset").over(window)) \
        .filter(F.col("expected").isNotNull() & (F.col("queue_offset") != F.col("expected"))) \
        .drop("queue_hash")


def _gap_findings(spark: SparkSession, gaps: DataFrame, rel) -> DataFrame:
    """CQ_QUEUE_GAP findings worded as verify words them, in Spark SQL. verify writes the topic
    with Python's repr: the driver writes it for the few distinct topics that have gaps."""
    topics = [r["topic"] for r in gaps.select("topic").distinct().collect()]
    if not topics:
        return _finding_frame(spark, [])
    quoted = F.create_map(*[F.lit(x) for t in topics for x in (t, repr(t))])
    expected, qoff = F.col("expected"), F.col("queue_offset")
    message = F.format_string(
        "%s queue %d: queue offset %d %s (expected %d after the record at %d)",
        quoted[F.col("topic")], "queue_id", "queue_offset",
        F.when(qoff < expected, F.lit("repeats")).otherwise(F.lit("skips")), "expected",
        "previous_offset")
    return gaps.select(
        "broker", F.lit("CQ_QUEUE_GAP").alias("code"),
        F.lit(CODES["CQ_QUEUE_GAP"][0]).alias("severity"),
        rel.alias("file"),
        F.col("file_offset").alias("offset"), message.alias("message"), "commitlog_offset",
        "topic", "queue_id", "queue_offset", F.lit(None).cast("long").alias("count"),
        F.to_json(F.struct(expected.alias("expected"))).alias("details"))


def _region_findings(sides: list[dict], cutoffs: dict, label) -> list[dict]:
    out = []
    for side in sides:
        cut = cutoffs.get((side["broker"], side["file"]))
        for kind, offset, length, code, detail, declared in side["regions"]:
            if kind != "corrupt" or (cut is not None and offset > cut):
                continue
            out.append(finding(side["broker"], code, label(side["broker"], side["file"]),
                               offset - side["base_offset"],
                               f"{detail} ({length} bytes until the next plausible record)",
                               commitlog_offset=offset,
                               details={"length": length, "declared_size": declared}))
    return out


def _kept_sides(sides: list[dict], cutoffs: dict) -> list[dict]:
    """The side reports of the splits whose rows stay (not past a file's blank record: see
    :func:`mqtool.spark.scanpass.chain_check`), in CommitLog order."""
    kept = []
    for side in sides:
        cut = cutoffs.get((side["broker"], side["file"]))
        if cut is not None and side["entry"] is not None and side["entry"] > cut:
            continue
        kept.append(side)
    return kept


def _problem_findings(sides: list[dict], brokers: set, label) -> list[dict]:
    """CL_CRC_MISMATCH, CL_PROP_CRC_MISMATCH and CL_OFFSET_MISMATCH of the scan-checked
    ``brokers``, from the tasks' record problems, worded as verify words them (and as
    :func:`_record_findings` words them in Spark SQL)."""
    out = []
    for side in sides:
        broker = side["broker"]
        if broker not in brokers:
            continue
        rel = label(broker, side["file"])
        for code, file_offset, offset, topic, qid, qoff, crc, length, physical in \
                side.get("problems", ()):
            if code == "CL_CRC_MISMATCH":
                text = f"body CRC {crc} does not match the {length}-byte body of the record " \
                       f"at {offset}"
            elif code == "CL_PROP_CRC_MISMATCH":
                text = f"property CRC does not match the record at {offset}"
            else:
                text = f"PHYSICALOFFSET field says {physical} but the record is at {offset}; a " \
                       f"re-dispatch would point its ConsumeQueue unit and index entries there"
                qoff = None
            out.append(finding(broker, code, rel, file_offset, text, commitlog_offset=offset,
                               topic=topic, queue_id=qid, queue_offset=qoff))
    return out


def _gap_rows(gaps: list[dict], brokers: set, label) -> list[dict]:
    """CQ_QUEUE_GAP findings of the scan-checked ``brokers`` from the merged queue-offset runs
    (:func:`mqtool.spark.partials.merge_queues`), worded as :func:`_gap_findings` words them."""
    out = []
    for g in gaps:
        if g["broker"] not in brokers:
            continue
        verb = "repeats" if g["queue_offset"] < g["expected"] else "skips"
        text = (f"{g['topic']!r} queue {g['queue_id']}: queue offset {g['queue_offset']} {verb} "
                f"(expected {g['expected']} after the record at {g['previous_offset']})")
        out.append(finding(g["broker"], "CQ_QUEUE_GAP", label(g["broker"], g["file"]),
                           g["file_offset"], text, commitlog_offset=g["commitlog_offset"],
                           topic=g["topic"], queue_id=g["queue_id"],
                           queue_offset=g["queue_offset"], details={"expected": g["expected"]}))
    return out


def _uniq_summary(repeated: list[dict]) -> dict:
    across = sorted((r for r in repeated if r["broker_count"] > 1), key=lambda r: r["uniq_key"])
    return {"stored_more_than_once": len(repeated),
            "across_brokers": len(across),
            "across_brokers_sample": [{"uniq_key": r["uniq_key"], "copies": r["copies"],
                                       "brokers": r["brokers"], "topics": r["topics"]}
                                      for r in across[:UNIQ_KEY_SAMPLE]]}


# --- files and holes -----------------------------------------------------------------------------

def _file_rows(brokers: list[BrokerInput], sides: list[dict], cutoffs: dict,
               splits: list[Split]) -> tuple[list[tuple], list[dict]]:
    split_count: dict = {}
    for s in splits:
        split_count[(s.broker, s.name)] = split_count.get((s.broker, s.name), 0) + 1
    by_file: dict = {}
    for side in sides:
        by_file.setdefault((side["broker"], side["file"]), []).append(side)
    rows, holes = [], []
    for broker in brokers:
        previous = None
        for f in broker.files:
            key = (broker.name, f.name)
            cut = cutoffs.get(key)
            messages = message_bytes = corrupt = corrupt_bytes = zero = zero_bytes = 0
            data_end, end_kind = 0, "empty" if f.length == 0 else "file_end"
            events = []
            for side in by_file.get(key, []):
                if cut is not None and side["entry"] is not None and side["entry"] > cut:
                    continue
                messages += side["messages"]
                message_bytes += side["message_bytes"]
                events += [(r[1], r) for r in side["regions"]]
                if side["blank"] is not None:
                    events.append((side["blank"][0], ("blank",) + side["blank"]))
                if side["exit"] is not None:
                    data_end = max(data_end, side["exit"] - f.base_offset)
            events.sort(key=lambda e: e[0])
            last = events[-1][1] if events else None
            for _, event in events:
                kind, offset = event[0], event[1]
                if kind == "corrupt":
                    corrupt += 1
                    corrupt_bytes += event[2]
                    holes.append({"broker": broker.name, "file": f.label(),
                                  "offset": offset - f.base_offset, "commitlog_offset": offset,
                                  "length": event[2], "kind": "corrupt", "code": event[3]})
                elif kind == "unwritten" and event is not last:
                    zero += 1
                    zero_bytes += event[2]
                    holes.append({"broker": broker.name, "file": f.label(),
                                  "offset": offset - f.base_offset, "commitlog_offset": offset,
                                  "length": event[2], "kind": "zeros"})
            if last is not None:
                end_kind = {"blank": "blank", "unwritten": "unwritten"}.get(last[0], end_kind)
                if last[0] in ("unwritten", "blank"):
                    data_end = last[1] - f.base_offset
                elif last[0] == "corrupt" and last[1] + last[2] >= f.base_offset + f.length:
                    end_kind = "corrupt"
            if previous is not None and f.base_offset != previous.base_offset + broker.file_size:
                missing = f.base_offset - (previous.base_offset + broker.file_size)
                holes.append({"broker": broker.name, "file": f.label(), "offset": 0,
                              "commitlog_offset": previous.base_offset + broker.file_size,
                              "length": missing, "kind": "file_gap"})
            previous = f
            rows.append((broker.name, f.name, f.url, f.base_offset, f.length,
                         split_count.get(key, 0), messages, message_bytes, data_end, end_kind,
                         corrupt, corrupt_bytes, zero, zero_bytes))
    return rows, holes


# --- the summary ---------------------------------------------------------------------------------

def _count_if(condition):
    # a NULL flag (no CRC to check) counts as not failed, and a sum of no rows as 0
    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def _queue_table(rows: DataFrame, gaps: DataFrame) -> list[dict]:
    """Per queue: ``rows`` holds the stored records and, after an opened inner batch, its inner
    messages; the figures are the records' (verify's), plus the inner messages counted."""
    position = F.col("inner_position")
    record = position.isNull() | (position == OPENED_RECORD)
    dispatched = record & F.col("transaction").isin(_DISPATCHED)

    def of_records(column):
        return F.when(record, column)

    per_queue = rows.groupBy("broker", "topic", "queue_id").agg(
        _count_if(record).alias("records"),
        _count_if(dispatched).alias("messages"),
        _count_if(record & (F.col("transaction") == _PREPARED)).alias("prepared"),
        _count_if(record & (F.col("transaction") == _ROLLBACK)).alias("rollback"),
        F.sum(of_records(F.col("total_size").cast("long"))).alias("bytes"),
        F.sum(of_records(F.col("body_length").cast("long"))).alias("body_bytes"),
        F.min(F.when(dispatched, F.col("queue_offset"))).alias("min_queue_offset"),
        F.max(F.when(dispatched, F.col("queue_offset"))).alias("max_queue_offset"),
        F.min(of_records(F.col("store_timestamp"))).alias("min_store_timestamp"),
        F.max(of_records(F.col("store_timestamp"))).alias("max_store_timestamp"),
        _count_if(record & (F.col("body_crc_ok") == F.lit(False)) & (F.col("body_length") > 0))
        .alias("crc_failures"),
        _count_if(record & (F.col("prop_crc_ok") == F.lit(False))).alias("prop_crc_failures"),
        _count_if(record & (F.col("physical_offset") != F.col("commitlog_offset")))
        .alias("offset_mismatches"),
        _count_if(position >= 0).alias("inner_messages"))
    skips = F.col("queue_offset") > F.col("expected")
    per_gap = gaps.groupBy("broker", "topic", "queue_id").agg(
        _count_if(skips).alias("gaps"),
        F.sum(F.when(skips, F.col("queue_offset").cast(_WIDE) - F.col("expected").cast(_WIDE))
              .otherwise(0)).cast("string").alias("missing_offsets"),
        _count_if(~skips).alias("duplicates"))
    joined = per_queue.join(per_gap, ["broker", "topic", "queue_id"], "left") \
        .fillna(0, subset=["gaps", "duplicates"]) \
        .orderBy("broker", "topic", "queue_id")
    rows = [row.asDict() for row in joined.collect()]
    for row in rows:
        row["missing_offsets"] = int(row["missing_offsets"] or 0)
    return rows


def _uniq_keys(messages: DataFrame, out_path: str | None, mode: str) -> dict:
    keyed = messages.filter(F.col("uniq_key").isNotNull()) \
        .withColumn("key_hash", F.xxhash64("uniq_key"))
    # most keys are stored once: find the others by a 64-bit hash (a quarter of the shuffled
    # bytes), then group the few candidates by the key itself, which drops hash collisions
    repeated_hashes = keyed.groupBy("key_hash").count().filter(F.col("count") > 1) \
        .select("key_hash")
    repeated = keyed.join(repeated_hashes, "key_hash", "left_semi").groupBy("uniq_key").agg(
        F.count(F.lit(1)).alias("copies"),
        F.countDistinct("broker").alias("broker_count"),
        F.array_sort(F.collect_set("broker")).alias("brokers"),
        F.array_sort(F.collect_set("topic")).alias("topics"),
        F.min("store_timestamp").alias("first_store_timestamp"),
        F.max("store_timestamp").alias("last_store_timestamp")) \
        .filter(F.col("copies") > 1)
    if out_path is not None:
        repeated.write.mode(mode).parquet(out_path)
        repeated = messages.sparkSession.read.parquet(out_path)
    else:
        repeated = repeated.persist(StorageLevel.MEMORY_AND_DISK)
    counts = repeated.agg(F.count(F.lit(1)).alias("repeated"),
                          _count_if(F.col("broker_count") > 1).alias("across")).first()
    sample = repeated.filter(F.col("broker_count") > 1).orderBy("uniq_key") \
        .limit(UNIQ_KEY_SAMPLE).collect()
    return {"stored_more_than_once": int(counts["repeated"] or 0),
            "across_brokers": int(counts["across"] or 0),
            "across_brokers_sample": [{"uniq_key": r["uniq_key"], "copies": r["copies"],
                                       "brokers": list(r["brokers"]),
                                       "topics": list(r["topics"])} for r in sample]}


def _new_totals() -> dict:
    return {"queues": 0, "records": 0, "messages": 0, "inner_messages": 0, "prepared": 0,
            "rollback": 0, "bytes": 0,
            "body_bytes": 0, "crc_failures": 0, "prop_crc_failures": 0, "offset_mismatches": 0,
            "gaps": 0, "missing_offsets": 0, "duplicates": 0, "min_store_timestamp": None,
            "max_store_timestamp": None}


def _totals_by(rows: list[dict], keys: tuple[str, ...]) -> dict:
    out: dict = {}
    for q in rows:
        k = tuple(q[x] for x in keys)
        t = out.get(k)
        if t is None:
            t = out[k] = _new_totals()
        t["queues"] += 1
        for name in ("records", "messages", "inner_messages", "prepared", "rollback", "bytes",
                     "body_bytes",
                     "crc_failures", "prop_crc_failures", "offset_mismatches", "gaps",
                     "missing_offsets", "duplicates"):
            t[name] += int(q[name] or 0)
        for name, pick in (("min_store_timestamp", min), ("max_store_timestamp", max)):
            if q[name] is not None:
                t[name] = q[name] if t[name] is None else pick(t[name], q[name])
    return out


def _summary(brokers, splits, sides, queues, findings_by, uniq, file_rows, holes, notes,
             master, split_size, out, started) -> dict:
    by_broker = _totals_by(queues, ("broker",))
    by_topic = _totals_by(queues, ("broker", "topic"))
    files_of: dict = {}
    for row in file_rows:
        f = files_of.setdefault(row[0], {"files": 0, "commitlog_bytes": 0, "corrupt_regions": 0,
                                         "corrupt_bytes": 0, "zero_holes": 0,
                                         "zero_hole_bytes": 0})
        f["files"] += 1
        f["commitlog_bytes"] += row[4]
        f["corrupt_regions"] += row[10]
        f["corrupt_bytes"] += row[11]
        f["zero_holes"] += row[12]
        f["zero_hole_bytes"] += row[13]
    broker_rows = []
    totals = {"brokers": len(brokers), "files": 0, "commitlog_bytes": 0, "records": 0,
              "messages": 0, "inner_messages": 0, "bytes": 0, "errors": 0, "warnings": 0,
              "infos": 0, "by_code": {}}
    for b in brokers:
        t = by_broker.get((b.name,)) or _new_totals()
        fs = files_of.get(b.name, {"files": 0, "commitlog_bytes": 0, "corrupt_regions": 0,
                                   "corrupt_bytes": 0, "zero_holes": 0, "zero_hole_bytes": 0})
        codes = findings_by.get(b.name, {})
        severities = {ERROR: 0, WARNING: 0, INFO: 0}
        for (code, severity), count in codes.items():
            severities[severity] = severities.get(severity, 0) + count
        by_code: dict = {}
        for (code, _), count in codes.items():
            by_code[code] = by_code.get(code, 0) + count
        gap_holes = [h for h in holes if h["broker"] == b.name and h["kind"] == "file_gap"]
        entry = {
            "broker": b.name, "source": b.source, "root": b.root, "commitlog": b.commitlog,
            "file_size": b.file_size, **fs,
            "checked_by": "verify" if verified_by_verify(b) else "scan",
            "topics": sum(1 for k in by_topic if k[0] == b.name),
            **{k: v for k, v in t.items()},
            "file_gaps": len(gap_holes),
            "missing_bytes": sum(max(0, h["length"]) for h in gap_holes),
            "errors": severities[ERROR], "warnings": severities[WARNING],
            "infos": severities[INFO], "by_code": dict(sorted(by_code.items())),
        }
        broker_rows.append(entry)
        totals["files"] += fs["files"]
        totals["commitlog_bytes"] += fs["commitlog_bytes"]
        for name in ("records", "messages", "inner_messages", "bytes"):
            totals[name] += entry[name]
        totals["errors"] += severities[ERROR]
        totals["warnings"] += severities[WARNING]
        totals["infos"] += severities[INFO]
        for code, count in by_code.items():
            totals["by_code"][code] = totals["by_code"].get(code, 0) + count
    totals["by_code"] = dict(sorted(totals["by_code"].items()))
    topics = [{"broker": k[0], "topic": k[1], **v} for k, v in sorted(by_topic.items())]
    origins = sorted({s["origin"] for s in sides if s.get("origin")})
    peaks = [s["peak_rss"] for s in sides if s.get("peak_rss")]
    return {
        "tool": f"mqtool {__version__} spark audit",
        "master": master,
        "split_size": split_size,
        "tasks": len(splits),
        "out": out,
        "seconds": round(time.perf_counter() - started, 3),
        "totals": totals,
        "brokers": broker_rows,
        "topics": topics,
        "queues": queues,
        "uniq_keys": uniq,
        "holes": holes[:LISTED_HOLES],
        "holes_listed": min(len(holes), LISTED_HOLES),
        "holes_total": len(holes),
        "notes": notes,
        "checks": checks(brokers),
        "executor_code": origins,
        "executor_peak_rss": max(peaks) if peaks else None,
    }


# --- the jobs ------------------------------------------------------------------------------------

def _mode(overwrite: bool) -> str:
    return "overwrite" if overwrite else "errorifexists"


def _check_out(spark: SparkSession, out: str | None, overwrite: bool) -> None:
    check_output(out, overwrite, exists=functools.partial(session.path_exists, spark),
                 is_empty_dir=functools.partial(session.is_empty_dir, spark))


def audit(spark: SparkSession, sources: list[str], *, broker_names: list[str] | None = None,
          out: str | None = None, split_size: int = DEFAULT_SPLIT_SIZE,
          overwrite: bool = False, check_crc: bool = True) -> AuditResult:
    """Audit the CommitLogs of ``sources`` (store roots or CommitLog directories, one broker
    each) on ``spark``. With ``out``, writes the Parquet tables messages (partitioned by broker
    and store_date), findings (by broker), files and uniq_key_duplicates, and summary.json;
    without it the messages are cached in the session instead."""
    started = time.perf_counter()
    _check_out(spark, out, overwrite)
    brokers, splits = scanpass.plan(spark, sources, broker_names, split_size,
                                    one_read=out is None or writes_locally(out))
    mode = _mode(overwrite)
    label = _labeller(brokers)
    messages_path = session.join(out, "messages") if out else None
    scanned, rows, records, messages, sides, cutoffs, notes, verified, repeated = \
        scanpass.scan_audit(spark, brokers, splits, check_crc, label, messages_path, mode)
    phases = {"plan_scan_and_verify": time.perf_counter() - started}

    # one source per broker: verify's findings for store roots, the scan's for the others
    scanned_only = [b for b in brokers if b.name not in verified]
    driver_rows = [f for b in scanned_only for f in layout_findings(b)] + \
        [f for f in _region_findings(sides, cutoffs, label) if f["broker"] not in verified] + \
        [row for found in verified.values() for row in found.rows]
    # the tasks returned partials (their tables written by pyarrow, or none): no query over rows
    from_partials = repeated is not None
    if from_partials:
        queues, gap_list = merge_queues(
            [(side["broker"], side["file"], side["queues"])
             for side in _kept_sides(sides, cutoffs)])
        unverified = {b.name for b in scanned_only}
        driver_rows += _problem_findings(_kept_sides(sides, cutoffs), unverified, label) + \
            _gap_rows(gap_list, unverified, label)
        gaps = None
    else:
        gaps = queue_steps(records)
    findings_path = session.join(out, "findings") if out else None
    findings = None      # the findings as a Spark frame: only when the scan's checks add some
    findings_by: dict = {}
    if scanned_only and not from_partials:
        # used twice (findings, per-queue figures): sort the queues once
        gaps = gaps.persist(StorageLevel.MEMORY_AND_DISK)
        rel = _file_label(brokers)
        unverified = F.col("broker").isin([b.name for b in scanned_only])
        findings = _record_findings(records.filter(unverified), rel) \
            .unionByName(_gap_findings(spark, gaps.filter(unverified), rel)) \
            .unionByName(_finding_frame(spark, driver_rows))
        if out is not None:
            _write_findings(findings, findings_path, mode, len(brokers))
            findings = spark.read.schema(schema.struct_type(schema.FINDING_COLUMNS)) \
                .parquet(findings_path)
        else:
            findings = findings.persist(StorageLevel.MEMORY_AND_DISK)
        for row in findings.groupBy("broker", "code", "severity").count().collect():
            findings_by.setdefault(row["broker"], {})[(row["code"], row["severity"])] = \
                row["count"]
        listed = [r.asDict() for r in findings.orderBy("broker", "file", "offset", "code")
                  .limit(LISTED_FINDINGS).collect()]
    else:
        # every finding is one of the driver's rows: no query needed to count or list them
        for row in driver_rows:
            if row["broker"] not in verified:
                counts = findings_by.setdefault(row["broker"], {})
                key = (row["code"], row["severity"])
                counts[key] = counts.get(key, 0) + 1
        if writes_locally(out):
            write_small_table(findings_path, schema.FINDING_COLUMNS, _finding_tuples(driver_rows),
                              ("broker",), overwrite=mode == "overwrite")
        elif out is not None:
            _write_findings(_finding_frame(spark, driver_rows), findings_path, mode,
                            len(brokers))
        listed = _first_findings(driver_rows, LISTED_FINDINGS)
    for name, found in verified.items():
        # verify's counts: also what a file's checks counted beyond their listing cap
        findings_by[name] = dict(found.counts)
    for r in listed:
        if r.get("details"):
            r["details"] = json.loads(r["details"])
    phases["findings"] = time.perf_counter() - started - sum(phases.values())

    if from_partials:
        uniq = _uniq_summary(repeated)
        if out is not None:
            write_uniq_table(session.join(out, "uniq_key_duplicates"),
                             sorted(repeated, key=lambda r: r["uniq_key"]),
                             overwrite=mode == "overwrite")
    else:
        # two independent queries at once: each leaves task slots idle while the driver plans
        # and compiles it, or while its last tasks run, and the other's tasks take them
        with concurrent.futures.ThreadPoolExecutor(1, "mqtool-uniq-keys") as pool:
            keys = pool.submit(_uniq_keys, messages,
                               session.join(out, "uniq_key_duplicates") if out else None, mode)
            queues = _queue_table(rows, gaps)
            uniq = keys.result()
    phases["queues_and_uniq_keys"] = time.perf_counter() - started - sum(phases.values())
    if out is not None:    # the last read of the scanned rows is done
        scanpass.publish_messages(spark, messages_path, sides, cutoffs)
        phases["publish"] = time.perf_counter() - started - sum(phases.values())
    file_rows, holes = _file_rows(brokers, sides, cutoffs, splits)
    if writes_locally(out):
        write_small_table(session.join(out, "files"), schema.FILE_COLUMNS, file_rows,
                          overwrite=mode == "overwrite")
    elif out is not None:
        spark.createDataFrame(file_rows, schema.struct_type(schema.FILE_COLUMNS),
                              verifySchema=False).coalesce(1).write.mode(mode) \
            .parquet(session.join(out, "files"))
    phases["files"] = time.perf_counter() - started - sum(phases.values())
    summary = _summary(brokers, splits, sides, queues, findings_by, uniq, file_rows, holes, notes,
                       spark.sparkContext.master, split_size, out, started)
    # where the job's time went (seconds), for sizing and benchmarks
    summary["phase_seconds"] = {k: round(v, 3) for k, v in phases.items()}
    if out is not None:
        session.write_text(spark, session.join(out, "summary.json"),
                           json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    else:
        if findings is not None:
            findings.unpersist()
        if scanned is not None:
            scanned.unpersist()
    if gaps is not None:
        gaps.unpersist()
    return AuditResult(summary, listed, out, len(splits), sides)


def export(spark: SparkSession, sources: list[str], out: str, *, fmt: str = "parquet",
           broker_names: list[str] | None = None, split_size: int = DEFAULT_SPLIT_SIZE,
           topics: list[str] | None = None, decompress: bool = True, unwrap: bool = True,
           overwrite: bool = False) -> dict:
    """Every message of ``sources`` with its body to ``out`` (Parquet or JSON lines, partitioned
    by broker and store_date; with ``unwrap``, the inner messages of a 5.x inner batch instead
    of the stored record, as ``dump``); returns a small summary."""
    started = time.perf_counter()
    _check_out(spark, out, overwrite)
    brokers, splits = scanpass.plan(spark, sources, broker_names, split_size)
    columns = schema.names(schema.EXPORT_COLUMNS)
    fn = functools.partial(export_partition, check_crc=True, decompress=decompress, unwrap=unwrap,
                           topics=frozenset(topics) if topics else None, columns=columns)
    _, sides, cutoffs, notes = scanpass.scan(spark, splits, fn, schema.EXPORT_COLUMNS, out, fmt,
                                     _mode(overwrite), ["broker", "store_date"])
    per_broker: dict = {b.name: {"broker": b.name, "source": b.source, "files": len(b.files),
                                 "commitlog_bytes": b.commitlog_bytes, "records_scanned": 0,
                                 "exported": 0}
                        for b in brokers}
    for side in sides:
        cut = cutoffs.get((side["broker"], side["file"]))
        if cut is not None and side["entry"] is not None and side["entry"] > cut:
            continue   # rows past a blank record, removed from the dataset
        per_broker[side["broker"]]["records_scanned"] += side["messages"]
        per_broker[side["broker"]]["exported"] += side.get("exported", 0)
    return {"tool": f"mqtool {__version__} spark export", "master": spark.sparkContext.master,
            "format": fmt, "out": out, "split_size": split_size, "tasks": len(splits),
            "topics": sorted(topics) if topics else None, "decompress": decompress,
            "unwrap": unwrap,
            "brokers": list(per_broker.values()),
            "exported": sum(b["exported"] for b in per_broker.values()),
            "notes": notes, "seconds": round(time.perf_counter() - started, 3)}
