"""What the ``rocketmq`` data source skips for a query's filters (no pyspark: the executors run
:meth:`RowFilter.keep_records` and :meth:`RowFilter.exact`).

Spark 4.1+ hands the reader the conjunctive filters of a query (``DataSourceReader.
pushFilters``). The reader takes those on ``topic``, ``queue_id``, ``store_timestamp``,
``uniq_key`` and ``keys`` (equality, ``IN``, ranges of the numbers, ``IS NOT NULL``) as plain
tuples, and:

* on the driver, answers ``uniq_key`` / ``keys`` equality through the store's IndexFiles, as
  ``mqtool query`` does (:func:`index_candidates`): only the splits that hold a candidate
  record are read at all;
* on the executors, drops every record of a scanner batch that cannot match before any
  property, body or ``system`` column is decoded (:meth:`RowFilter.keep_records`), then applies
  the filters exactly to the rows built (:meth:`RowFilter.exact`), so Spark need not evaluate
  them again.

Spark's Python data source API (4.3) has no column pruning: the reader is given the whole
schema whatever the query selects. Bodies are decoded only with the ``bodies`` option, the
``system`` column only for system-topic rows.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

#: columns the reader filters on, and the Python type of their literals
COLUMNS = {"topic": str, "queue_id": int, "store_timestamp": int, "uniq_key": str,
           "keys": str}
#: filters the IndexFiles answer (the broker indexes UNIQ_KEY and every KEYS item)
INDEXED = ("uniq_key", "keys")
_COMPARE = {"GreaterThan": "gt", "GreaterThanOrEqual": "ge", "LessThan": "lt",
            "LessThanOrEqual": "le"}


_BOUNDS = {"queue_id": 1 << 31, "store_timestamp": 1 << 63}


def _literal(column: str, value) -> bool:
    kind = COLUMNS[column]
    if not isinstance(value, kind) or isinstance(value, bool):
        return False
    bound = _BOUNDS.get(column)
    return bound is None or -bound <= value < bound


def holding(splits, candidates: dict[str, frozenset[int]]) -> list:
    """The splits that hold a candidate record of their broker (all splits of a broker
    without candidates)."""
    ordered = {name: np.array(sorted(offsets), dtype=np.int64)
               for name, offsets in candidates.items()}
    out = []
    for split in splits:
        offsets = ordered.get(split.broker)
        if offsets is not None:
            lo = split.base_offset + split.start
            at = int(np.searchsorted(offsets, lo))
            if at == len(offsets) or offsets[at] >= split.base_offset + split.end:
                continue
        out.append(split)
    return out


def as_tuple(spark_filter) -> tuple | None:
    """A pyspark.sql.datasource Filter as ``(op, column, value)`` when the reader applies it
    exactly, else None (Spark keeps it)."""
    kind = type(spark_filter).__name__
    attribute = getattr(spark_filter, "attribute", None)
    if not attribute or len(attribute) != 1 or attribute[0] not in COLUMNS:
        return None
    column = attribute[0]
    if kind == "IsNotNull":
        return ("notnull", column, None)
    value = getattr(spark_filter, "value", None)
    if kind == "EqualTo" and _literal(column, value):
        return ("in", column, (value,))
    if kind == "In" and value and all(_literal(column, v) for v in value):
        return ("in", column, tuple(value))
    if kind in _COMPARE and COLUMNS[column] is int and _literal(column, value):
        return (_COMPARE[kind], column, value)
    return None


class RowFilter:
    """The pushed filters (ANDed), applied to scanner batches and Arrow rows."""

    def __init__(self, filters: Iterable[tuple]):
        self.filters = tuple(filters)

    def __bool__(self) -> bool:
        return bool(self.filters)

    def indexed_values(self) -> dict[str, tuple[str, ...]]:
        """column -> the values an equality / IN filter on an indexed column asks for."""
        return {column: value for op, column, value in self.filters
                if op == "in" and column in INDEXED}

    def keep_records(self, batch, offsets: frozenset[int] | None = None) -> np.ndarray | None:
        """Which records of a scanner batch may give a matching row (None: all). Filters on
        the record's own fields (topic, queue, store time) decide here; an inner batch's
        messages share them. ``offsets``: the only CommitLog offsets a key lookup allows."""
        keep = None

        def both(mask):
            return mask if keep is None else keep & mask

        for op, column, value in self.filters:
            if column == "topic":
                if op != "in":
                    continue
                names = batch.topics.names
                wanted = np.fromiter((name in value for name in names), dtype=bool,
                                     count=len(names))
                keep = both(wanted[batch.topic_id] if len(names) else
                            np.zeros(len(batch), dtype=bool))
            elif column in ("queue_id", "store_timestamp"):
                field = batch.queue_id if column == "queue_id" else batch.store_timestamp
                if op == "in":
                    keep = both(np.isin(field, np.array(value, dtype=np.int64)))
                elif op == "gt":
                    keep = both(field > value)
                elif op == "ge":
                    keep = both(field >= value)
                elif op == "lt":
                    keep = both(field < value)
                elif op == "le":
                    keep = both(field <= value)
        if offsets is not None:
            keep = both(np.isin(batch.position + batch.base,
                                np.fromiter(offsets, dtype=np.int64, count=len(offsets))))
        return keep

    def exact(self, rows):
        """The Arrow rows (a pyarrow.RecordBatch) that match every filter."""
        import pyarrow as pa
        import pyarrow.compute as pc

        mask = None
        for op, column, value in self.filters:
            data = rows.column(column)
            if op == "notnull":
                test = pc.is_valid(data)
            elif op == "in":
                test = pc.is_in(data, value_set=pa.array(list(value), data.type))
            else:
                test = getattr(pc, {"gt": "greater", "ge": "greater_equal", "lt": "less",
                                    "le": "less_equal"}[op])(data, value)
            test = pc.fill_null(test, False)
            mask = test if mask is None else pc.and_(mask, test)
        return rows if mask is None else rows.filter(mask)


def select(batch, keep: np.ndarray):
    """The records of a scanner batch where ``keep`` is true, as a batch of the same kind
    (valid as long as ``batch`` is)."""
    from ..scan import _COLUMNS

    rows = np.flatnonzero(keep)
    part = type(batch).__new__(type(batch))
    part.buf, part.base, part.topics = batch.buf, batch.base, batch.topics
    records = batch._records
    part._records = None if records is None else [records[i] for i in rows.tolist()]
    for name in _COLUMNS:
        setattr(part, name, getattr(batch, name)[rows])
    return part         # without what the native pass parsed (its rows are the whole batch's)


def index_candidates(root: str, wanted: dict[str, tuple[str, ...]]) -> frozenset[int] | None:
    """CommitLog offsets of the records (inner batches: their outer record) that may carry
    the keys and UNIQ_KEYs of ``wanted``, found as ``mqtool query`` finds them (IndexFiles,
    then a scan of what no IndexFile covers, and the inner batches); None when the store
    cannot answer (not a store root, or a value ``query`` refuses). Several filters: the
    smallest answer (the rows must match them all)."""
    from ..errors import MqtoolError
    from ..query import query_key, query_uniq_key
    from ..store import Store

    try:
        store = Store(root)
        if not store.index_files:
            return None      # query would scan the whole CommitLog on the driver
    except (MqtoolError, OSError):
        return None
    best: frozenset[int] | None = None
    for column, values in wanted.items():
        found: set[int] = set()
        for value in values:
            try:
                if column == "uniq_key":
                    result = query_uniq_key(store, value)
                else:
                    result = query_key(store, value.split(" ")[0] if value else value)
            except MqtoolError:
                return None
            found |= {f.record.offset for f in result.found}
        if best is None or len(found) < len(best):
            best = frozenset(found)
    return best
