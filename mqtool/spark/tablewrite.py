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


class _NoTable:
    """An audit without ``--out``: the rows are seen, not written."""

    def write(self, batch) -> None:
        pass

    close = abort = lambda self: None


class SplitAudit:
    """What an audit task does with the scan events of one split: its rows (as
    :func:`mqtool.spark.arrow.split_batches` makes them) written to the table (None: nowhere),
    its side report, and its partials (:class:`mqtool.spark.partials.SplitPartial`). The
    events come from the split's own scan, or from verify's checks of the whole file
    (:func:`audit_task_partition`): one read either way."""

    def __init__(self, split: Split, number: int, table_dir: str | None, buckets: int):
        from .partials import SplitPartial
        from .splits import BodyReader, new_side

        self.split = split
        self.side = new_side(split)
        self.side["opened"] = 0
        self.partial = SplitPartial(split.name, buckets)
        self.writer = SplitTableWriter(table_dir, split.broker, number) \
            if table_dir is not None else _NoTable()
        self.reader = BodyReader(split)

    def event(self, event) -> None:
        from ..scan import RecordBatch
        from .arrow import count_opened, message_batch
        from .splits import note_batch, note_event

        if type(event) is not RecordBatch:
            note_event(self.side, event)
            return
        note_batch(self.side, event)
        batch = message_batch(self.split, event, body_reader=self.reader, store_date=True,
                              unwrap=True, keep_records=True)
        if batch.column("inner_num").null_count < batch.num_rows:
            self.side["opened"] += count_opened(batch)
        self.writer.write(batch)
        self.partial.add(batch)

    def finish(self) -> Iterator[tuple]:
        """("side", the side report with its partials), then (bucket, (broker, keys)) per
        UNIQ_KEY bucket it has keys for."""
        from .splits import note_done

        self.reader.close()
        self.writer.close()
        side = self.side
        side["queues"] = self.partial.queues()
        side["problems"] = self.partial.record_problems()
        keys = self.partial.key_buckets()
        note_done(side)
        yield "side", side
        for bucket, payload in keys:
            yield bucket, (self.split.broker, payload)

    def abort(self) -> None:
        self.reader.close()
        self.writer.abort()


def audit_write_partition(numbers: Iterator[int], splits: list[Split], check_crc: bool,
                          table: str | None, buckets: int = 0) -> Iterator[tuple]:
    """``mapPartitions`` body of the audit's scan when its tasks write the table: the input is
    split numbers; each split's rows go to ``table`` (None: nowhere). Yields, per split,
    ("side", its side report with its partials), then (bucket, (broker, keys)) for each of
    ``buckets`` it has UNIQ_KEYs for (:class:`SplitAudit`)."""
    from .splits import split_events

    table_dir = local_path(table) if table is not None else None
    for number in numbers:
        split = splits[number]
        audit = SplitAudit(split, number, table_dir, buckets)
        try:
            for event in split_events(split, check_crc=check_crc, batches=True):
                audit.event(event)
        except BaseException:
            audit.abort()
            raise
        yield from audit.finish()


#: the shuffle key of what is not a UNIQ_KEY bucket (side reports, verify's results)
REPORTS = -1


def audit_task_partition(items, splits: list[Split], check_crc: bool, table: str,
                         contexts, buckets: int = 0) -> Iterator[tuple]:
    """``mapPartitions`` body of the audit's one job when its tasks write the table: an item is
    ("both", (broker, file index, split number)), a whole file of a store root whose rows are
    written while verify checks it (answered as the two below together), or
    ("scan", split number), answered (REPORTS, ("side", the split's side report)) once its rows
    are written and (bucket, ("keys", (broker, hashes...))) for its UNIQ_KEYs, or ("check",
    (broker, file index)), answered (REPORTS, ("check", (broker, verify's result for the
    file))) (:func:`mqtool.spark.crosscheck.check_one`). Keyed for the UNIQ_KEY shuffle
    (:func:`reduce_partition`)."""
    from .crosscheck import check_one

    def keyed(pairs):
        for key, value in pairs:
            if key == "side":
                yield REPORTS, ("side", value)
            else:
                yield key, ("keys", value)

    for kind, what in items:
        if kind == "scan":
            yield from keyed(audit_write_partition([what], splits, check_crc, table, buckets))
        elif kind == "both":
            # verify's checks of a whole file, its rows written from the same read
            broker, index, number = what
            audit = SplitAudit(splits[number], number,
                               local_path(table) if table is not None else None, buckets)
            try:
                checked = check_one(contexts, (broker, index), observe=audit.event)
            except BaseException:
                audit.abort()
                raise
            yield REPORTS, ("check", checked)
            yield from keyed(audit.finish())
        else:
            yield REPORTS, ("check", check_one(contexts, what))


def shuffle_partition(key: int) -> int:
    """The reduce partition of a shuffle key: the reports go to partition 0, bucket b to b+1."""
    return key + 1


def reduce_partition(pairs) -> Iterator[tuple]:
    """Reduce side of the audit's job: reports pass through; one UNIQ_KEY bucket's hashes
    become ("uniq", the keys stored more than once) (:func:`mqtool.spark.partials.repeated_keys`)."""
    from .partials import repeated_keys

    parts = []
    for _, (kind, value) in pairs:
        if kind == "keys":
            parts.append(value)
        else:
            yield kind, value
    repeated = repeated_keys(parts)
    if repeated:
        yield "uniq", repeated


def write_uniq_table(table: str, rows: list[dict], overwrite: bool = False) -> None:
    """Driver side: the uniq_key_duplicates table (one part; the rows are the keys stored more
    than once) in the schema Spark's query gave it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table_dir = local_path(table)
    if overwrite:
        shutil.rmtree(table_dir, ignore_errors=True)
    os.makedirs(table_dir)
    schema = pa.schema([("uniq_key", pa.string()), ("copies", pa.int64()),
                        ("broker_count", pa.int64()), ("brokers", pa.list_(pa.string())),
                        ("topics", pa.list_(pa.string())),
                        ("first_store_timestamp", pa.int64()),
                        ("last_store_timestamp", pa.int64())])
    final = os.path.join(table_dir, part_name(0))
    hidden = _in_progress(final)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), hidden, compression="snappy")
    os.replace(hidden, final)
    open(os.path.join(table_dir, "_SUCCESS"), "wb").close()
