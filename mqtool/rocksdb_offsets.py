"""Consumer offsets kept by the 5.x RocksDB offset manager (``config/consumerOffsets/``), loaded
as ``RocksDBConsumerOffsetManager.load`` loads them: every ``topic@group`` key of the default
column family (value: fastjson ``{"offsetTable":{"<queueId>":<offset>}}``, offsets above 2^53
written as strings), then the legacy ``config/consumerOffset.json`` merged over it (whole
``topic@group`` entries replaced) when the JSON's dataVersion counter is higher than the
database's ``kvDataVersion`` counter.

Read through a shadow of the database (:mod:`mqtool.rocksdb`): the store is never written.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from . import config as cfg
from .formats import rocksdb_cq as rfmt
from .rocksdb import read_database

OFFSETS_FOLDER = "consumerOffsets"


@dataclass
class RocksOffsets:
    table: dict[str, dict[int, int]] = field(default_factory=dict)
    kv_counter: int | None = None
    json_counter: int | None = None
    merged_json: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        return f"config/{OFFSETS_FOLDER}/ (RocksDB)" + (
            " + consumerOffset.json merged (its dataVersion counter "
            f"{self.json_counter} > {self.kv_counter or 0})" if self.merged_json else "")


def _numbers(value):
    """fastjson's BrowserCompatible strings of big longs back to numbers (the broker's
    Map<Integer, Long> reads both)."""
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,20}", value):
        return int(value)
    return value


def _counter(document) -> int | None:
    if isinstance(document, dict):
        version = document.get("dataVersion", document)
        if isinstance(version, dict) and isinstance(version.get("counter"), int):
            return version["counter"]
    return None


def load_rocksdb_offsets(root: Path, configs: cfg.StoreConfigs | None = None) -> RocksOffsets:
    """The offset table a fresh RocksDBConsumerOffsetManager loads from the store at ``root``.
    Raises :class:`mqtool.rocksdb.RocksDBError` when RocksDB cannot read the database."""
    root = Path(root)
    configs = configs or cfg.read_store_configs(root)
    folder = root / "config" / OFFSETS_FOLDER
    database = read_database(folder, label=f"{root}/config/{OFFSETS_FOLDER}")
    out = RocksOffsets()
    raw: dict[str, object] = {}
    for key, value in database.families.get(rfmt.CONSUMER_OFFSET_FAMILY, ()):
        name = key.decode("utf-8", errors="replace")
        try:
            document = cfg.parse_fastjson(value.decode("utf-8", errors="replace"))
        except ValueError as err:
            out.problems.append(cfg.Problem(OFFSETS_FOLDER, (name,), f"{OFFSETS_FOLDER}: key "
                                            f"{name!r}: value is not fastjson ({err})"))
            continue
        if not isinstance(document, dict) or not isinstance(document.get("offsetTable"), dict):
            out.problems.append(cfg.Problem(OFFSETS_FOLDER, (name,), f"{OFFSETS_FOLDER}: key "
                                            f"{name!r}: no offsetTable object"))
            continue
        raw[name] = _numbers(document["offsetTable"])
    out.table, found = cfg.offset_table({"offsetTable": raw}, OFFSETS_FOLDER)
    out.problems += found
    for _key, value in database.families.get(rfmt.DATA_VERSION_FAMILY, ()):
        try:
            out.kv_counter = _counter(cfg.parse_fastjson(value.decode("utf-8", "replace")))
        except ValueError:
            out.problems.append(cfg.Problem(OFFSETS_FOLDER, ("kvDataVersion",),
                                            f"{OFFSETS_FOLDER}: kvDataVersion is not fastjson"))
    load = configs.loads.get(cfg.CONSUMER_OFFSET)
    if load is not None and isinstance(load.document, dict):
        out.json_counter = _counter(load.document)
        if out.json_counter is not None and out.json_counter > (out.kv_counter or 0):
            legacy, found = cfg.offset_table(load.document, load.used or cfg.CONSUMER_OFFSET)
            out.problems += found
            out.table.update(legacy)
            out.merged_json = True
    return out
