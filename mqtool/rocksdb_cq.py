"""The RocksDB ConsumeQueue of a 5.2+ store (``storeType=defaultRocksDB``), decoded as the broker's
RocksDB CQ API serves it: per topic/queue the units, the max entry (the LAST unit written; the
queue's maxOffset is its queue offset + 1), the min entry (written lazily), and the CQ checkpoint
(the CommitLog offset the queues are built up to). Units past the max entry (the broker leaves
them after a truncation) are kept but marked stale: the broker never serves them.

Keys or values that do not decode are :class:`Problem` s, never exceptions. The database is read
through :func:`mqtool.rocksdb.read_database` (a shadow copy: the store is never written).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .errors import ParseError
from .formats import rocksdb_cq as rfmt
from .rocksdb import read_database
from .store import Store, parse_at


@dataclass(frozen=True)
class RocksUnit:
    queue_offset: int
    commitlog_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    stale: bool = False

    def to_list(self) -> list[int]:
        """[queueOffset, commitLogOffset, size, tagsCode, storeTime] as recover.json lists them."""
        return [self.queue_offset, self.commitlog_offset, self.size, self.tags_code,
                self.store_timestamp]


@dataclass
class RocksQueue:
    topic: str
    queue_id: int
    units: list[RocksUnit] = field(default_factory=list)
    max_entry: tuple[int, int] | None = None    # (commitLogOffset, queueOffset) of the last unit
    min_entry: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        return f"{self.topic}-{self.queue_id}"

    @property
    def max_offset(self) -> int:
        """The broker's maxOffset: the next queue offset (0 without a max entry)."""
        return self.max_entry[1] + 1 if self.max_entry is not None else 0

    @property
    def min_offset(self) -> int:
        """The broker's minOffset: the min entry, else the first served unit's queue offset."""
        if self.min_entry is not None:
            return self.min_entry[1]
        served = self.served
        return served[0].queue_offset if served else self.max_offset

    @property
    def served(self) -> list[RocksUnit]:
        return [u for u in self.units if not u.stale]

    @property
    def stale(self) -> list[RocksUnit]:
        return [u for u in self.units if u.stale]

    @property
    def max_commitlog_offset(self) -> int:
        """End (offset + size) of the last served unit; -1 without one."""
        served = self.served
        return served[-1].commitlog_offset + served[-1].size if served else -1

    def unit(self, queue_offset: int) -> RocksUnit | None:
        for u in self.units:
            if u.queue_offset == queue_offset:
                return u
        return None


@dataclass(frozen=True)
class Problem:
    """A key or value of the database that does not decode as the broker writes it."""

    family: str
    key: bytes
    message: str

    def __str__(self) -> str:
        return f"column family {self.family!r} key {self.key[:48].hex()}: {self.message}"


@dataclass
class RocksConsumeQueue:
    folder: str                                  # inside the store, e.g. "consumequeue"
    queues: dict[tuple[str, int], RocksQueue] = field(default_factory=dict)
    checkpoint: int | None = None                # CHECKPOINT_TOPIC: CommitLog offset built to
    problems: list[Problem] = field(default_factory=list)
    families: list[str] = field(default_factory=list)

    def queue(self, topic: str, queue_id: int) -> RocksQueue | None:
        return self.queues.get((topic, queue_id))

    def sorted_queues(self) -> list[RocksQueue]:
        return [self.queues[k] for k in sorted(self.queues)]

    @property
    def unit_count(self) -> int:
        return sum(len(q.served) for q in self.queues.values())

    @property
    def stale_count(self) -> int:
        return sum(len(q.stale) for q in self.queues.values())

    @property
    def max_commitlog_offset(self) -> int:
        """The largest unit end over every queue (-1 when there is none)."""
        return max((q.max_commitlog_offset for q in self.queues.values()), default=-1)


def _topic(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _queue(table: RocksConsumeQueue, topic: str, queue_id: int) -> RocksQueue:
    return table.queues.setdefault((topic, queue_id), RocksQueue(topic, queue_id))


def decode_units(table: RocksConsumeQueue, items) -> None:
    for key, value in items:
        try:
            k = parse_at(rfmt.cq_key, key, file=rfmt.CQ_FAMILY)
            if len(key) != rfmt.cq_key_size(k.topic_length):
                raise ParseError(rfmt.CQ_FAMILY, 0, "", f"{len(key)} bytes, expected "
                                 f"{rfmt.cq_key_size(k.topic_length)}")
        except ParseError as err:
            table.problems.append(Problem(rfmt.CQ_FAMILY, key, f"not a unit key ({err.detail})"))
            continue
        if len(value) != rfmt.CQ_VALUE_SIZE:
            table.problems.append(Problem(rfmt.CQ_FAMILY, key, f"unit value of {len(value)} "
                                          f"bytes, expected {rfmt.CQ_VALUE_SIZE}"))
            continue
        v = parse_at(rfmt.cq_value, value, file=rfmt.CQ_FAMILY)
        _queue(table, _topic(k.topic), k.queue_id).units.append(RocksUnit(
            k.queue_offset, v.commitlog_offset, v.size, v.tags_code, v.store_timestamp))


def decode_offsets(table: RocksConsumeQueue, items) -> None:
    for key, value in items:
        try:
            k = parse_at(rfmt.offset_key, key, file=rfmt.OFFSET_FAMILY)
            if len(key) != rfmt.offset_key_size(k.topic_length) or k.kind not in (
                    rfmt.MAX_KIND, rfmt.MIN_KIND):
                raise ParseError(rfmt.OFFSET_FAMILY, 0, "", "not max/min or of the wrong length")
        except ParseError as err:
            table.problems.append(Problem(rfmt.OFFSET_FAMILY, key,
                                          f"not an offset key ({err.detail})"))
            continue
        topic = _topic(k.topic)
        if topic == rfmt.CHECKPOINT_TOPIC:
            if len(value) != rfmt.CHECKPOINT_VALUE_SIZE:
                table.problems.append(Problem(rfmt.OFFSET_FAMILY, key, f"CQ checkpoint value of "
                                              f"{len(value)} bytes, expected 8"))
                continue
            table.checkpoint = parse_at(rfmt.checkpoint_value, value).max_commitlog_offset
            continue
        if len(value) != rfmt.OFFSET_VALUE_SIZE:
            table.problems.append(Problem(rfmt.OFFSET_FAMILY, key, f"{k.kind.decode()} value of "
                                          f"{len(value)} bytes, expected 16"))
            continue
        v = parse_at(rfmt.offset_value, value)
        entry = (v.commitlog_offset, v.queue_offset)
        queue = _queue(table, topic, k.queue_id)
        if k.kind == rfmt.MAX_KIND:
            queue.max_entry = entry
        else:
            queue.min_entry = entry


def _mark_stale(table: RocksConsumeQueue) -> None:
    for queue in table.queues.values():
        limit = queue.max_entry[1] if queue.max_entry is not None else -1
        queue.units.sort(key=lambda u: u.queue_offset)
        queue.units = [RocksUnit(u.queue_offset, u.commitlog_offset, u.size, u.tags_code,
                                 u.store_timestamp, stale=u.queue_offset > limit)
                       for u in queue.units]


def decode_database(families: dict[str, list[tuple[bytes, bytes]]], folder: str
                    ) -> RocksConsumeQueue:
    table = RocksConsumeQueue(folder, families=sorted(families))
    decode_units(table, families.get(rfmt.CQ_FAMILY, ()))
    decode_offsets(table, families.get(rfmt.OFFSET_FAMILY, ()))
    _mark_stale(table)
    return table


def load_rocksdb_cq(store: Store) -> RocksConsumeQueue | None:
    """The store's RocksDB ConsumeQueue decoded (None when it has none); read once per Store."""
    part = store.rocksdb_cq
    if part is None:
        return None
    cached = getattr(store, "_rocksdb_cq_table", None)
    if cached is None:
        database = read_database(store.root / part.folder, label=f"{store.root}/{part.folder}")
        cached = decode_database(database.families, part.folder)
        store._rocksdb_cq_table = cached
    return cached


def load_folder(folder: Path) -> RocksConsumeQueue:
    """A RocksDB ConsumeQueue database given by its folder alone (``dump consumequeue/``)."""
    folder = Path(folder)
    return decode_database(read_database(folder).families, folder.name)
