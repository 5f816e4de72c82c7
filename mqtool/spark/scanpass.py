"""The Spark audit's and export's scan pass: one task per split of the CommitLog files, the rows
written (or cached) once, and the tasks' side reports joined back into the sequential scan
(:func:`chain_check`). What comes after the scan is :mod:`mqtool.spark.job`'s.

With ``--out`` on a file system the executors write by local path, the audit's tasks write the
``messages`` table themselves (:mod:`mqtool.spark.tablewrite`) in the same job as verify's
per-file checks; otherwise ``mapInArrow`` hands their Arrow batches to Spark, which writes them
(``hdfs://``, ``s3a://``) or caches them, and the side reports come back through an accumulator.
"""
from __future__ import annotations

import concurrent.futures
import functools
import os
import shutil
from pathlib import Path

from pyspark import AccumulatorParam, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import crosscheck, schema, session
from .arrow import LAST_MILLI, OPENED_RECORD, audit_arrow_partition
from .plan import BrokerInput, Split, local_path, make_splits, resolve_inputs
from .splits import check_remote_reader
from .tablewrite import (audit_task_partition, reduce_partition, shuffle_partition,
                         writes_locally)


class _ListParam(AccumulatorParam):
    def zero(self, value):
        return []

    def addInPlace(self, a, b):
        a.extend(b)
        return a


# --- the scan ------------------------------------------------------------------------------------

def plan(spark: SparkSession, sources: list[str], broker_names: list[str] | None,
          split_size: int, one_read: bool = False) -> tuple[list[BrokerInput], list[Split]]:
    """The inputs and their splits. With ``one_read`` (the audit's tasks return partials), a
    store root that verify checks (:func:`mqtool.spark.crosscheck.verified_by_verify`) is
    split by file: verify checks a file whole, and its task writes the file's rows from the
    same read."""
    check_remote_reader(sources)
    brokers = resolve_inputs(list(sources), broker_names, session.input_lister(spark))
    if not one_read:
        return brokers, make_splits(brokers, split_size)
    splits = []
    for broker in brokers:
        whole = crosscheck.verified_by_verify(broker)
        splits += make_splits([broker], max(split_size, broker.file_size, 1) if whole
                              else split_size)
    return brokers, splits


def store_date(column: str = "store_timestamp"):
    ts = F.col(column)
    return (F.when(ts.between(0, LAST_MILLI),
                   F.date_format(F.timestamp_millis(ts), "yyyy-MM-dd"))
            .otherwise(F.lit("invalid")))


def dedupe_sides(values: list[dict]) -> list[dict]:
    """One report per split: a recomputed partition (an evicted cache, a retried stage) may
    report twice."""
    by_key = {}
    for side in values:
        by_key[(side["broker"], side["file"], side["index"])] = side
    return [by_key[k] for k in sorted(by_key, key=lambda k: (k[0], int(k[1]), k[2]))]


def chain_check(sides: list[dict], label=None) -> tuple[dict, list[str]]:
    """Join the splits of each file back into the sequential scan.

    The sequential scan ends a file at its blank record; a split after that one still
    resynchronises on whatever plausible records lie past the blank (stale data an old
    truncation left), so its rows must go: returns {(broker, file): blank offset} for such files,
    and notes for splits whose first record is not where the previous split's last one ended
    (records overlapping a split boundary, which the scanner cannot tell apart)."""
    cutoffs: dict = {}
    notes = []
    previous: dict = {}
    for side in sides:
        key = (side["broker"], side["file"])
        state = previous.setdefault(key, {"exit": None, "blank": None})
        if side["entry"] is None:
            continue
        if state["blank"] is not None:
            cutoffs[key] = state["blank"]
            continue
        if state["exit"] is not None and side["entry"] != state["exit"]:
            where = label(*key) if label else f"commitlog/{key[1]}"
            notes.append(f"{key[0]}: {where}: the record at {side['entry']} "
                         f"(split {side['index']}) does not start where the previous one ends "
                         f"({state['exit']}); records overlap there")
        if side["blank"] is not None:
            state["blank"] = side["blank"][0]
        state["exit"] = side["exit"]
    return cutoffs, notes


def cut(frame: DataFrame, cutoffs: dict) -> DataFrame:
    if not cutoffs:
        return frame
    spurious = None
    for (broker, name), offset in cutoffs.items():
        cond = (F.col("broker") == broker) & (F.col("file") == name) & \
            (F.col("commitlog_offset") > offset)
        spurious = cond if spurious is None else spurious | cond
    return frame.filter(~spurious)


def _replace_table(spark: SparkSession, path: str, frame: DataFrame, fmt: str,
                   partition_by: list[str]) -> None:
    """Replace the written table at ``path`` with ``frame`` (a query over it): written beside
    it first, then swapped in."""
    fixed = path.rstrip("/") + ".__mqtool_fixed"
    frame.write.mode("overwrite").partitionBy(*partition_by).format(fmt).save(fixed)
    session.delete(spark, path)
    session.rename(spark, fixed, path)


def _rewrite_without(spark: SparkSession, path: str, struct, cutoffs: dict, fmt: str,
                     partition_by: list[str]) -> None:
    """Drop the rows past a file's blank record from a written table (rare: see chain_check)."""
    frame = cut(spark.read.schema(struct).format(fmt).load(path), cutoffs)
    _replace_table(spark, path, frame, fmt, partition_by)


def _finish_scan(spark: SparkSession, frame: DataFrame, sink, out_path: str | None, fmt: str,
                 mode: str, partition_by: list[str]):
    """Write (or cache) the scan's rows, then join the tasks' side reports: returns the rows as
    a DataFrame to query, the side reports, the rows cut as stale ({(broker, file): blank
    offset}) and notes."""
    full = frame.schema
    if out_path is not None:
        frame.write.mode(mode).partitionBy(*partition_by).format(fmt).save(out_path)
        sides = dedupe_sides(sink.value)
        cutoffs, notes = chain_check(sides)
        if cutoffs:
            _rewrite_without(spark, out_path, full, cutoffs, fmt, partition_by)
        result = spark.read.schema(full).format(fmt).load(out_path) if fmt == "parquet" else None
    else:
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        frame.count()
        sides = dedupe_sides(sink.value)
        cutoffs, notes = chain_check(sides)
        result = cut(frame, cutoffs)
    return result, sides, cutoffs, notes


def _scanned_struct():
    """The audit's scanned rows: the messages columns and the store_date they are filed by."""
    return schema.struct_type(schema.MESSAGE_COLUMNS + (("store_date", "string"),))


def scan_audit(spark: SparkSession, brokers: list[BrokerInput], splits: list[Split],
               check_crc: bool, label, out_path: str | None, mode: str):
    """The audit's scan, and verify's checks of its store roots (:mod:`.crosscheck`): one task
    per split, each turning its byte range into Arrow record batches of the scanner's columns,
    no Python object per message. Tasks write those batches to a table on a local or shared
    file system themselves (:mod:`mqtool.spark.tablewrite`); otherwise they hand them to Spark
    (``mapInArrow``), which writes them (``hdfs://``, ``s3a://``) or, without ``out_path``,
    caches them. The rows serve both views:

    * ``records``, one row per stored record, what verify checks and counts (an inner batch is
      one record);
    * ``messages``, one row per message, an inner batch's inner messages in place of its record
      (what ``spark.read.format("rocketmq")`` and ``spark export`` give): the table published.

    An opened inner batch's record is a row of the scan marked ``inner_position`` =
    OPENED_RECORD; :func:`publish_messages` drops those rows (and stale ones) from the written
    table at the end, which costs a rewrite only when there are any.

    Returns (rows, records, messages, side reports, rows cut as stale, notes, verify's findings
    by broker, and, when the tasks wrote the table, the UNIQ_KEYs stored more than once: the
    side reports then hold the per-queue partials, :mod:`mqtool.spark.partials`)."""
    struct = _scanned_struct()
    repeated = None
    if out_path is None or writes_locally(out_path):
        # without a table to write, the tasks only return what they saw
        reports, verified, repeated = write_and_verify(
            spark, brokers, splits, check_crc,
            local_path(out_path) if out_path is not None else None, mode)
        sides = dedupe_sides(reports)
        cutoffs, notes = chain_check(sides, label)
        if out_path is None:
            return None, None, None, None, sides, cutoffs, notes, verified, repeated
        rows = spark.read.schema(struct).parquet(out_path)
    else:
        # verify's job is submitted alongside the scan's, not after it: its tasks take the
        # slots the scan's last tasks leave idle, and its driver steps overlap the scan
        with concurrent.futures.ThreadPoolExecutor(1, "mqtool-verify") as pool:
            verifying = pool.submit(crosscheck.store_findings, spark, brokers, check_crc)
            rows, reports = arrow_scan(spark, splits, check_crc, struct, out_path, mode)
            verified = verifying.result()
    sides = dedupe_sides(reports)
    cutoffs, notes = chain_check(sides, label)
    kept = cut(rows, cutoffs)
    records, messages = views(kept)
    return rows, kept, records, messages, sides, cutoffs, notes, verified, repeated


def views(rows: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The scanned rows as records (verify's unit) and as messages (the published table)."""
    position = F.col("inner_position")
    return (rows.filter(position.isNull() | (position == OPENED_RECORD)),
            rows.filter(position.isNull() | (position >= 0)))


def write_and_verify(spark: SparkSession, brokers: list[BrokerInput], splits: list[Split],
                     check_crc: bool, table: str | None, mode: str) \
        -> tuple[list[dict], dict, list]:
    """One job whose tasks write the messages table (a task per split) and run verify's
    per-file checks (a task per CommitLog file of a store root), the largest first so that no
    big task starts last; the scan tasks' UNIQ_KEY hashes are shuffled by bucket and compared
    on the reduce side. Returns the side reports (with their partials), verify's findings by
    broker, and the UNIQ_KEYs stored more than once."""
    if table is not None:
        if mode == "overwrite":
            shutil.rmtree(table, ignore_errors=True)
        os.makedirs(table, exist_ok=True)
    prepared = crosscheck.prepare(brokers, check_crc)
    # a whole file of a store root: verify's checks and its rows from one read ("both")
    whole = {(s.broker, s.base_offset): n for n, s in enumerate(splits)
             if s.broker in prepared and s.start == 0 and s.end == s.length}
    work, joined = [], set()
    for (name, index), size in crosscheck.file_tasks(prepared):
        number = whole.get((name, prepared[name].ctx.segments[index].base_offset))
        if number is None:
            work.append((("check", (name, index)), size))
        else:
            work.append((("both", (name, index, number)), size))
            joined.add(number)
    work += [(("scan", n), split.end - split.start) for n, split in enumerate(splits)
             if n not in joined]
    work.sort(key=lambda item: -item[1])
    items = [item for item, _ in work]
    sc = spark.sparkContext
    contexts = sc.broadcast(crosscheck.contexts_of(prepared))
    # UNIQ_KEY hash buckets: the reduce side of the job's one shuffle
    buckets = max(1, int(spark.conf.get("spark.sql.shuffle.partitions", "8")))
    try:
        job = sc.parallelize(items, max(1, len(items))).mapPartitions(functools.partial(
            audit_task_partition, splits=splits, check_crc=check_crc, table=table,
            contexts=contexts, buckets=buckets)) \
            .partitionBy(buckets + 1, shuffle_partition) \
            .mapPartitions(reduce_partition)
        with concurrent.futures.ThreadPoolExecutor(1, "mqtool-audit") as pool:
            running = pool.submit(job.collect)
            # verify's checks that need no record (IndexFile slots and chains), meanwhile
            for checks in prepared.values():
                checks.run_later()
            results = running.result()
    finally:
        contexts.destroy()
    if table is not None:
        Path(table, "_SUCCESS").touch()
    sides = [value for kind, value in results if kind == "side"]
    checked = [value for kind, value in results if kind == "check"]
    repeated = [row for kind, value in results if kind == "uniq" for row in value]
    return sides, crosscheck.merge(prepared, checked), repeated


def arrow_scan(spark: SparkSession, splits: list[Split], check_crc: bool, struct,
               out_path: str | None, mode: str):
    """The scan handing Arrow batches to Spark: returns the rows (written to ``out_path`` and
    read back, or cached) and the side reports."""
    sc = spark.sparkContext
    sink = sc.accumulator([], _ListParam())
    fn = functools.partial(audit_arrow_partition, splits=splits, check_crc=check_crc, sink=sink)
    rows = spark.range(0, len(splits), 1, max(1, len(splits))).mapInArrow(fn, struct)
    if out_path is not None:
        # caching costs more than writing Parquet and reading it back (measured: 9 s against
        # 5 s for 1.1 M rows)
        rows.write.mode(mode).partitionBy("broker", "store_date").parquet(out_path)
        rows = spark.read.schema(struct).parquet(out_path)
    else:
        rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
        rows.count()
    return rows, sink.value


def publish_messages(spark: SparkSession, path: str, sides: list[dict], cutoffs: dict) -> None:
    """Leave only the message view in the written table: rows past a file's blank record
    (see chain_check) and opened inner batches' records go. Rare: most audits rewrite nothing."""
    if not cutoffs and not any(side.get("opened") for side in sides):
        return
    _, messages = views(cut(spark.read.schema(_scanned_struct()).parquet(path), cutoffs))
    _replace_table(spark, path, messages, "parquet", ["broker", "store_date"])


def scan(spark: SparkSession, splits: list[Split], partition_fn, columns, out_path: str | None,
         fmt: str, mode: str, partition_by: list[str]):
    """Run the one scan job. Returns the rows as a DataFrame to query (read back from
    ``out_path``, or cached), the tasks' side reports, the rows cut as stale
    ({(broker, file): blank offset}) and notes."""
    sc = spark.sparkContext
    sink = sc.accumulator([], _ListParam())
    rdd = sc.parallelize(splits, max(1, len(splits))).mapPartitions(
        functools.partial(partition_fn, sink=sink))
    struct = schema.struct_type(columns)
    frame = spark.createDataFrame(rdd, struct, verifySchema=False) \
        .withColumn("store_date", store_date())
    return _finish_scan(spark, frame, sink, out_path, fmt, mode, partition_by)
