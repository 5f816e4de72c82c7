"""The one writer of store files: CommitLog records, ConsumeQueue units, IndexFiles, checkpoint.

It reproduces the broker's own write path (``CommitLog.doAppend`` with its end-of-file blank,
``ConsumeQueue.putMessagePositionInfo`` with pre-blank units, ``IndexService.buildIndex`` /
``IndexFile.putKey`` with roll-over) so that the fixture forge writes stores laid out exactly as a
broker lays them out, and repair commands regenerate files byte-identical to the broker's.
Records are built by the construct declarations of :mod:`mqtool.formats`.
"""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .codec import (BATCH_CQ_UNIT, BLANK_RECORD, CQ_DTYPE, CQ_UNIT, INDEX_ENTRY,
                    INDEX_ENTRY_DTYPE, INDEX_HEADER, INDEX_SLOT, INDEX_SLOT_DTYPE, MESSAGE_HEADER,
                    MESSAGE_MIDDLE, PROPERTIES_LENGTH, TIMERLOG_BLANK, TIMERLOG_UNIT, TIMERWHEEL_SLOT, TOPIC_LENGTH,
                    index_key_hashes)

from . import codec as _codec
from .formats import codecs
from .formats import commitlog as cl_fmt
from .formats import consumequeue as cq_fmt
from .formats import checkpoint as ckpt_fmt
from .formats import indexfile as idx_fmt
from .formats import innerbatch as innerbatch_fmt
from .formats import timer as timer_fmt
from .property_order import PRODUCER_UNIQ_KEY_FIRST, PropertyInsertion, broker_property_order


@dataclass
class Message:
    """A message as the broker is about to store it (after producer and broker set it up)."""

    topic: str
    queue_id: int
    body: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[bytes, int] = (b"\x7f\x00\x00\x01", 0)
    store_timestamp: int = 0
    store_host: tuple[bytes, int] = (b"\x7f\x00\x00\x01", 10911)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_crc: int | None = None        # None: computed from the body
    queue_offset: int | None = None    # None: assigned by the writer like the broker
    raw_properties: bytes | None = None  # exact bytes, bypassing the HashMap ordering
    # a classic batch's own properties (MessageExtBatch: WAIT, CLUSTER), which the broker's batch
    # encoder appends to each message's properties as a second serialised map
    batch_properties: dict[str, str] | None = None


def client_inner_message(body: bytes, properties: dict[str, str], flag: int = 0,
                         broker_version: int = 5,
                         insertion: PropertyInsertion = PRODUCER_UNIQ_KEY_FIRST
                         ) -> innerbatch_fmt.InnerMessage:
    """One message of an inner batch as a client encodes it (its own HashMap order)."""
    ordered = broker_property_order(properties, insertion)
    return innerbatch_fmt.InnerMessage(
        body=body, flag=flag, properties=dict(ordered),
        properties_raw=codecs.encode_properties(ordered, trailing_separator=broker_version >= 5))


def inner_batch_message(topic: str, queue_id: int, inner: list[innerbatch_fmt.InnerMessage],
                        properties: dict[str, str] | None = None, **fields) -> Message:
    """The one CommitLog record a BatchCQ topic stores for an inner batch: sysFlag
    INNER_BATCH | NEED_UNWRAP, the client's batch encoding as body, INNER_NUM the message count
    (the writer sets INNER_BASE to the queue offset it assigns). ``properties`` are the
    record's own (UNIQ_KEY, WAIT, the broker's CLUSTER); ``fields`` go to :class:`Message`."""
    sys_flag = fields.pop("sys_flag", 0) | cl_fmt.INNER_BATCH_FLAG | cl_fmt.NEED_UNWRAP_FLAG
    return Message(topic=topic, queue_id=queue_id, body=innerbatch_fmt.build_inner_batch(inner),
                   properties={**(properties or {}), "INNER_NUM": str(len(inner))},
                   sys_flag=sys_flag, **fields)


def _host_flags(msg: Message) -> int:
    flags = msg.sys_flag & ~(cl_fmt.BORNHOST_V6_FLAG | cl_fmt.STOREHOSTADDRESS_V6_FLAG)
    if len(msg.born_host[0]) == 16:
        flags |= cl_fmt.BORNHOST_V6_FLAG
    if len(msg.store_host[0]) == 16:
        flags |= cl_fmt.STOREHOSTADDRESS_V6_FLAG
    return flags


def message_magic(topic: str, broker_version: int = 4) -> int:
    """V2 only from 5.1 on, and only for topics longer than 127 bytes (autoMessageVersionOnTopicLen)."""
    if broker_version >= 5 and len(topic.encode("utf-8")) > 127:
        return cl_fmt.MESSAGE_MAGIC_CODE_V2
    return cl_fmt.MESSAGE_MAGIC_CODE


def encode_properties(msg: Message, prop_crc: bool, broker_version: int = 4,
                      insertion: PropertyInsertion = PRODUCER_UNIQ_KEY_FIRST) -> bytes:
    """The stored property bytes: the broker's HashMap order, a trailing 0x02 from 5.x on, and
    with ``prop_crc`` 20 reserved bytes for the ``__CRC32#`` field. A classic batch's message
    carries its own map (as its client serialised it) followed by the batch's."""
    if msg.raw_properties is not None:
        raw = msg.raw_properties
    elif msg.batch_properties is not None:
        raw = codecs.encode_properties(broker_property_order(msg.properties, insertion),
                                       trailing_separator=broker_version >= 5)
        batch = codecs.encode_properties(broker_property_order(msg.batch_properties, insertion),
                                         trailing_separator=broker_version >= 5)
        if raw and batch and not raw.endswith(b"\x02"):
            raw += b"\x02"
        raw += batch
    else:
        raw = codecs.encode_properties(broker_property_order(msg.properties, insertion),
                                       trailing_separator=broker_version >= 5)
    if prop_crc:
        if raw and not raw.endswith(b"\x02"):
            raw += b"\x02"
        raw += b"\0" * codecs.CRC32_RESERVED_LEN
    return raw


def encode_message(msg: Message, physical_offset: int, queue_offset: int, *, magic: int,
                   properties: bytes, prop_crc: bool = False) -> bytes:
    """The record bytes, packed with the struct codecs derived from ``commitlog_message`` (tests
    prove them equal to the declaration's build); with ``prop_crc`` the reserved last 20 bytes of
    the properties receive the ``__CRC32#`` field computed over the rest of the record."""
    topic = msg.topic.encode("utf-8")
    body = msg.body or b""
    sys_flag = _host_flags(msg)
    size = cl_fmt.message_length(magic, sys_flag, len(body), len(topic), len(properties))
    record = b"".join((
        MESSAGE_HEADER.pack(size, magic,
                            codecs.body_crc(body) if msg.body_crc is None else msg.body_crc,
                            msg.queue_id, msg.flag, queue_offset, physical_offset, sys_flag,
                            msg.born_timestamp),
        MESSAGE_MIDDLE[sys_flag & (cl_fmt.BORNHOST_V6_FLAG | cl_fmt.STOREHOSTADDRESS_V6_FLAG)].pack(
            msg.born_host[0], msg.born_host[1], msg.store_timestamp, msg.store_host[0],
            msg.store_host[1], msg.reconsume_times, msg.prepared_transaction_offset, len(body)),
        body, TOPIC_LENGTH[magic].pack(len(topic)), topic,
        PROPERTIES_LENGTH.pack(len(properties)), properties))
    if prop_crc:
        crc = codecs.record_prop_crc(record)
        record = record[:-codecs.CRC32_RESERVED_LEN] + codecs.prop_crc_field(crc)
    return record


# --- files -------------------------------------------------------------------------------------

def offset_file_name(offset: int) -> str:
    """UtilAll.offset2FileName: 20-digit zero-padded decimal."""
    return f"{offset:020d}"


def index_file_name(millis: int) -> str:
    """yyyyMMddHHmmssSSS of a time (UTC here; the broker uses its local zone)."""
    t = _dt.datetime.fromtimestamp(millis / 1000, _dt.timezone.utc)
    return t.strftime("%Y%m%d%H%M%S") + f"{millis % 1000:03d}"


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a rename is durable only once its directory is)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = fsync_path


def atomic_write(path: Path, data: bytes) -> None:
    """Write through a temp file + fsync + rename, then fsync the directory."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.mqtool-tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class _SequentialFile:
    """A file handle that skips ``seek`` to where it already is: a BufferedRandom flushes its
    buffer on every seek, which would cost one write system call per record."""

    __slots__ = ("_fh", "_pos")

    def __init__(self, fh):
        self._fh = fh
        self._pos = fh.tell()

    def seek(self, pos: int) -> None:
        if pos != self._pos:
            self._fh.seek(pos)
            self._pos = pos

    def write(self, data: bytes) -> None:
        self._fh.write(data)
        self._pos += len(data)

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _open_existing_or_zero(path: Path, size: int) -> _SequentialFile:
    """Open a store file for update, creating it zero-filled (sparse) at its full size."""
    if path.exists():
        return _SequentialFile(open(path, "r+b"))
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "w+b")
    fh.truncate(size)
    return _SequentialFile(fh)


class CommitLogWriter:
    """Appends records like CommitLog.doAppend: a record goes into the current file only if
    ``length + 8 <= remaining``; otherwise an 8-byte blank record closes the file."""

    def __init__(self, directory: Path, file_size: int, start_offset: int = 0):
        self.directory = Path(directory)
        self.file_size = file_size
        self.offset = start_offset
        self._fh = None
        self._file_base = None

    def _open_for(self, offset: int):
        base = offset - offset % self.file_size
        if self._file_base != base:
            if self._fh:
                self._fh.close()
            self._fh = _open_existing_or_zero(self.directory / offset_file_name(base),
                                              self.file_size)
            self._file_base = base
        return self._fh

    def reserve(self, length: int) -> int:
        """The offset a record of ``length`` bytes will get, writing a blank record first when
        it does not fit in the current file."""
        if length + cl_fmt.END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise ValueError(f"a {length}-byte record cannot fit in a {self.file_size}-byte file")
        remaining = self.file_size - self.offset % self.file_size
        if length + cl_fmt.END_FILE_MIN_BLANK_LENGTH > remaining:
            fh = self._open_for(self.offset)
            fh.seek(self.offset - self._file_base)
            fh.write(BLANK_RECORD.pack(remaining, cl_fmt.BLANK_MAGIC_CODE))
            self.offset += remaining
        return self.offset

    def write(self, offset: int, record: bytes) -> None:
        fh = self._open_for(offset)
        fh.seek(offset - self._file_base)
        fh.write(record)
        self.offset = offset + len(record)

    def ensure_current_file(self) -> None:
        """Create the (empty) file the next record would go to, as the broker's preallocation does."""
        self._open_for(self.offset)

    def close(self) -> None:
        if self._fh:
            self._fh.flush()
            self._fh.close()
            self._fh = None
            self._file_base = None


def _close_queue_files(queues: dict) -> None:
    for state in queues.values():
        if state["fh"]:
            state["fh"].close()
            state["fh"] = None
            state["base"] = None


class _QueueWriter:
    """Units appended to the files of every queue of one kind: one open file per queue, the
    broker's names (byte offset of the file's first unit) and file size."""

    unit_size: int
    _initial: dict   # a new queue's state besides its open file

    def __init__(self, root: Path, units_per_file: int):
        self.root = Path(root)
        self.file_size = units_per_file * self.unit_size
        self._queues: dict[tuple[str, int], dict] = {}

    def state(self, topic: str, queue_id: int) -> dict:
        """The queue's write state: ``write_pos`` (bytes) and what deduplicates its puts."""
        key = (topic, queue_id)
        if key not in self._queues:
            self._queues[key] = {"fh": None, "base": None, **self._initial}
        return self._queues[key]

    def queue_keys(self) -> list[tuple[str, int]]:
        """(topic, queue id) of every queue put into (or whose state was asked for)."""
        return list(self._queues)

    def _file(self, state: dict, topic: str, queue_id: int, logical: int):
        base = logical - logical % self.file_size
        if state["base"] != base:
            if state["fh"]:
                state["fh"].close()
            path = self.root / topic / str(queue_id) / offset_file_name(base)
            state["fh"] = _open_existing_or_zero(path, self.file_size)
            state["base"] = base
        return state["fh"]

    def close(self) -> None:
        _close_queue_files(self._queues)


class ConsumeQueueWriter(_QueueWriter):
    """ConsumeQueue.putMessagePositionInfo for every queue of a store."""

    unit_size = cq_fmt.CQ_STORE_UNIT_SIZE
    _initial = {"write_pos": None, "max_physic": -1}

    def put(self, topic: str, queue_id: int, commitlog_offset: int, size: int, tags_code: int,
            queue_offset: int) -> bool:
        """Append one unit; False when the broker would skip it (already dispatched)."""
        state = self.state(topic, queue_id)
        if commitlog_offset + size <= state["max_physic"]:
            return False
        expect = queue_offset * self.unit_size
        if state["write_pos"] is None:
            # isFirstCreateInQueue: pre-blank units from the file start up to the first unit
            base = expect - expect % self.file_size
            fh = self._file(state, topic, queue_id, expect)
            blanks = (expect - base) // self.unit_size
            if blanks:
                unit = CQ_UNIT.pack(0, cq_fmt.PRE_BLANK_SIZE, 0)
                fh.seek(0)
                fh.write(unit * blanks)
            state["write_pos"] = expect
        if expect < state["write_pos"]:
            return False
        # expect > write_pos is only logged by the broker: the unit goes at the write position
        logical = state["write_pos"]
        fh = self._file(state, topic, queue_id, logical)
        fh.seek(logical - state["base"])
        fh.write(CQ_UNIT.pack(commitlog_offset, size, tags_code))
        state["write_pos"] = logical + self.unit_size
        state["max_physic"] = commitlog_offset + size
        return True

    def put_run(self, topic: str, queue_id: int, commitlog_offsets, sizes, tags_codes,
                queue_offsets) -> int:
        """:meth:`put` for consecutive dispatched records of one queue, in order; returns how
        many units were written. Where the state lets each record append exactly at the write
        position (the usual case), runs of units go to the file in one write."""
        offsets = np.asarray(commitlog_offsets, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        codes = np.asarray(tags_codes, dtype=np.int64)
        expects = np.asarray(queue_offsets, dtype=np.int64) * self.unit_size
        ends = offsets + sizes
        state = self.state(topic, queue_id)
        n, i, written = len(offsets), 0, 0
        # record j appends at the write position when its queue offset follows the one before
        # and it ends past it (dispatch order: CommitLog offsets grow)
        follows = np.ones(n, dtype=bool)
        follows[1:] = (expects[1:] == expects[:-1] + self.unit_size) & (ends[1:] > ends[:-1])
        breaks = np.flatnonzero(~follows).tolist() + [n]
        at_break = 0
        while i < n:
            pos = state["write_pos"]
            if pos is None or expects[i] != pos or ends[i] <= state["max_physic"]:
                written += self.put(topic, queue_id, int(offsets[i]), int(sizes[i]),
                                    int(codes[i]), int(expects[i]) // self.unit_size)
                i += 1
                continue
            # each unit of the run ends past the one before, so none is already covered
            while breaks[at_break] <= i:
                at_break += 1
            room = (self.file_size - pos % self.file_size) // self.unit_size
            stop = min(breaks[at_break], i + room)
            units = np.zeros(stop - i, dtype=CQ_DTYPE)
            units["commitlog_offset"] = offsets[i:stop]
            units["size"] = sizes[i:stop]
            units["tags_code"] = codes[i:stop]
            fh = self._file(state, topic, queue_id, pos)
            fh.seek(pos - state["base"])
            fh.write(units.tobytes())
            state["write_pos"] = pos + (stop - i) * self.unit_size
            state["max_physic"] = int(ends[stop - 1])
            written += stop - i
            i = stop
        return written


class BatchConsumeQueueWriter(_QueueWriter):
    """5.x BatchConsumeQueue: 46-byte units appended in dispatch order (the queue is searched by
    msgBaseOffset, not addressed by position); a record already dispatched (its start at or
    before the last unit's) is skipped."""

    unit_size = cq_fmt.BATCH_CQ_STORE_UNIT_SIZE
    _initial = {"write_pos": 0, "max_start": -1}

    def __init__(self, root: Path, units_per_file: int = cq_fmt.DEFAULT_CQ_UNITS_PER_FILE):
        super().__init__(root, units_per_file)

    def put(self, topic: str, queue_id: int, commitlog_offset: int, size: int, tags_code: int,
            store_timestamp: int, msg_base_offset: int, batch_size: int) -> bool:
        if msg_base_offset < 0 or batch_size < 0:
            return False
        state = self.state(topic, queue_id)
        if commitlog_offset <= state["max_start"]:
            return False
        logical = state["write_pos"]
        fh = self._file(state, topic, queue_id, logical)
        fh.seek(logical - state["base"])
        fh.write(BATCH_CQ_UNIT.pack(commitlog_offset, size, tags_code, store_timestamp,
                                    msg_base_offset, batch_size, cq_fmt.INVALID_POS, 0))
        state["write_pos"] = logical + self.unit_size
        state["max_start"] = commitlog_offset
        return True


class IndexWriter:
    """IndexService.buildIndex and IndexFile.putKey, with roll-over to a new file when full.

    ``enabled=False`` makes it a no-op (stores made without index/, e.g. for benchmarks).

    With ``batch`` > 0, build_index holds the keys of up to that many records back and puts them
    together (:meth:`put_many`: hashes, slot chains and entries computed with numpy), which
    writes the same bytes as putting each key at once; flush() puts what is held. Keys put
    directly (put_hashed, put_many) do not wait for held ones: use one way or the other."""

    def __init__(self, directory: Path, slot_count: int, entry_count: int, enabled: bool = True,
                 batch: int = 0):
        self.directory = Path(directory)
        self.slot_count = slot_count
        self.entry_count = entry_count
        self.enabled = enabled
        self.file_size = idx_fmt.index_file_size(slot_count, entry_count)
        self._entries_start = idx_fmt.entry_position(slot_count, 0)
        self.files: list[str] = []
        self._buf: bytearray | None = None
        self._name: str | None = None
        self.index_msg_timestamp = 0  # set when a file fills (the checkpoint's indexMsgTimestamp)
        self._h: dict | None = None   # header of the current file
        self._prefix_hashes: dict[str, int] = {}
        self.batch = batch
        # held records: their keys in order, and per record the unsigned hash of "topic#", the
        # number of keys, the CommitLog offset and the store time
        self._held_keys: list[str] = []
        self._held_prefixes: list[int] = []
        self._held_counts: list[int] = []
        self._held_offsets: list[int] = []
        self._held_timestamps: list[int] = []

    def _put_header(self) -> None:
        h = self._h
        INDEX_HEADER.pack_into(self._buf, 0, h["begin_timestamp"], h["end_timestamp"],
                               h["begin_phy_offset"], h["end_phy_offset"],
                               h["hash_slot_count_disk"], h["index_count_disk"])

    def _new_file(self, now_ms: int, end_phy: int, end_ts: int) -> None:
        self.flush()
        name = index_file_name(now_ms)
        while self.files and name <= self.files[-1]:
            now_ms += 1
            name = index_file_name(now_ms)
        self._name = name
        self.files.append(name)
        self._buf = bytearray(self.file_size)
        # A new file starts with the previous file's end values (IndexFile's constructor); the
        # counts on disk stay 0 until the first key, as IndexHeader only writes on change.
        self._h = {"begin_timestamp": 0, "end_timestamp": 0, "begin_phy_offset": 0,
                   "end_phy_offset": 0, "hash_slot_count": 0, "index_count": 1,
                   "hash_slot_count_disk": 0, "index_count_disk": 0}
        if end_phy > 0:
            self._h["begin_phy_offset"] = self._h["end_phy_offset"] = end_phy
        if end_ts > 0:
            self._h["begin_timestamp"] = self._h["end_timestamp"] = end_ts

    def _current(self, now_ms: int) -> None:
        if self._buf is None:
            self._new_file(now_ms, 0, 0)
        elif self._h["index_count"] >= self.entry_count:
            self.index_msg_timestamp = self._h["end_timestamp"]
            self._new_file(now_ms, self._h["end_phy_offset"], self._h["end_timestamp"])

    @property
    def has_file(self) -> bool:
        return self._h is not None or bool(self._held_offsets)

    @property
    def end_phy_offset(self) -> int:
        """The CommitLog offset of the last key put (or held)."""
        if self._held_offsets:
            return self._held_offsets[-1]
        return self._h["end_phy_offset"] if self._h else 0

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> None:
        self.put_hashed(codecs.index_key_hash(key), phy_offset, store_timestamp)

    def put_hashed(self, key_hash: int, phy_offset: int, store_timestamp: int) -> None:
        """IndexFile.putKey for a key whose index hash is already known."""
        if not self.enabled:
            return
        self._current(store_timestamp)
        h, buf = self._h, self._buf
        slot_pos = idx_fmt.INDEX_HEADER_SIZE + idx_fmt.HASH_SLOT_SIZE * (key_hash % self.slot_count)
        slot_value = INDEX_SLOT.unpack_from(buf, slot_pos)[0]
        count = h["index_count"]
        if slot_value <= 0 or slot_value > count:
            slot_value = 0
        begin = h["begin_timestamp"]
        if begin <= 0:
            time_diff = 0
        else:
            delta = store_timestamp - begin
            # Java long division truncates toward zero; negatives are then clamped to 0
            time_diff = delta // 1000 if delta >= 0 else -((-delta) // 1000)
            time_diff = 0 if time_diff < 0 else min(time_diff, 0x7FFFFFFF)
        INDEX_ENTRY.pack_into(buf, self._entries_start + idx_fmt.INDEX_ENTRY_SIZE * count,
                              key_hash, phy_offset, time_diff, slot_value)
        INDEX_SLOT.pack_into(buf, slot_pos, count)
        if count <= 1:
            h["begin_phy_offset"] = phy_offset
            h["begin_timestamp"] = store_timestamp
        if slot_value == 0:
            h["hash_slot_count"] += 1
            h["hash_slot_count_disk"] = h["hash_slot_count"]
        h["index_count"] = h["index_count_disk"] = count + 1
        h["end_phy_offset"] = phy_offset
        h["end_timestamp"] = store_timestamp
        # the header reaches the buffer in flush(): nothing reads the buffer before that

    def put_many(self, key_hashes, phy_offsets, store_timestamps) -> None:
        """put_hashed for each key in turn, the keys going into one file at once."""
        if not self.enabled:
            return
        key_hashes = np.asarray(key_hashes, dtype=np.int64)
        phy_offsets = np.asarray(phy_offsets, dtype=np.int64)
        store_timestamps = np.asarray(store_timestamps, dtype=np.int64)
        done = 0
        while done < len(key_hashes):
            self._current(int(store_timestamps[done]))
            room = max(1, self.entry_count - self._h["index_count"])
            stop = min(len(key_hashes), done + room)
            self._put_into_current(key_hashes[done:stop], phy_offsets[done:stop],
                                   store_timestamps[done:stop])
            done = stop

    def _put_into_current(self, hashes: np.ndarray, phys: np.ndarray, stamps: np.ndarray) -> None:
        """putKey for keys that all fit in the current file."""
        h = self._h
        count, n = h["index_count"], len(hashes)
        numbers = np.arange(count, count + n, dtype=np.int64)
        slots = hashes % self.slot_count
        # in slot order (stable, so put order within a slot), each key links to the one before
        # it in its slot; the first of a slot to what the slot held, if that passes putKey's test
        order = np.argsort(slots, kind="stable")
        by_slot = slots[order]
        first = np.ones(n, dtype=bool)
        first[1:] = by_slot[1:] != by_slot[:-1]
        last = np.ones(n, dtype=bool)
        last[:-1] = first[1:]
        table = np.frombuffer(self._buf, INDEX_SLOT_DTYPE, self.slot_count,
                              idx_fmt.INDEX_HEADER_SIZE)
        held = table[by_slot[first]].astype(np.int64)
        prev_by_slot = np.empty(n, dtype=np.int64)
        prev_by_slot[1:] = numbers[order[:-1]]
        prev_by_slot[first] = np.where((held > 0) & (held <= numbers[order[first]]), held, 0)
        prev = np.empty(n, dtype=np.int64)
        prev[order] = prev_by_slot
        table[by_slot[last]] = numbers[order[last]]
        # timeDiff against beginTimestamp, which the first key of a fresh file sets
        begin = np.full(n, h["begin_timestamp"], dtype=np.int64)
        if count <= 1:
            begin[1:] = stamps[0]
        ahead = (begin > 0) & (stamps > begin)
        time_diff = np.zeros(n, dtype=np.int64)
        time_diff[ahead] = np.minimum((stamps[ahead] - begin[ahead]) // 1000, 0x7FFFFFFF)
        entries = np.frombuffer(self._buf, INDEX_ENTRY_DTYPE, n,
                                self._entries_start + idx_fmt.INDEX_ENTRY_SIZE * count)
        entries["key_hash"] = hashes
        entries["phy_offset"] = phys
        entries["time_diff"] = time_diff
        entries["prev_index"] = prev
        del table, entries  # a mapped buffer cannot close while views of it live
        if count <= 1:
            h["begin_phy_offset"] = int(phys[0])
            h["begin_timestamp"] = int(stamps[0])
        new_slots = int(np.count_nonzero(prev == 0))
        if new_slots:
            h["hash_slot_count"] += new_slots
            h["hash_slot_count_disk"] = h["hash_slot_count"]
        h["index_count"] = h["index_count_disk"] = count + n
        h["end_phy_offset"] = int(phys[-1])
        h["end_timestamp"] = int(stamps[-1])

    def key_hash(self, topic: str, key: str) -> int:
        """index_key_hash(topic#key), continuing a cached hash of ``topic#``."""
        prefix = self._prefix_hashes.get(topic)
        if prefix is None:
            prefix = self._prefix_hashes[topic] = codecs.index_key_prefix_hash(topic)
        return codecs.index_key_hash_after(prefix, key)

    def build_index(self, topic: str, commitlog_offset: int, sys_flag: int, store_timestamp: int,
                    properties: dict[str, str]) -> None:
        """IndexService.buildIndex for one dispatched record."""
        if not self.enabled:
            return
        if self.has_file and commitlog_offset < self.end_phy_offset:
            return
        if cl_fmt.transaction_type(sys_flag) == cl_fmt.TRANSACTION_ROLLBACK_TYPE:
            return
        if self.batch:
            self._hold(topic, commitlog_offset, store_timestamp, properties)
            return
        uniq = properties.get("UNIQ_KEY")
        if uniq is not None:
            self.put_hashed(self.key_hash(topic, uniq), commitlog_offset, store_timestamp)
        keys = properties.get("KEYS")
        if keys:
            for key in keys.split(" "):
                if key:
                    self.put_hashed(self.key_hash(topic, key), commitlog_offset, store_timestamp)

    def _hold(self, topic: str, commitlog_offset: int, store_timestamp: int,
              properties: dict[str, str]) -> None:
        uniq = properties.get("UNIQ_KEY")
        keys = properties.get("KEYS")
        items = [] if uniq is None else [uniq]
        if keys:
            items += [key for key in keys.split(" ") if key]
        if not items:
            return
        prefix = self._prefix_hashes.get(topic)
        if prefix is None:
            prefix = self._prefix_hashes[topic] = codecs.index_key_prefix_hash(topic)
        self._held_keys += items
        self._held_prefixes.append(prefix)
        self._held_counts.append(len(items))
        self._held_offsets.append(commitlog_offset)
        self._held_timestamps.append(store_timestamp)
        if len(self._held_offsets) >= self.batch:
            self.put_held()

    def put_held(self) -> None:
        """Put the keys build_index holds back."""
        if not self._held_offsets:
            return
        keys, counts = self._held_keys, np.array(self._held_counts, dtype=np.int64)
        prefixes = np.repeat(np.array(self._held_prefixes, dtype=np.uint32), counts)
        offsets = np.repeat(np.array(self._held_offsets, dtype=np.int64), counts)
        stamps = np.repeat(np.array(self._held_timestamps, dtype=np.int64), counts)
        # emptied first: putting may roll over to a new file, which flushes
        self._held_keys, self._held_prefixes, self._held_counts = [], [], []
        self._held_offsets, self._held_timestamps = [], []
        raw = [key.encode("utf-8") for key in keys]
        lengths = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))
        ends = np.cumsum(lengths)
        self.put_many(index_key_hashes(np.frombuffer(b"".join(raw), dtype=np.uint8),
                                       ends - lengths, ends, prefixes), offsets, stamps)

    def flush(self) -> None:
        self.put_held()
        if self._buf is not None and self._name is not None:
            self._put_header()
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.directory / self._name, "wb") as fh:
                fh.write(self._buf)

    close = flush


def dledger_index_unit_bytes(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    """One DLedger index unit (DLedgerEntryCoder.encodeIndex)."""
    return _codec.DLEDGER_INDEX_UNIT.pack(magic, pos, size, index, term)


def checkpoint_bytes(physic: int, logics: int, index: int, master_flushed: int = 0,
                     confirm_phy: int = 0) -> bytes:
    return ckpt_fmt.checkpoint.build(dict(
        physic_msg_timestamp=physic, logics_msg_timestamp=logics, index_msg_timestamp=index,
        master_flushed_offset=master_flushed, confirm_phy_offset=confirm_phy,
        padding=b"\0" * (ckpt_fmt.CHECKPOINT_SIZE - 40)))


def dispatch_consume_queue(cq: ConsumeQueueWriter, topic: str, queue_id: int,
                           commitlog_offset: int, size: int, sys_flag: int, queue_offset: int,
                           store_timestamp: int, properties: dict[str, str]) -> bool:
    """CommitLogDispatcherBuildConsumeQueue: only NOT and COMMIT records get a unit."""
    if cl_fmt.transaction_type(sys_flag) not in (cl_fmt.TRANSACTION_NOT_TYPE,
                                                  cl_fmt.TRANSACTION_COMMIT_TYPE):
        return False
    return cq.put(topic, queue_id, commitlog_offset, size,
                  codecs.tags_code(topic, properties, store_timestamp), queue_offset)


class StoreWriter:
    """Writes a whole store the way a broker does: append to the CommitLog, assign queue
    offsets (topicQueueTable), dispatch to ConsumeQueues and IndexFiles, write the checkpoint."""

    def __init__(self, root: Path, *, commitlog_file_size: int = 1024 ** 3,
                 cq_units_per_file: int = cq_fmt.DEFAULT_CQ_UNITS_PER_FILE,
                 index_slots: int = idx_fmt.DEFAULT_SLOT_COUNT,
                 index_entries: int = idx_fmt.DEFAULT_ENTRY_COUNT,
                 broker_version: int = 4, prop_crc: bool = False, index: bool = True,
                 batch_topics: frozenset[str] = frozenset(),
                 bcq_units_per_file: int | None = None,
                 property_insertion: PropertyInsertion = PRODUCER_UNIQ_KEY_FIRST):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.broker_version = broker_version
        self.prop_crc = prop_crc
        self.commitlog = CommitLogWriter(self.root / "commitlog", commitlog_file_size)
        self.consume_queues = ConsumeQueueWriter(self.root / "consumequeue", cq_units_per_file)
        # topics with queue.type=BatchCQ dispatch into batchconsumequeue/ instead
        self.batch_topics = frozenset(batch_topics)
        # mapperFileSizeBatchConsumeQueue is its own setting; by default as many units as a CQ file
        self.batch_consume_queues = BatchConsumeQueueWriter(
            self.root / "batchconsumequeue",
            cq_units_per_file if bcq_units_per_file is None else bcq_units_per_file)
        self.property_insertion = property_insertion
        self.index = IndexWriter(self.root / "index", index_slots, index_entries, enabled=index)
        self._tags_codes: dict[str, int] = {}
        self.topic_queue_table: dict[str, int] = {}
        self.last_store_timestamp = 0

    def append(self, msg: Message) -> tuple[int, int, int]:
        """Append one message; returns (commitlog offset, size, queue offset)."""
        tran = cl_fmt.transaction_type(msg.sys_flag)
        key = f"{msg.topic}-{msg.queue_id}"
        if msg.queue_offset is not None:
            queue_offset = msg.queue_offset
        elif tran in (cl_fmt.TRANSACTION_PREPARED_TYPE, cl_fmt.TRANSACTION_ROLLBACK_TYPE):
            queue_offset = 0
        else:
            queue_offset = self.topic_queue_table.get(key, 0)
        inner_num = 1
        if msg.sys_flag & cl_fmt.INNER_BATCH_FLAG:
            # the broker numbers the batch's messages from the queue offset it assigns
            if msg.raw_properties is None:
                msg.properties = {**msg.properties, "INNER_BASE": str(queue_offset)}
                stated = msg.properties
            else:
                stated = codecs.decode_properties(msg.raw_properties)
            inner_num = max(1, codecs.batch_position(stated, queue_offset)[1])
        magic = message_magic(msg.topic, self.broker_version)
        props = encode_properties(msg, self.prop_crc, self.broker_version,
                                  self.property_insertion)
        length = cl_fmt.message_length(magic, _host_flags(msg), len(msg.body or b""),
                                       len(msg.topic.encode("utf-8")), len(props))
        offset = self.commitlog.reserve(length)
        record = encode_message(msg, offset, queue_offset, magic=magic, properties=props,
                                prop_crc=self.prop_crc)
        self.commitlog.write(offset, record)
        if tran not in (cl_fmt.TRANSACTION_PREPARED_TYPE, cl_fmt.TRANSACTION_ROLLBACK_TYPE):
            self.topic_queue_table[key] = queue_offset + inner_num
        self.last_store_timestamp = max(self.last_store_timestamp, msg.store_timestamp)
        return offset, len(record), queue_offset

    def dispatch(self, topic: str, queue_id: int, offset: int, size: int, sys_flag: int,
                 queue_offset: int, store_timestamp: int, properties: dict[str, str]) -> None:
        tran = cl_fmt.transaction_type(sys_flag)
        if tran in (cl_fmt.TRANSACTION_NOT_TYPE, cl_fmt.TRANSACTION_COMMIT_TYPE):
            tags = properties.get("TAGS")
            if topic == codecs.SCHEDULE_TOPIC or not tags:
                code = codecs.tags_code(topic, properties, store_timestamp)
            else:
                code = self._tags_codes.get(tags)
                if code is None:
                    code = self._tags_codes[tags] = codecs.tags_code(topic, properties,
                                                                     store_timestamp)
            if topic in self.batch_topics:
                self.batch_consume_queues.put(topic, queue_id, offset, size, code,
                                              store_timestamp,
                                              *codecs.batch_position(properties, queue_offset))
            else:
                self.consume_queues.put(topic, queue_id, offset, size, code, queue_offset)
        self.index.build_index(topic, offset, sys_flag, store_timestamp, properties)

    def put(self, msg: Message) -> tuple[int, int, int]:
        """Append and dispatch, as a running broker does."""
        offset, size, queue_offset = self.append(msg)
        props = dict(msg.properties)
        if msg.raw_properties is not None:
            props = codecs.decode_properties(msg.raw_properties)
        self.dispatch(msg.topic, msg.queue_id, offset, size, msg.sys_flag, queue_offset,
                      msg.store_timestamp, props)
        return offset, size, queue_offset

    def write_checkpoint(self, physic: int, logics: int, index: int | None = None,
                         master_flushed: int = 0, confirm_phy: int = 0) -> None:
        index = self.index.index_msg_timestamp if index is None else index
        (self.root / "checkpoint").write_bytes(
            checkpoint_bytes(physic, logics, index, master_flushed, confirm_phy))

    def close(self) -> None:
        self.commitlog.close()
        self.consume_queues.close()
        self.batch_consume_queues.close()
        self.index.close()


class TimerWriter:
    """The 5.x timer store as TimerMessageStore writes it: a 52-byte TimerLog unit per timer
    message (a 16-byte blank closes a file a unit no longer fits in) and the TimerWheel slot of
    its delivery second pointing at the newest unit, each unit linking to the slot's previous
    one through prevPos."""

    def __init__(self, root: Path, *, timerlog_file_size: int = timer_fmt.DEFAULT_TIMERLOG_FILE_SIZE,
                 slots_total: int = timer_fmt.DEFAULT_SLOTS_TOTAL,
                 precision_ms: int = timer_fmt.DEFAULT_PRECISION_MS):
        self.root = Path(root)
        self.precision_ms = precision_ms
        self.slot_count = 2 * slots_total
        self.timerlog = CommitLogWriter(self.root / "timerlog", timerlog_file_size)
        self.wheel = bytearray(self.slot_count * timer_fmt.TIMERWHEEL_SLOT_SIZE)

    def enqueue(self, commitlog_offset: int, size: int, deliver_ms: int, write_ms: int,
                real_topic: str, magic: int = timer_fmt.MAGIC_DEFAULT) -> int:
        """Append one unit; returns its TimerLog offset."""
        unit_size = timer_fmt.TIMERLOG_UNIT_SIZE
        log = self.timerlog
        remaining = log.file_size - log.offset % log.file_size
        if unit_size + timer_fmt.TIMERLOG_BLANK_SIZE > remaining:
            log.write(log.offset, TIMERLOG_BLANK.pack(remaining, 0, cl_fmt.BLANK_MAGIC_CODE))
            log.offset += remaining - timer_fmt.TIMERLOG_BLANK_SIZE
        time_slot = deliver_ms // self.precision_ms
        slot_pos = timer_fmt.slot_index(time_slot, self.slot_count) * timer_fmt.TIMERWHEEL_SLOT_SIZE
        stored_time, first_pos, last_pos, num, _ = TIMERWHEEL_SLOT.unpack_from(self.wheel, slot_pos)
        if stored_time != time_slot or num <= 0:
            first_pos, last_pos, num = -1, -1, 0
        position = log.offset
        log.write(position, TIMERLOG_UNIT.pack(
            unit_size, last_pos, magic, write_ms, deliver_ms - write_ms, commitlog_offset, size,
            codecs.java_string_hash(real_topic), 0))
        TIMERWHEEL_SLOT.pack_into(self.wheel, slot_pos, time_slot,
                                  position if first_pos < 0 else first_pos, position, num + 1, 0)
        return position

    def close(self, *, last_read_time_ms: int = 0, last_timer_queue_offset: int = 0) -> None:
        self.timerlog.close()
        (self.root / "timerwheel").write_bytes(bytes(self.wheel))
        (self.root / "config").mkdir(parents=True, exist_ok=True)
        (self.root / "config" / "timercheck").write_bytes(timer_fmt.timer_checkpoint.build(dict(
            last_read_time_ms=last_read_time_ms, last_timer_log_flush_pos=self.timerlog.offset,
            last_timer_queue_offset=last_timer_queue_offset, master_timer_queue_offset=0,
            state_version=0, data_version_timestamp=0, data_version_counter=0,
            padding=b"\0" * (timer_fmt.TIMER_CHECKPOINT_SIZE - 56))))
