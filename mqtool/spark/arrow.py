"""Executor side of the columnar path: the scanner's numpy batches as Arrow record batches.

No pyspark here (``mapInArrow`` functions and the ``rocketmq`` data source's reader run it on
executors). A :class:`mqtool.scan.RecordBatch` already holds every fixed field of its records as
numpy columns; this module hands them to Arrow as they are, and finds TAGS, KEYS and UNIQ_KEY
with Arrow's string kernels over all of a batch's properties at once, so no Python object is
built per message. Only the rare inner-batch records (their INNER_NUM) and properties that are
not valid UTF-8 (damage) are decoded one by one, with the single-process rule
(:func:`mqtool.formats.codecs.decode_properties`).
"""
from __future__ import annotations

import functools
from typing import Iterator

import numpy as np

from .. import jsontext
from ..errors import OptionalDependencyError
from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..scan import FLAG_NONE, FLAG_TRUE, RecordBatch
from ..systopics import SYSTEM_PROPERTIES
from . import schema
from .plan import Split

MISSING_PYARROW = "pyarrow is not installed; install 'mqtool[spark]'"

_EMPTY_BODY_CRC = codecs.body_crc(b"")
_VERSION_CODES = {cl_fmt.MESSAGE_MAGIC_CODE: 0, cl_fmt.MESSAGE_MAGIC_CODE_V2: 1}
_VERSION_NAMES = ["V1", "V2", "UNKNOWN"]
#: the audit's mark, in ``inner_position``, of an inner-batch record whose inner messages follow
#: it as rows (the audit checks records and publishes messages: its table drops these rows)
OPENED_RECORD = -1
#: property names the messages table has a column for
PROPERTY_COLUMNS = (("tags", "TAGS"), ("keys", "KEYS"), ("uniq_key", "UNIQ_KEY"))


def require_pyarrow():
    try:
        import pyarrow
    except ImportError:
        raise OptionalDependencyError(MISSING_PYARROW) from None
    return pyarrow


def _arrow_type(pa, kind: str):
    return {"string": pa.string(), "long": pa.int64(), "int": pa.int32(),
            "boolean": pa.bool_(), "binary": pa.binary()}[kind]


@functools.lru_cache(maxsize=8)
def arrow_schema(columns=schema.MESSAGE_COLUMNS):
    pa = require_pyarrow()
    return pa.schema([pa.field(name, _arrow_type(pa, kind)) for name, kind in columns])


def _binary_column(pa, buf, starts: np.ndarray, ends: np.ndarray):
    """buf[starts[i]:ends[i]] for every i as one Arrow binary array, gathered by numpy."""
    lengths = np.maximum(ends - starts, 0)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        source = np.frombuffer(buf, dtype=np.uint8)
        # each byte's source position, as a running sum: +1 inside a value, a jump to the next
        # value's start at its first byte (one pass, no per-value Python)
        kept = lengths > 0
        first, starts_kept = offsets[:-1][kept], starts[kept]
        step = np.ones(total, dtype=np.int64)
        step[first] = starts_kept
        step[first[1:]] -= starts_kept[:-1] + lengths[kept][:-1] - 1
        data = source[np.cumsum(step, out=step)]
    else:
        data = np.zeros(0, dtype=np.uint8)
    if total < 2 ** 31:
        return pa.Array.from_buffers(pa.binary(), len(lengths),
                                     [None, pa.py_buffer(offsets.astype(np.int32)),
                                      pa.py_buffer(data)])
    return pa.Array.from_buffers(pa.large_binary(), len(lengths),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)]) \
        .cast(pa.binary())


def _property_values(pa, pc, text, name: str):
    """The value of property ``name`` in every row of ``text`` (properties as strings), null
    where there is none, by decode_properties' rule: split on 0x02, a segment ``name`` 0x01
    ``value`` with a non-empty value counts, the last such segment wins."""
    segments = pc.split_pattern(text, codecs.PROPERTY_SEPARATOR)
    flat = pc.list_flatten(segments)
    prefix = name + codecs.NAME_VALUE_SEPARATOR
    hits = pc.and_(pc.starts_with(flat, prefix),
                   pc.greater(pc.binary_length(flat), len(prefix.encode())))
    index = np.flatnonzero(hits.to_numpy(zero_copy_only=False))
    rows = pc.list_parent_indices(segments).to_numpy()[index]
    last = np.ones(len(index), dtype=bool)
    last[:-1] = rows[1:] != rows[:-1]
    index, rows = index[last], rows[last]
    values = pc.utf8_slice_codeunits(flat.take(pa.array(index)), start=len(prefix))
    where = np.full(len(text), -1, dtype=np.int64)
    where[rows] = np.arange(len(rows))
    return values.take(pa.array(where, mask=where < 0))


#: a property that gives any message a ``system`` object, at the start of a segment
_SYSTEM_PROPERTY = ("(?:^|" + codecs.PROPERTY_SEPARATOR + ")(?:" + "|".join(SYSTEM_PROPERTIES)
                    + ")" + codecs.NAME_VALUE_SEPARATOR)


def _properties_columns(pa, pc, batch: RecordBatch) -> tuple[dict, np.ndarray]:
    """The TAGS, KEYS and UNIQ_KEY columns, and which rows may carry a system property (a
    superset: :func:`_system_column` decides)."""
    buf, starts, ends = batch.properties_source()
    raw = _binary_column(pa, buf, np.asarray(starts, dtype=np.int64),
                         np.asarray(ends, dtype=np.int64))
    try:
        text = raw.cast(pa.string())
    except pa.ArrowInvalid:
        # not UTF-8 (damaged properties): decode as the single-process path does, with
        # replacement characters
        decoded = [codecs.decode_properties(v) if v else {} for v in raw.to_pylist()]
        flagged = np.array([any(name in d for name in SYSTEM_PROPERTIES) for d in decoded],
                           dtype=bool)
        return {column: pa.array([d.get(name) for d in decoded], pa.string())
                for column, name in PROPERTY_COLUMNS}, flagged
    flagged = pc.match_substring_regex(text, _SYSTEM_PROPERTY).to_numpy(zero_copy_only=False)
    return ({column: _property_values(pa, pc, text, name) for column, name in PROPERTY_COLUMNS},
            flagged.astype(bool, copy=False))


def _system_column(pa, batch: RecordBatch, flagged: np.ndarray, body_reader):
    """``system``: dump's ``system`` object of each row as JSON text
    (:func:`mqtool.inspect.system_object`, the one decoder), null where there is none. Only
    rows of system topics or with a system property are decoded, one by one; a body is read
    only where the decoder reads it."""
    from ..inspect import may_have_system, system_object, system_reads_body

    names = batch.topics.names
    by_topic = np.fromiter((may_have_system(name) for name in names), dtype=bool,
                           count=len(names))
    rows = np.flatnonzero(flagged | by_topic[batch.topic_id]) if len(names) else \
        np.flatnonzero(flagged)
    if not len(rows):
        return pa.nulls(len(batch), pa.string())
    values: list = [None] * len(batch)
    # the rows' fields as Python values once (not a MessageRecord per row)
    fields = zip(rows.tolist(), batch.topic_id[rows].tolist(), batch.sys_flag[rows].tolist(),
                 batch.store_timestamp[rows].tolist(), batch.reconsume_times[rows].tolist())
    for i, topic_id, sys_flag, stored_at, reconsumed in fields:
        topic = names[topic_id]
        props = codecs.decode_properties(batch.properties_raw(i))
        stored = _stored_body(batch, i, body_reader) if system_reads_body(topic, props) \
            else None
        system = system_object(topic, props, stored, sys_flag, stored_at, reconsumed)
        if system is not None:
            values[i] = jsontext.dumps(system, separators=(",", ":"))
    return pa.array(values, pa.string())


def _inner_num(pa, batch: RecordBatch):
    """INNER_NUM, the queue-offset step of inner-batch records (verify's rule); null for others."""
    inner = np.flatnonzero(batch.sys_flag & cl_fmt.INNER_BATCH_FLAG)
    if not len(inner):
        return pa.nulls(len(batch), pa.int32())
    values = np.ones(len(batch), dtype=np.int32)
    for i in inner.tolist():
        text = codecs.decode_properties(batch.properties_raw(i)).get("INNER_NUM", "1")
        try:
            values[i] = max(1, int(text))
        except ValueError:
            values[i] = 1
    mask = np.ones(len(batch), dtype=bool)
    mask[inner] = False
    return pa.array(values, pa.int32(), mask=mask)


def _take_names(pa, names: list[str], codes: np.ndarray):
    return pa.array(names, pa.string()).take(pa.array(codes))


def _crc_flags(pa, batch: RecordBatch):
    """(body_crc_ok, prop_crc_ok) as nullable booleans; an empty body is checked too, as dump
    checks it (its CRC must be that of no bytes)."""
    body = batch.body_crc_ok
    unchecked = body == FLAG_NONE
    empty = unchecked & (batch.body_length <= 0)
    body_ok = np.where(empty, batch.body_crc == _EMPTY_BODY_CRC, body == FLAG_TRUE)
    body_col = pa.array(body_ok, pa.bool_(), mask=unchecked & ~empty)
    prop = batch.prop_crc_ok
    prop_col = pa.array(prop == FLAG_TRUE, pa.bool_(), mask=prop == FLAG_NONE)
    return body_col, prop_col


#: transaction names by (sys_flag & TRANSACTION_TYPE_MASK) >> 2
_TRANSACTIONS = [cl_fmt.TRANSACTION_NAMES[i << 2] for i in range(4)]


#: the last store timestamp read as a date (9999-12-31T23:59:59.999Z): later ones are damage
LAST_MILLI = 253402300799999
_DAY_MS = 86_400_000


def _store_dates(pa, stored: np.ndarray):
    """store_date (UTC, yyyy-mm-dd) of every store timestamp, ``invalid`` outside year 1970
    to 9999; the few distinct days are formatted once."""
    valid = (stored >= 0) & (stored <= LAST_MILLI)
    days, codes = np.unique(stored[valid] // _DAY_MS, return_inverse=True)
    names = [str(np.datetime64(int(d), "D")) for d in days.tolist()] + ["invalid"]
    index = np.full(len(stored), len(days), dtype=np.int64)
    index[valid] = codes.reshape(-1)
    return _take_names(pa, names, index)


def message_batch(split: Split, batch: RecordBatch, *, bodies: bool = False, body_reader=None,
                  store_date: bool = False, unwrap: bool = False, keep_records: bool = False):
    """The ``messages`` rows of a scanner batch (columns: MESSAGE_COLUMNS, then ``body`` with
    ``bodies``: the stored bytes, then ``store_date`` with ``store_date``) as one
    pyarrow.RecordBatch. With ``unwrap`` (and a ``body_reader``), an inner-batch record is one
    row per inner message instead (:func:`_unwrap_inner_batches`); with ``keep_records`` as
    well, the record keeps its own row before its inner messages, its ``inner_position`` set to
    :data:`OPENED_RECORD` (the audit checks records and publishes messages)."""
    pa = require_pyarrow()
    import pyarrow.compute as pc

    n = len(batch)
    magic = np.full(n, 2, dtype=np.int8)
    for code, index in _VERSION_CODES.items():
        magic[batch.magic_code == code] = index
    body_ok, prop_ok = _crc_flags(pa, batch)
    props, flagged = _properties_columns(pa, pc, batch)
    int32 = pa.int32()
    columns = {
        "broker": pa.repeat(pa.scalar(split.broker, pa.string()), n),
        "file": pa.repeat(pa.scalar(split.name, pa.string()), n),
        "file_offset": pa.array(batch.position, pa.int64()),
        "commitlog_offset": pa.array(batch.position + batch.base, pa.int64()),
        "total_size": pa.array(batch.total_size.astype(np.int32), int32),
        "magic_version": _take_names(pa, _VERSION_NAMES, magic),
        "topic": _take_names(pa, batch.topics.names, batch.topic_id),
        "queue_id": pa.array(batch.queue_id.astype(np.int32), int32),
        "queue_offset": pa.array(batch.queue_offset, pa.int64()),
        "physical_offset": pa.array(batch.physical_offset, pa.int64()),
        "sys_flag": pa.array(batch.sys_flag.astype(np.int32), int32),
        "transaction": _take_names(pa, _TRANSACTIONS,
                                   (batch.sys_flag & cl_fmt.TRANSACTION_TYPE_MASK) >> 2),
        "born_timestamp": pa.array(batch.born_timestamp, pa.int64()),
        "store_timestamp": pa.array(batch.store_timestamp, pa.int64()),
        "reconsume_times": pa.array(batch.reconsume_times.astype(np.int32), int32),
        **props,
        "body_crc": pa.array(batch.body_crc.astype(np.int32), int32),
        "body_crc_ok": body_ok,
        "prop_crc_ok": prop_ok,
        "body_length": pa.array(batch.body_length.astype(np.int32), int32),
        "inner_num": _inner_num(pa, batch),
        "inner_position": pa.nulls(n, int32),
        "outer_commitlog_offset": pa.nulls(n, pa.int64()),
        "system": _system_column(pa, batch, flagged, body_reader),
    }
    fields = list(schema.MESSAGE_COLUMNS)
    if bodies:
        columns["body"] = _bodies(pa, batch, body_reader)
        fields.append(("body", "binary"))
    if store_date:
        columns["store_date"] = _store_dates(pa, batch.store_timestamp)
        fields.append(("store_date", "string"))
    if unwrap:
        columns = _unwrap_inner_batches(pa, batch, columns, body_reader, keep_records)
    return pa.RecordBatch.from_arrays([columns[name] for name, _ in fields],
                                      schema=arrow_schema(tuple(fields)))


def _stored_body(batch: RecordBatch, i: int, body_reader) -> bytes:
    length = int(batch.body_length[i])
    if length <= 0:
        return b""
    if batch.buf is not None:
        start = int(batch.body_position[i])
        return bytes(batch.buf[start:start + length])
    return body_reader.body(batch.record(i))


def _unwrap_inner_batches(pa, batch: RecordBatch, columns: dict, body_reader,
                          keep_records: bool = False) -> dict:
    """``columns`` with every inner-batch record that opens replaced by its inner messages, as
    ``dump`` shows them (:func:`mqtool.inspect.unwrap_message_dict`, the one opener): the
    record's columns, with the message's own queue offset, TAGS, KEYS, UNIQ_KEY, body (CRC,
    length) and its place (``inner_position``, ``outer_commitlog_offset``). Such records are
    rare, so they are opened one by one; a batch that cannot be opened stays its stored row.
    With ``keep_records`` the opened record stays too, first, its ``inner_position``
    :data:`OPENED_RECORD`."""
    import pyarrow.compute as pc

    from ..inspect import unwrap_message_dict

    inner = np.flatnonzero(batch.sys_flag & cl_fmt.INNER_BATCH_FLAG)
    if not len(inner):
        return columns
    bodies = "body" in columns
    counts = np.ones(len(batch), dtype=np.int64)
    opened_records, messages = [], []
    for i in inner.tolist():
        opened = unwrap_message_dict({}, batch.record(i), _stored_body(batch, i, body_reader),
                                     body_mode="hex" if bodies else "none")
        if "inner_batch" in opened[0]:
            counts[i] = len(opened)
            opened_records.append(i)
            messages += opened
    if not messages:
        return columns
    kept = 1 if keep_records else 0
    counts[opened_records] += kept
    out = {name: column.take(pa.array(np.repeat(np.arange(len(batch)), counts)))
           for name, column in columns.items()}
    # the rows of record i start at the sum of the counts before it (its own row first when
    # kept)
    starts = np.cumsum(counts) - counts
    rows = np.concatenate([np.arange(starts[i] + kept, starts[i] + counts[i])
                           for i in opened_records])
    mask = np.zeros(int(counts.sum()), dtype=bool)
    mask[rows] = True
    mask_array = pa.array(mask)

    def replace(name, values, kind):
        out[name] = pc.replace_with_mask(out[name], mask_array, pa.array(values, kind))

    int32 = pa.int32()
    replace("queue_offset", [m["queue_offset"] for m in messages], pa.int64())
    for column in ("tags", "keys", "uniq_key"):
        replace(column, [m[column] for m in messages], pa.string())
    replace("body_crc", np.array([m["body_crc"] for m in messages], dtype=np.int64)
            .astype(np.int32), int32)
    replace("body_length", [m["body_length"] for m in messages], int32)
    # an inner message is not a batch record: no queue-offset step of its own
    replace("inner_num", [None] * len(messages), int32)
    replace("inner_position", [m["inner_batch"]["position"] for m in messages], int32)
    if keep_records:
        marked = np.zeros(len(mask), dtype=bool)
        marked[starts[opened_records]] = True
        out["inner_position"] = pc.replace_with_mask(
            out["inner_position"], pa.array(marked),
            pa.array(np.full(len(opened_records), OPENED_RECORD, dtype=np.int32), int32))
    replace("outer_commitlog_offset", [m["inner_batch"]["commitlog_offset"] for m in messages],
            pa.int64())
    if bodies:
        replace("body", [bytes.fromhex(m["body"]) for m in messages], pa.binary())
    return out


def _bodies(pa, batch: RecordBatch, body_reader):
    """The stored bodies: gathered from the scan's buffer, or (records the scanner decoded one
    by one, near damage) read back through ``body_reader``."""
    if batch.buf is not None:
        starts = batch.body_position
        return _binary_column(pa, batch.buf, starts, starts + np.maximum(batch.body_length, 0))
    return pa.array([body_reader.body(r) for r in batch.records()], pa.binary())


def split_batches(split: Split, *, check_crc: bool = True, bodies: bool = False,
                  side: dict | None = None, opener=None, store_date: bool = False,
                  unwrap: bool = False, keep_records: bool = False, row_filter=None,
                  offsets: frozenset[int] | None = None) -> Iterator:
    """Arrow record batches of the messages one split owns (with ``unwrap``, the inner messages
    of inner-batch records instead of the records); with ``side``, what the driver needs
    besides the rows is noted there (:func:`mqtool.spark.splits.new_side`). With a
    ``row_filter`` (:class:`mqtool.spark.pushdown.RowFilter`; ``offsets``: the only records a
    key lookup allows), only matching rows, and records that cannot match are never decoded."""
    from .pushdown import select
    from .splits import BodyReader, note_batch, note_event, split_events

    reader = BodyReader(split, opener)     # opens the file only when a body is read
    try:
        for event in split_events(split, check_crc=check_crc, batches=True, opener=opener):
            if type(event) is RecordBatch:
                if side is not None:
                    note_batch(side, event)
                if row_filter is not None:
                    keep = row_filter.keep_records(event, offsets)
                    if keep is not None:
                        if not keep.any():
                            continue
                        event = select(event, keep)
                rows = message_batch(split, event, bodies=bodies, body_reader=reader,
                                     store_date=store_date, unwrap=unwrap,
                                     keep_records=keep_records)
                if row_filter is not None:
                    rows = row_filter.exact(rows)
                    if not rows.num_rows:
                        continue
                yield rows
            elif side is not None:
                note_event(side, event)
    finally:
        reader.close()


def count_opened(batch) -> int:
    import pyarrow.compute as pc

    marked = pc.equal(batch.column("inner_position"), OPENED_RECORD)
    return int(pc.sum(pc.cast(marked, "int64")).as_py() or 0)


def audit_arrow_partition(batches, splits: list[Split], check_crc: bool, sink) -> Iterator:
    """``mapInArrow`` body of the audit: the input rows are split numbers; message batches out
    (every stored record, and after an inner batch's record its inner messages: see
    :func:`message_batch`'s ``keep_records``), one side report per split to ``sink`` (an
    accumulator)."""
    from .splits import new_side, note_done

    for ids in batches:
        for index in ids.column(0).to_pylist():
            split = splits[index]
            side = new_side(split)
            side["opened"] = 0
            for batch in split_batches(split, check_crc=check_crc, side=side, store_date=True,
                                       unwrap=True, keep_records=True):
                if batch.column("inner_num").null_count < batch.num_rows:
                    side["opened"] += count_opened(batch)
                yield batch
            note_done(side)
            sink.add([side])
