"""Runs of records as numpy columns (:class:`RecordBatch`): the fast path, tested against
:func:`~mqtool.scan.records.scan_buffer`, which decodes every record it refuses."""
from __future__ import annotations

import bisect
from itertools import repeat
from typing import Iterator

import numpy as np

from .. import codec as _codec
from ..crc import crc32_ranges
from ..codec import HOST_FLAGS
from ..formats import codecs
from ..formats import commitlog as fmt
from ..formats import dledger as dl_fmt
from ..store import COMMITLOG_LAYOUT, DLEDGER_LAYOUT
from . import native as _native
from .records import (HEADER, MIDDLE, MIN_MESSAGE_SIZE, MessageRecord, ScanEvent, _DL_HEADER,
                      _DL_HEADER_SIZE, _I32, _PROP_CRC_PREFIX, _V1, _V2, _prop_crc_state, _step,
                      find_sync_point)


# --- runs of records as columns: the fast path ----------------------------------------------------
#
# A run of well-formed records is found by a tight loop that only follows TOTALSIZE; the fixed
# fields of the whole run are then decoded with numpy gathers, the length checks of
# decode_message are made on the columns, and the run is cut at the first record that fails one.
# That record goes through _step (the reference path above), which reports it exactly as
# scan_buffer does; the fast path resumes after it.

_BATCH_RECORDS = 16384
_BATCH_BYTES = 32 << 20
# The native core's runs are longer: what follows a batch (the checks' joins, one numpy call per
# queue and column) costs a Python step per batch and queue, and its walk costs nothing per
# batch; a run of 64 Ki records still holds its columns in ~10 MB.
_NATIVE_BATCH_RECORDS = 65536
_NATIVE_BATCH_BYTES = 32 << 20
_TOPIC_VECTOR_MAX = 255      # longer topics (V2 records) are interned one record at a time
FLAG_NONE, FLAG_FALSE, FLAG_TRUE = -1, 0, 1
_FLAG_CODES = {None: FLAG_NONE, False: FLAG_FALSE, True: FLAG_TRUE}
_FLAG_VALUES = {FLAG_NONE: None, FLAG_FALSE: False, FLAG_TRUE: True}
_HEADER_DTYPE = _codec.MESSAGE_HEADER_DTYPE
_MIDDLE_DTYPES = _codec.MESSAGE_MIDDLE_DTYPES
# the host flags as a small number 0..3, to index tables by
_HOST_SHIFT = (HOST_FLAGS & -HOST_FLAGS).bit_length() - 1
_MIDDLE_SIZES = np.array([MIDDLE[f << _HOST_SHIFT].size for f in range(4)], dtype=np.int64)
# calMsgLength without the three variable lengths, by (magic is V2, host flags >> 4)
_FIXED_LENGTHS = np.array([[fmt.message_length(magic, f << _HOST_SHIFT, 0, 0, 0) for f in range(4)]
                           for magic in (_V1, _V2)], dtype=np.int64)
_TOPIC_LENGTH_SIZES = {m: _codec.TOPIC_LENGTH_DTYPES[m].itemsize for m in (_V1, _V2)}
_PROPS_LENGTH_SIZE = _codec.PROPERTIES_LENGTH_DTYPE.itemsize
_PROP_CRC_PREFIX_CODES = np.frombuffer(_PROP_CRC_PREFIX, dtype=np.uint8)

_COLUMNS = ("position", "total_size", "magic_code", "body_crc", "queue_id", "flag",
            "queue_offset", "physical_offset", "sys_flag", "born_timestamp", "store_timestamp",
            "reconsume_times", "prepared_transaction_offset", "body_length", "body_position",
            "topic_id", "properties_position", "properties_length", "body_crc_ok", "prop_crc_ok")


class TopicTable:
    """The topics of one scan, interned: batches carry ids into ``names``."""

    def __init__(self):
        self.names: list[str] = []
        self._by_name: dict[str, int] = {}
        self._by_bytes: dict[bytes, int] = {}
        self._by_length: dict[int, list[tuple[bytes, int]]] = {}

    def find(self, name: str) -> int | None:
        return self._by_name.get(name)

    def intern(self, name: str) -> int:
        tid = self._by_name.get(name)
        if tid is None:
            tid = self._by_name[name] = len(self.names)
            self.names.append(name)
        return tid

    def intern_bytes(self, raw: bytes) -> int:
        tid = self._by_bytes.get(raw)
        if tid is None:
            tid = self.intern(raw.decode("utf-8", errors="replace"))
            if len(self._by_bytes) < 65536:
                self._by_bytes[raw] = tid
                self._by_length.setdefault(len(raw), []).append((raw, tid))
        return tid

    def ids(self, buf, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Ids of the topics stored at ``buf[starts[i]:starts[i] + lengths[i]]``."""
        out = np.empty(len(starts), dtype=np.int32)
        order = np.argsort(lengths, kind="stable")
        sorted_lengths = lengths[order]
        bounds = np.flatnonzero(np.diff(sorted_lengths)) + 1
        for sel in np.split(order, bounds):
            length = int(lengths[sel[0]])
            if length == 0:
                out[sel] = self.intern_bytes(b"")
            elif length > _TOPIC_VECTOR_MAX:
                for i in sel.tolist():
                    p = int(starts[i])
                    out[i] = self.intern_bytes(bytes(buf[p:p + length]))
            else:
                self._ids_of_rows(_codec.gather(buf, f"V{length}", starts[sel]), sel, out)
        return out

    def _ids_of_rows(self, rows: np.ndarray, sel: np.ndarray, out: np.ndarray) -> None:
        """Topics already seen are matched by comparing all rows with each, when few topics
        share the length; the rest are interned from their distinct values."""
        todo = np.ones(len(rows), dtype=bool)
        known = self._by_length.get(rows.dtype.itemsize, [])
        for raw, tid in known if len(known) <= 16 else ():
            same = rows == np.frombuffer(raw, rows.dtype)[0]
            out[sel[same]] = tid
            todo &= ~same
            if not todo.any():
                return
        rest = np.flatnonzero(todo)
        distinct, inverse = np.unique(rows[rest], return_inverse=True)
        ids = np.array([self.intern_bytes(bytes(row)) for row in distinct], dtype=np.int32)
        out[sel[rest]] = ids[inverse.reshape(-1)]


class RecordBatch:
    """Consecutive message records of one file, exactly those ``scan_buffer`` yields one by one
    there, as numpy columns named after :class:`MessageRecord`'s fields (all int64, except the
    flags: int8 FLAG_TRUE/FLAG_FALSE/FLAG_NONE, and ``topic_id``, an index into ``topics``).
    Positions are file positions (``position``, ``body_position``, ``properties_position``);
    add ``base`` for CommitLog offsets. ``properties_length`` is the length of
    ``properties_raw`` (a negative stored length means none).

    :meth:`record` builds one row's MessageRecord; it reads host addresses and properties from
    the file's mapping, so it works while the scan is at this batch, not after."""

    __slots__ = ("buf", "base", "topics", "_records", "_parsed") + _COLUMNS

    def __len__(self) -> int:
        return len(self.position)

    @property
    def parsed(self) -> tuple | None:
        """What the native pass parsed of the properties when the scan asked for ``properties``
        (:func:`scan_buffer_batches`): ({name: (value starts, value ends)} as positions in
        ``buf``, -1 where absent; the String.hashCode (uint32) of the ``hashed`` one's value and
        whether each is exact; with ``index_keys``, the keys buildIndex puts as (record, starts,
        ends, hashCode of ``topic#key``, exact), else None), else None."""
        try:
            return self._parsed
        except AttributeError:
            return None

    @property
    def offsets(self) -> np.ndarray:
        return self.position + self.base

    @property
    def start_offset(self) -> int:
        return self.base + int(self.position[0])

    def properties_raw(self, i: int) -> bytes:
        length = int(self.properties_length[i])
        if length <= 0:
            return b""
        if self._records is not None:
            return self._records[i].properties_raw
        start = int(self.properties_position[i])
        return bytes(self.buf[start:start + length])

    def properties_source(self) -> tuple:
        """(buffer, starts, ends): where the records' properties bytes are, to read them all."""
        if self._records is None:
            return (self.buf, self.properties_position,
                    self.properties_position + self.properties_length)
        ends = np.cumsum(self.properties_length)
        return (b"".join(r.properties_raw for r in self._records), ends - self.properties_length,
                ends)

    def record(self, i: int) -> MessageRecord:
        if self._records is not None:
            return self._records[i]
        pos = int(self.position[i])
        sys_flag = int(self.sys_flag[i])
        born_ip, born_port, _, store_ip, store_port, _, _, _ = \
            MIDDLE[sys_flag & HOST_FLAGS].unpack_from(self.buf, pos + HEADER.size)
        return MessageRecord(
            self.base + pos, int(self.total_size[i]), int(self.magic_code[i]),
            int(self.body_crc[i]), int(self.queue_id[i]), int(self.flag[i]),
            int(self.queue_offset[i]), int(self.physical_offset[i]), sys_flag,
            int(self.born_timestamp[i]), born_ip, born_port, int(self.store_timestamp[i]),
            store_ip, store_port, int(self.reconsume_times[i]),
            int(self.prepared_transaction_offset[i]), int(self.body_length[i]),
            self.base + int(self.body_position[i]), self.topics.names[self.topic_id[i]],
            self.properties_raw(i), _FLAG_VALUES[int(self.body_crc_ok[i])],
            _FLAG_VALUES[int(self.prop_crc_ok[i])])

    def records(self) -> list[MessageRecord]:
        """Every record, the columns converted once for the whole batch (not via record(i))."""
        if self._records is not None:
            return list(self._records)
        buf, base, names = self.buf, self.base, self.topics.names
        n = len(self)
        born_ip, born_port, store_ip, store_port = [None] * n, [0] * n, [None] * n, [0] * n
        host = (self.sys_flag & HOST_FLAGS) >> _HOST_SHIFT
        for variant in np.unique(host).tolist():
            sel = np.flatnonzero(host == variant)
            middle = _codec.gather(buf, _MIDDLE_DTYPES[variant << _HOST_SHIFT],
                                   self.position[sel] + HEADER.size)
            rows = sel.tolist()
            for column, values in ((born_ip, middle["born_host"]["ip"]),
                                   (born_port, middle["born_host"]["port"]),
                                   (store_ip, middle["store_host"]["ip"]),
                                   (store_port, middle["store_host"]["port"])):
                if len(rows) == n:
                    column[:] = values.tolist()
                else:
                    for i, value in zip(rows, values.tolist()):
                        column[i] = value
        props = [bytes(buf[p:p + length]) if length > 0 else b"" for p, length in
                 zip(self.properties_position.tolist(), self.properties_length.tolist())]
        return list(map(MessageRecord._make, zip(
            (self.position + base).tolist(), self.total_size.tolist(), self.magic_code.tolist(),
            self.body_crc.tolist(), self.queue_id.tolist(), self.flag.tolist(),
            self.queue_offset.tolist(), self.physical_offset.tolist(), self.sys_flag.tolist(),
            self.born_timestamp.tolist(), born_ip, born_port, self.store_timestamp.tolist(),
            store_ip, store_port, self.reconsume_times.tolist(),
            self.prepared_transaction_offset.tolist(), self.body_length.tolist(),
            (self.body_position + base).tolist(), [names[t] for t in self.topic_id.tolist()],
            props, map(_FLAG_VALUES.__getitem__, self.body_crc_ok.tolist()),
            map(_FLAG_VALUES.__getitem__, self.prop_crc_ok.tolist()))))

    def head(self, n: int) -> RecordBatch:
        """The first ``n`` records as a batch (valid as long as this one is)."""
        return self.rows(0, n)

    def rows(self, start: int, stop: int) -> RecordBatch:
        """Records ``start`` to ``stop`` (exclusive) as a batch (valid as long as this one is)."""
        part = RecordBatch.__new__(RecordBatch)
        part.buf, part.base, part.topics = self.buf, self.base, self.topics
        part._records = None if self._records is None else self._records[start:stop]
        for name in _COLUMNS:
            setattr(part, name, getattr(self, name)[start:stop])
        return part

    def stored_prop_crc_present(self) -> np.ndarray:
        """codecs.stored_prop_crc(properties) is not None, for every record: the last 20 bytes
        of its properties are the property CRC's key and separator, ten digits and 0x02 (the
        scanner's prop_crc_ok says whether the CRC is right; this, whether there is one)."""
        length = self.properties_length
        rows = np.flatnonzero(length >= codecs.CRC32_RESERVED_LEN)
        found = np.zeros(len(self), dtype=bool)
        if len(rows) == 0:
            return found
        if self._records is not None:
            found[rows] = [codecs.stored_prop_crc(self._records[i].properties_raw) is not None
                           for i in rows.tolist()]
            return found
        tails = _codec.gather(self.buf, np.dtype((np.uint8, codecs.CRC32_RESERVED_LEN)),
                              self.properties_position[rows] + length[rows]
                              - codecs.CRC32_RESERVED_LEN)
        prefix = len(_PROP_CRC_PREFIX_CODES)
        digits = tails[:, prefix:-1]
        found[rows] = ((tails[:, :prefix] == _PROP_CRC_PREFIX_CODES).all(axis=1)
                       & (tails[:, -1] == ord(codecs.PROPERTY_SEPARATOR))
                       & ((digits >= ord("0")) & (digits <= ord("9"))).all(axis=1))
        return found

    @classmethod
    def from_records(cls, records: list[MessageRecord], base: int,
                     topics: TopicTable) -> RecordBatch:
        """A batch of records decoded one by one (by the reference path)."""
        batch = cls.__new__(cls)
        batch.buf, batch.base, batch.topics, batch._records = None, base, topics, list(records)
        for name in ("total_size", "magic_code", "body_crc", "queue_id", "flag", "queue_offset",
                     "physical_offset", "sys_flag", "born_timestamp", "store_timestamp",
                     "reconsume_times", "prepared_transaction_offset", "body_length"):
            setattr(batch, name, np.array([getattr(r, name) for r in records], dtype=np.int64))
        batch.position = np.array([r.offset - base for r in records], dtype=np.int64)
        batch.body_position = np.array([r.body_position - base for r in records], dtype=np.int64)
        batch.topic_id = np.array([topics.intern(r.topic) for r in records], dtype=np.int32)
        batch.properties_length = np.array([len(r.properties_raw) for r in records],
                                           dtype=np.int64)
        batch.properties_position = batch.position + batch.total_size \
            - np.maximum(batch.properties_length, 0)
        batch.body_crc_ok = np.array([_FLAG_CODES[r.body_crc_ok] for r in records], dtype=np.int8)
        batch.prop_crc_ok = np.array([_FLAG_CODES[r.prop_crc_ok] for r in records], dtype=np.int8)
        return batch


def _leading(ok: np.ndarray) -> int:
    """How many leading elements are True."""
    return len(ok) if ok.all() else int(np.argmin(ok))


def _walk(buf, pos: int, walk_end: int, max_records: int) -> list[int]:
    """Record starts from ``pos``, following TOTALSIZE while it is at least a minimal record and
    the start leaves room for a header; nothing else is checked here."""
    positions = []
    append = positions.append
    unpack = _I32.unpack_from
    for _ in repeat(None, max_records):
        if pos >= walk_end:
            break
        size = unpack(buf, pos)[0]
        if size < MIN_MESSAGE_SIZE:
            break
        append(pos)
        pos += size
    return positions


def _walk_entries(buf, pos: int, walk_end: int, limit: int, max_records: int,
                  base: int) -> list[int]:
    """:func:`_walk` for DLedger data: the record starts (entry + 48) of the entries from
    ``pos`` that :func:`entry_problem` accepts, following each entry's size."""
    positions = []
    append = positions.append
    unpack = _DL_HEADER.unpack_from
    record_size = _I32.unpack_from
    for _ in repeat(None, max_records):
        if pos >= walk_end or pos + _DL_HEADER_SIZE + HEADER.size > limit:
            break
        magic, size, _index, _term, entry_pos, _ch, _chain, _crc, body_size = unpack(buf, pos)
        if magic != dl_fmt.ENTRY_MAGIC or entry_pos != base + pos \
                or size != _DL_HEADER_SIZE + body_size or body_size < MIN_MESSAGE_SIZE \
                or pos + size > limit or record_size(buf, pos + _DL_HEADER_SIZE)[0] != body_size:
            break
        append(pos + _DL_HEADER_SIZE)
        pos += size
    return positions


def _walk_hinted(buf, pos: int, walk_end: int, max_records: int,
                 hints: np.ndarray) -> np.ndarray:
    """:func:`_walk`'s positions, taking whole runs of them from ``hints`` (sorted positions
    where records are expected, e.g. from ConsumeQueue units): a run of hints is used where
    each one's TOTALSIZE leads exactly to the next, starting from a position the walk reached,
    so wrong or missing hints cost time, never a different result."""
    lo = int(np.searchsorted(hints, pos))
    hi = int(np.searchsorted(hints, walk_end))
    window = hints[lo:min(hi, lo + max_records + 1)]
    if len(window) < 2:
        return np.array(_walk(buf, pos, walk_end, max_records), dtype=np.int64)
    sizes = _codec.gather(buf, _HEADER_DTYPE["total_size"], window).astype(np.int64)
    following = window + sizes
    chained = np.zeros(len(window), dtype=bool)
    chained[:-1] = (following[:-1] == window[1:]) & (sizes[:-1] >= MIN_MESSAGE_SIZE)
    starts = window.tolist()
    breaks = np.flatnonzero(~chained).tolist()      # the last hint of each chained run
    parts: list[np.ndarray] = []
    loose: list[int] = []                           # positions the walk found between runs
    count = 0
    unpack = _I32.unpack_from
    while count < max_records and pos < walk_end:
        i = bisect.bisect_left(starts, pos)
        if i < len(starts) and starts[i] == pos:
            j = breaks[bisect.bisect_left(breaks, i)]
            last = min(j, i + max_records - count - 1)
            if loose:
                parts.append(np.array(loose, dtype=np.int64))
                loose = []
            if last == j and sizes[j] < MIN_MESSAGE_SIZE:
                parts.append(window[i:last])
                break
            parts.append(window[i:last + 1])
            count += last + 1 - i
            pos = int(following[last])
            continue
        size = unpack(buf, pos)[0]
        if size < MIN_MESSAGE_SIZE:
            break
        loose.append(pos)
        count += 1
        pos += size
    if loose:
        parts.append(np.array(loose, dtype=np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _fast_batch(buf, pos: int, stop: int, limit: int, base: int, check_crc: bool,
                topics: TopicTable, max_records: int = _BATCH_RECORDS,
                max_bytes: int = _BATCH_BYTES,
                hints: np.ndarray | None = None,
                layout: str = COMMITLOG_LAYOUT) -> RecordBatch | None:
    """The run of records from ``pos`` that decode_message accepts, decoded as columns; None when
    the record at ``pos`` is not one (the reference path handles it)."""
    walk_end = min(stop, limit - HEADER.size + 1, pos + max_bytes)
    if layout == DLEDGER_LAYOUT:
        positions = np.array(_walk_entries(buf, pos, walk_end, limit, max_records, base),
                             dtype=np.int64)
        positions = positions[positions < stop]
    elif hints is None:
        positions = np.array(_walk(buf, pos, walk_end, max_records), dtype=np.int64)
    else:
        positions = _walk_hinted(buf, pos, walk_end, max_records, hints)
    if len(positions) == 0:
        return None
    header = _codec.gather(buf, _HEADER_DTYPE, positions)
    total = header["total_size"].astype(np.int64)
    magic = header["magic_code"].astype(np.int64)
    end = positions + total
    n = _leading(((magic == _V1) | (magic == _V2)) & (end <= limit))
    if n == 0:
        return None
    positions, header, total, magic, end = positions[:n], header[:n], total[:n], magic[:n], end[:n]
    sys_flag = header["sys_flag"].astype(np.int64)
    host = (sys_flag & HOST_FLAGS) >> _HOST_SHIFT
    middle_size = _MIDDLE_SIZES[host]
    n = _leading(total >= HEADER.size + middle_size)
    if n == 0:
        return None
    if n < len(positions):
        positions, header, total, magic, end, sys_flag, host, middle_size = (
            a[:n] for a in (positions, header, total, magic, end, sys_flag, host, middle_size))

    columns = {name: np.empty(n, dtype=np.int64) for name in (
        "store_timestamp", "reconsume_times", "prepared_transaction_offset", "body_length")}
    single = host.min() == host.max()       # nearly always: one producer/broker address family
    for variant in ([int(host[0])] if single else np.unique(host).tolist()):
        sel = slice(None) if single else np.flatnonzero(host == variant)
        middle = _codec.gather(buf, _MIDDLE_DTYPES[variant << _HOST_SHIFT],
                               positions[sel] + HEADER.size)
        for name, column in columns.items():
            column[sel] = middle[name]
    body_len = columns["body_length"]
    body_pos = positions + HEADER.size + middle_size
    q = body_pos + np.maximum(body_len, 0)
    is_v2 = magic == _V2
    topic_len_size = np.where(is_v2, _TOPIC_LENGTH_SIZES[_V2], _TOPIC_LENGTH_SIZES[_V1])
    n = _leading(q + topic_len_size <= end)
    if n == 0:
        return None
    topic_len = np.empty(n, dtype=np.int64)
    q, is_v2, topic_len_size = q[:n], is_v2[:n], topic_len_size[:n]
    if is_v2.any():
        v2 = np.flatnonzero(is_v2)
        topic_len[v2] = _codec.gather(buf, _codec.TOPIC_LENGTH_DTYPES[_V2], q[v2])
        v1 = np.flatnonzero(~is_v2)
        topic_len[v1] = _codec.gather(buf, _codec.TOPIC_LENGTH_DTYPES[_V1], q[v1])
    else:
        topic_len[:] = _codec.gather(buf, _codec.TOPIC_LENGTH_DTYPES[_V1], q)
    topic_pos = q + topic_len_size
    n = _leading((topic_len >= 0) & (topic_pos + topic_len + _PROPS_LENGTH_SIZE <= end[:n]))
    if n == 0:
        return None
    topic_len, topic_pos = topic_len[:n], topic_pos[:n]
    props_len = _codec.gather(buf, _codec.PROPERTIES_LENGTH_DTYPE,
                              topic_pos + topic_len).astype(np.int64)
    expected = (_FIXED_LENGTHS[is_v2[:n].astype(np.int64), host[:n]]
                + np.maximum(body_len[:n], 0) + topic_len + np.maximum(props_len, 0))
    n = _leading(expected == total[:n])
    if n == 0:
        return None

    batch = RecordBatch.__new__(RecordBatch)
    batch.buf, batch.base, batch.topics, batch._records = buf, base, topics, None
    header = header[:n]
    batch.position = positions[:n]
    batch.total_size = total[:n]
    batch.magic_code = magic[:n]
    for name in ("body_crc", "queue_id", "flag", "queue_offset", "physical_offset",
                 "born_timestamp"):
        setattr(batch, name, header[name].astype(np.int64))
    batch.sys_flag = sys_flag[:n]
    for name, column in columns.items():
        setattr(batch, name, column[:n])
    body_len = batch.body_length
    batch.body_position = body_pos[:n]
    batch.topic_id = topics.ids(buf, topic_pos[:n], topic_len[:n])
    batch.properties_length = np.maximum(props_len[:n], 0)
    batch.properties_position = topic_pos[:n] + topic_len[:n] + _PROPS_LENGTH_SIZE

    body_ok = np.full(n, FLAG_NONE, dtype=np.int8)
    if check_crc:
        with_body = np.flatnonzero(body_len > 0)
        if len(with_body):
            starts = batch.body_position[with_body]
            crcs = crc32_ranges(buf, starts, starts + body_len[with_body])
            body_ok[with_body] = (crcs & 0x7FFFFFFF) == batch.body_crc[with_body]
    batch.body_crc_ok = body_ok

    prop_ok = np.full(n, FLAG_NONE, dtype=np.int8)
    tails = np.flatnonzero(batch.properties_length >= codecs.CRC32_RESERVED_LEN)
    if len(tails):
        tail_pos = end[:n][tails] - codecs.CRC32_RESERVED_LEN
        for j, byte in enumerate(_PROP_CRC_PREFIX_CODES.tolist()):
            keep = _codec.gather(buf, np.uint8, tail_pos + j) == byte
            tails, tail_pos = tails[keep], tail_pos[keep]
        for i in tails.tolist():
            start = int(batch.position[i])
            props = batch.properties_raw(i)
            prop_ok[i] = _FLAG_CODES[_prop_crc_state(buf, start, start + int(batch.total_size[i]),
                                                     props, check_crc)]
    batch.prop_crc_ok = prop_ok
    return batch


def _native_batch(buf, pos: int, stop: int, limit: int, base: int, check_crc: bool,
                  topics: TopicTable, max_records: int = _NATIVE_BATCH_RECORDS,
                  max_bytes: int = _NATIVE_BATCH_BYTES,
                  hints: np.ndarray | None = None,
                  layout: str = COMMITLOG_LAYOUT, properties: tuple[str, ...] = (),
                  hashed: str | None = None, threads: int = 1,
                  index_keys: tuple[str, str, int] | None = None) -> RecordBatch | None:
    """:func:`_fast_batch` computed by the native core (:mod:`.native`): the same run, the same
    columns (``hints`` are not needed: the compiled walk follows TOTALSIZE as fast); with
    ``properties``, :attr:`RecordBatch.parsed` from the same pass, on ``threads`` threads."""
    patterns = [(name + codecs.NAME_VALUE_SEPARATOR).encode("utf-8") for name in properties] \
        if properties else None
    keys = None if not (properties and index_keys) else (
        properties.index(index_keys[0]), properties.index(index_keys[1]), index_keys[2])
    run = _native.core.scan_run(buf, pos, stop, limit, base, check_crc,
                                layout == DLEDGER_LAYOUT, max_records, max_bytes, patterns,
                                properties.index(hashed) if hashed else None, max(1, threads),
                                keys=keys)
    if run is None:
        return None
    columns, topic_index, raw_topics = run[:3]
    batch = RecordBatch.__new__(RecordBatch)
    batch.buf, batch.base, batch.topics, batch._records = buf, base, topics, None
    for name, column in zip(_NATIVE_COLUMNS, columns):
        setattr(batch, name, column)
    ids = np.array([topics.intern_bytes(raw) for raw in raw_topics], dtype=np.int32)
    batch.topic_id = ids[topic_index]
    if patterns is not None:
        spans, hashes, exact = run[3][:3]
        batch._parsed = (dict(zip(properties, spans)), hashes, exact,
                         run[3][3] if keys is not None else None)
    return batch


# the columns scan_run returns, in its order (topic_id comes apart)
_NATIVE_COLUMNS = tuple(name for name in _COLUMNS if name != "topic_id")


def scan_buffer_batches(buf, base: int, *, name: str = "", start: int = 0,
                        stop: int | None = None, check_crc: bool = True, resync: bool = False,
                        topics: TopicTable | None = None, batch_records: int | None = None,
                        hints: np.ndarray | None = None,
                        layout: str = COMMITLOG_LAYOUT, properties: tuple[str, ...] = (),
                        hashed: str | None = None, threads: int = 1,
                        index_keys: tuple[str, str, int] | None = None
                        ) -> Iterator[RecordBatch | ScanEvent]:
    """:func:`scan_buffer` with the message records grouped: the same events in the same order,
    except that every run of MessageRecords comes as :class:`RecordBatch` objects (never a
    MessageRecord). Batches are only valid until the next one is requested.

    ``hints``: sorted file positions where records probably start (ConsumeQueue units say where
    most are); they spare the walk from record to record, and cannot change the result.
    ``properties``/``hashed``/``index_keys``/``threads``: on the native core, the batches carry
    :attr:`RecordBatch.parsed`, made in the same pass over the bytes on ``threads`` threads
    (the numpy path ignores them: its batches' ``parsed`` is None)."""
    if hints is not None:
        # runs of sorted values (one per queue) merge fast in the stable sort (timsort)
        hints = np.sort(np.asarray(hints, dtype=np.int64), kind="stable")
        if len(hints) > 1:
            hints = hints[np.concatenate(([True], hints[1:] != hints[:-1]))]
    limit = len(buf)
    stop = limit if stop is None else min(stop, limit)
    topics = TopicTable() if topics is None else topics
    pos = start
    if start > 0:
        pos = find_sync_point(buf, start, limit, base, check_crc, layout)
    fast_batch, extra = _fast_batch, {}
    if _native.core is not None:
        fast_batch = _native_batch
        extra = {"properties": tuple(properties), "hashed": hashed, "threads": threads,
                 "index_keys": index_keys}
    if batch_records is None:
        batch_records = _BATCH_RECORDS if _native.core is None else _NATIVE_BATCH_RECORDS
    while pos < stop:
        batch = fast_batch(buf, pos, stop, limit, base, check_crc, topics, batch_records,
                            hints=hints, layout=layout, **extra)
        if batch is not None:
            yield batch
            pos = int(batch.position[-1] + batch.total_size[-1])
            continue
        event, pos = _step(buf, pos, limit, base, name, check_crc, resync, layout)
        if type(event) is MessageRecord:
            if event.offset >= base + stop:
                return      # DLedger: the entry starts before stop, its record does not
            yield RecordBatch.from_records([event], base, topics)
        else:
            yield event
        if pos is None:
            return


def expand_batches(events) -> Iterator[ScanEvent]:
    """The events of :func:`scan_buffer_batches` one by one, as :func:`scan_buffer` yields them."""
    for event in events:
        if type(event) is RecordBatch:
            yield from event.records()
        else:
            yield event


# pages behind the scan go back to the kernel this often: peak RSS on 1 GiB files fell from
# ~203 to ~166 MiB going from 64 to 32 MiB, at no measurable cost (mapping the pages ahead in
# one madvise(MADV_POPULATE_READ) instead of faulting them saved < 5% of CPU for ~100 MiB more)
