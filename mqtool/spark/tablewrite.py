"""Executor side: an audit task writes its split's rows of the ``messages`` table itself, with
pyarrow, in the layout Spark's partitioned writer makes
(``<table>/broker=<b>/store_date=<d>/part-<n>-mqtool.snappy.parquet``), and returns only its
side report.

Why not ``mapInArrow`` and Spark's writer: the JVM turns every Arrow batch into its own rows and
encodes them again as Parquet, in the task's JVM thread, beside the Python worker that scans.
On 1.1 M messages that cost more CPU than the scan itself, and because the two run at once a
``local[1]`` audit already kept both cores busy, so a second core bought nothing. pyarrow writes
the same columns in a fraction of that, in the worker's own thread.

Only for a table on a file system the executors write by local path (a local path, ``file://``,
a shared mount): :func:`writes_locally`. Every file is written under a hidden name and renamed
into place whole, so a reader never sees half a part, and a retried or speculative task writes
the same names again instead of adding rows twice.

No pyspark here.
"""
from __future__ import annotations

import os
import shutil
import uuid
from typing import Iterator

from .plan import Split, is_local, local_path

#: the columns that are directories, not file columns, in the written layout
PARTITION_COLUMNS = ("broker", "store_date")
#: characters Spark escapes as %XX in a partition directory's value (its catalog's
#: escapePathName): a reader unescapes them, so writing them raw would change the value
_ESCAPED = frozenset('"#%\'*/:=?\\\x7f{[]^') | frozenset(chr(c) for c in range(1, 0x20))


def writes_locally(out_path: str | None) -> bool:
    """Whether the audit's tasks write the messages table themselves (see the module)."""
    return out_path is not None and is_local(out_path)


def partition_dir(column: str, value: str) -> str:
    """``column=value`` as Spark names a partition's directory."""
    return column + "=" + "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def part_name(number: int) -> str:
    return f"part-{number:05d}-mqtool.snappy.parquet"


def _in_progress(final: str) -> str:
    """Where a part is written before it is renamed to ``final``: hidden (Spark lists no name
    that starts with '.') and unique to this attempt."""
    folder, name = os.path.split(final)
    return os.path.join(folder, f".{name}.{uuid.uuid4().hex}.inprogress")


class SplitTableWriter:
    """The parts one split writes: one Parquet file per store_date the split's rows fall on
    (most splits: one), each renamed into place by :meth:`close`."""

    def __init__(self, table_dir: str, broker: str, number: int):
        self._broker_dir = os.path.join(table_dir, partition_dir("broker", broker))
        self._name = part_name(number)
        self._writers: dict = {}     # store_date -> (writer, hidden path, final path)

    def _writer(self, date: str, schema):
        import pyarrow.parquet as pq

        entry = self._writers.get(date)
        if entry is None:
            folder = os.path.join(self._broker_dir, partition_dir("store_date", date))
            os.makedirs(folder, exist_ok=True)
            final = os.path.join(folder, self._name)
            hidden = _in_progress(final)
            entry = self._writers[date] = (pq.ParquetWriter(hidden, schema, compression="snappy"),
                                           hidden, final)
        return entry[0]

    def write(self, batch) -> None:
        """Write one Arrow batch of the messages columns (the partition columns included)."""
        import pyarrow.compute as pc

        if batch.num_rows == 0:
            return
        dates = batch.column("store_date")
        data = batch.drop_columns(list(PARTITION_COLUMNS))
        distinct = pc.unique(dates).to_pylist()
        if len(distinct) == 1:
            self._writer(distinct[0], data.schema).write_batch(data)
            return
        for date in distinct:
            self._writer(date, data.schema).write_batch(data.filter(pc.equal(dates, date)))

    def close(self) -> None:
        for writer, hidden, final in self._writers.values():
            writer.close()
            os.replace(hidden, final)
        self._writers.clear()

    def abort(self) -> None:
        for writer, hidden, _ in self._writers.values():
            try:
                writer.close()
            finally:
                try:
                    os.unlink(hidden)
                except OSError:
                    pass
        self._writers.clear()


def write_small_table(table: str, columns, rows: list[tuple],
                      partition_by: tuple[str, ...] = (), overwrite: bool = False) -> None:
    """Driver side: a small table (findings the driver holds, the files table) written as Spark
    writes it, one part per partition, without a Spark job (each costs more to plan than these
    rows cost to write). ``columns`` as :mod:`mqtool.spark.schema` lists them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .arrow import arrow_schema

    table_dir = local_path(table)
    if overwrite:
        shutil.rmtree(table_dir, ignore_errors=True)
    os.makedirs(table_dir)      # FileExistsError for an earlier table not to be overwritten
    names = [name for name, _ in columns]
    at = [names.index(name) for name in partition_by]
    groups: dict = {} if rows or partition_by else {(): []}
    for row in rows:
        groups.setdefault(tuple(row[i] for i in at), []).append(row)
    kept = tuple(c for c in columns if c[0] not in partition_by)
    for values, part in groups.items():
        folder = os.path.join(table_dir, *(partition_dir(name, value)
                                           for name, value in zip(partition_by, values)))
        os.makedirs(folder, exist_ok=True)
        data = pa.Table.from_pylist([dict(zip(names, row)) for row in part],
                                    schema=arrow_schema(kept))
        final = os.path.join(folder, part_name(0))
        hidden = _in_progress(final)
        pq.write_table(data, hidden, compression="snappy")
        os.replace(hidden, final)
    open(os.path.join(table_dir, "_SUCCESS"), "wb").close()


def audit_write_partition(numbers: Iterator[int], splits: list[Split], check_crc: bool,
                          table: str) -> Iterator[dict]:
    """``mapPartitions`` body of the audit's scan when its tasks write the table: the input is
    split numbers; each split's rows (:func:`mqtool.spark.arrow.split_batches`, as the
    ``mapInArrow`` path hands them to Spark) go to ``table``, and its side report is the
    result."""
    from .arrow import count_opened, split_batches
    from .splits import new_side, note_done

    table_dir = local_path(table)
    for number in numbers:
        split = splits[number]
        side = new_side(split)
        side["opened"] = 0
        writer = SplitTableWriter(table_dir, split.broker, number)
        try:
            for batch in split_batches(split, check_crc=check_crc, side=side, store_date=True,
                                       unwrap=True, keep_records=True):
                if batch.column("inner_num").null_count < batch.num_rows:
                    side["opened"] += count_opened(batch)
                writer.write(batch)
            writer.close()
        except BaseException:
            writer.abort()
            raise
        note_done(side)
        yield side


def audit_task_partition(items, splits: list[Split], check_crc: bool, table: str,
                         contexts) -> Iterator[tuple]:
    """``mapPartitions`` body of the audit's one job when its tasks write the table: an item is
    ("scan", split number), answered ("side", the split's side report) once its rows are
    written, or ("check", (broker, file index)), answered ("check", (broker, verify's result
    for the file)) (:func:`mqtool.spark.crosscheck.check_one`)."""
    from .crosscheck import check_one

    for kind, what in items:
        if kind == "scan":
            for side in audit_write_partition([what], splits, check_crc, table):
                yield "side", side
        else:
            yield "check", check_one(contexts, what)
