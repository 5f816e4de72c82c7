"""``spark.read.format("rocketmq")``: CommitLogs as a Spark table, for notebooks and SQL.

Register once per session, then load store roots or CommitLog directories (local, ``file://``,
or any fsspec scheme such as ``s3://`` when fsspec and its driver are installed)::

    import mqtool.spark
    mqtool.spark.register(spark)
    messages = spark.read.format("rocketmq").option("splitSize", "64m") \\
        .load("/archive/broker-a/store")
    messages.groupBy("topic").count().show()

The columns are the ``messages`` table of ``mqtool spark audit`` (:data:`schema.MESSAGE_COLUMNS`)
plus ``body`` (the stored bytes) with ``bodies=true``. Options:

* ``splitSize``: bytes of CommitLog per partition (``128m`` by default; ``64k``, ``1g``, ...);
* ``checkCrc``: ``true`` (default) checks body and property CRCs, ``false`` leaves
  ``body_crc_ok`` unset and reads faster;
* ``bodies``: ``true`` adds the ``body`` column;
* ``unwrap``: ``true`` (default) gives every inner message of a 5.x inner batch (BatchCQ
  topic) its own row, as ``mqtool dump`` does (``inner_position`` and
  ``outer_commitlog_offset`` say where it lies); ``false`` keeps the stored record;
* ``brokerName``: the broker column's value for a single path (default: from the path);
* ``useIndex``: ``true`` (default) answers ``uniq_key`` / ``keys`` equality filters through a
  local store root's IndexFiles, as ``mqtool query`` does (records the broker never indexes,
  such as transaction rollbacks, are then not found); ``false`` scans every record;
* several paths: ``load(["/a/store", "/b/store"])``, one broker each.

A query reads only what its filters need (Spark 4.1+; :func:`mqtool.spark.register` turns on
``spark.sql.python.filterPushdown.enabled``): filters on ``topic``, ``queue_id``,
``store_timestamp``, ``uniq_key`` and ``keys`` (``=``, ``IN``, ranges of the numbers) are
applied by the reader (:mod:`mqtool.spark.pushdown`), records that cannot match are never
decoded, and a key or UNIQ_KEY lookup reads only the splits holding its records. Spark's
Python API has no column pruning: bodies are decoded only with ``bodies=true``.

Each partition is a byte range of one CommitLog file, read by the executor that runs it with
the shared scanner (:mod:`mqtool.spark.splits`). Unlike ``spark audit``, the reader does not
compare neighbouring partitions: records that a file's blank record hides (stale data left by
a truncation) are rows here; the audit drops them.
"""
from __future__ import annotations

import json

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ..errors import MqtoolError
from . import schema
from .plan import DEFAULT_SPLIT_SIZE, Split, is_local, local_path, make_splits, \
    parse_split_size, resolve_inputs
from .pushdown import RowFilter

NAME = "rocketmq"


def _flag(options: dict, name: str, default: bool) -> bool:
    value = options.get(name, options.get(name.lower()))
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise MqtoolError(f"option {name} must be true or false, got {value!r}")
    return text == "true"


def _paths(options: dict) -> list[str]:
    if options.get("paths"):
        # DataFrameReader.load([...]) hands several paths over as a JSON array
        paths = json.loads(options["paths"])
    else:
        paths = []
    if options.get("path"):
        paths.insert(0, options["path"])
    if not paths:
        raise MqtoolError("give a store root or CommitLog directory: "
                          "spark.read.format('rocketmq').load(PATH)")
    return paths


def columns(bodies: bool):
    return schema.MESSAGE_COLUMNS + ((("body", "binary"),) if bodies else ())


class SplitPartition(InputPartition):
    """One byte range of one CommitLog file."""

    def __init__(self, split: Split):
        super().__init__(split.key)
        self.split = split


class RocketMQDataSource(DataSource):
    """CommitLog messages of RocketMQ stores (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        bodies = _flag(self.options, "bodies", False)
        return ", ".join(f"{name} {kind}" for name, kind in columns(bodies))

    def reader(self, schema):
        return RocketMQReader(dict(self.options))


class RocketMQReader(DataSourceReader):
    def __init__(self, options: dict):
        self.paths = _paths(options)
        size = options.get("splitSize", options.get("splitsize"))
        self.split_size = DEFAULT_SPLIT_SIZE if size is None else parse_split_size(size)
        self.check_crc = _flag(options, "checkCrc", True)
        self.bodies = _flag(options, "bodies", False)
        self.unwrap = _flag(options, "unwrap", True)
        self.use_index = _flag(options, "useIndex", True)
        name = options.get("brokerName", options.get("brokername"))
        if name is not None and len(self.paths) != 1:
            raise MqtoolError("option brokerName names the broker of a single path")
        self.names = [name] if name is not None else None
        self.filters: list[tuple] = []     # pushed: mqtool.spark.pushdown's tuples
        #: broker -> the CommitLog offsets a key lookup allows (set by partitions())
        self.candidates: dict[str, frozenset[int]] = {}

    def pushFilters(self, filters):
        from .pushdown import as_tuple

        for spark_filter in filters:
            taken = as_tuple(spark_filter)
            if taken is None:
                yield spark_filter
            else:
                self.filters.append(taken)

    def partitions(self):
        lister = None
        if not all(is_local(p) for p in self.paths):
            from .splits import fsspec_lister

            lister = fsspec_lister()
        brokers = resolve_inputs(self.paths, self.names, lister)
        splits = make_splits(brokers, self.split_size)
        wanted = RowFilter(self.filters).indexed_values() if self.use_index else {}
        if wanted:
            from .pushdown import holding, index_candidates

            for broker in brokers:
                if broker.local and not broker.bare:
                    found = index_candidates(local_path(broker.root), wanted)
                    if found is not None:
                        self.candidates[broker.name] = found
            splits = holding(splits, self.candidates)
        return [SplitPartition(s) for s in splits]

    def read(self, partition: SplitPartition):
        from .arrow import split_batches

        if not isinstance(partition, SplitPartition):
            return   # no CommitLog data at all: Spark still asks for one partition

        split = partition.split
        row_filter = RowFilter(self.filters) if self.filters else None
        offsets = self.candidates.get(split.broker)
        if offsets is not None:
            offsets = frozenset(o for o in offsets
                                if split.start <= o - split.base_offset < split.end)
        yield from split_batches(split, check_crc=self.check_crc, bodies=self.bodies,
                                 unwrap=self.unwrap, row_filter=row_filter, offsets=offsets)
