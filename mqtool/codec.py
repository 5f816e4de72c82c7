"""``struct`` codecs derived from the construct declarations, for the hot loops.

The scanner decodes and the writer encodes through these; each is computed from a declaration's
fixed-size fields, so the two cannot drift apart (tests compare both against construct)."""
from __future__ import annotations

import struct

import construct
import numpy as np

from . import native_core
from .formats import codecs
from .formats import commitlog as cl_fmt
from .formats import consumequeue as cq_fmt
from .formats import dledger as dl_fmt
from .formats import indexfile as idx_fmt
from .formats import timer as timer_fmt


def struct_format(decl: construct.Construct) -> str:
    """The big-endian struct format of a fixed-size declaration."""
    if isinstance(decl, (construct.Renamed, construct.Const)):
        return struct_format(decl.subcon)
    if isinstance(decl, construct.FormatField):
        return decl.fmtstr[1:]
    if isinstance(decl, construct.Bytes) and isinstance(decl.length, int):
        return f"{decl.length}s"
    if isinstance(decl, construct.Struct):
        return "".join(struct_format(sc) for sc in decl.subcons)
    raise TypeError(f"not a fixed-size declaration: {decl!r}")


# struct's standard-size integer codes -> numpy kinds (numpy would read "l" as a C long)
_STRUCT_TO_NUMPY = {"b": "i1", "B": "u1", "h": "i2", "H": "u2", "i": "i4", "I": "u4",
                    "l": "i4", "L": "u4", "q": "i8", "Q": "u8"}


def numpy_dtype(decl: construct.Construct) -> np.dtype:
    """The big-endian numpy type of a fixed-size integer declaration (field names kept)."""
    if isinstance(decl, construct.Renamed):
        return numpy_dtype(decl.subcon)
    if isinstance(decl, construct.Struct):
        return np.dtype([(sc.name, numpy_dtype(sc)) for sc in decl.subcons])
    return np.dtype(">" + _STRUCT_TO_NUMPY[struct_format(decl)])


def declared(decl: construct.Construct) -> struct.Struct:
    return struct.Struct(">" + struct_format(decl))


def _message_subcon(name: str) -> construct.Construct:
    for sc in cl_fmt.commitlog_message.subcons:
        if sc.name == name:
            return sc.subcon
    raise KeyError(name)


def _message_middle_fields(born_v6: bool, store_v6: bool) -> list[tuple[str, construct.Construct]]:
    """commitlog_message's fields from born_host through body_length for one host variant."""
    names = [sc.name for sc in cl_fmt.commitlog_message.subcons]
    start, stop = names.index("born_host"), names.index("body_length") + 1
    out = []
    for sc in cl_fmt.commitlog_message.subcons[start:stop]:
        inner = sc.subcon
        if isinstance(inner, construct.IfThenElse):
            v6 = born_v6 if sc.name == "born_host" else store_v6
            inner = inner.thensubcon if v6 else inner.elsesubcon
        out.append((sc.name, inner))
    return out


def _message_middle(born_v6: bool, store_v6: bool) -> str:
    return "".join(struct_format(decl) for _, decl in _message_middle_fields(born_v6, store_v6))


HOST_FLAGS = cl_fmt.BORNHOST_V6_FLAG | cl_fmt.STOREHOSTADDRESS_V6_FLAG
# total_size .. born_timestamp
MESSAGE_HEADER = declared(cl_fmt.message_header)
# born_host .. body_length, keyed by sys_flag & HOST_FLAGS
MESSAGE_MIDDLE = {
    flags: struct.Struct(">" + _message_middle(bool(flags & cl_fmt.BORNHOST_V6_FLAG),
                                               bool(flags & cl_fmt.STOREHOSTADDRESS_V6_FLAG)))
    for flags in (0, cl_fmt.BORNHOST_V6_FLAG, cl_fmt.STOREHOSTADDRESS_V6_FLAG, HOST_FLAGS)
}
TOPIC_LENGTH = {magic: struct.Struct(">" + struct_format(_message_subcon("topic_length").cases[magic]))
                for magic in cl_fmt.MESSAGE_MAGIC_CODES}
PROPERTIES_LENGTH = declared(_message_subcon("properties_length"))
BLANK_RECORD = struct.Struct(">" + struct_format(cl_fmt.blank_record.subcons[0]) + "I")
CQ_UNIT = declared(cq_fmt.consumequeue_unit)
BATCH_CQ_UNIT = declared(cq_fmt.batch_consumequeue_unit)
INDEX_HEADER = declared(idx_fmt.index_header)
INDEX_SLOT = declared(idx_fmt.index_slot)
INDEX_ENTRY = declared(idx_fmt.index_entry)

CQ_DTYPE = numpy_dtype(cq_fmt.consumequeue_unit)
BATCH_CQ_DTYPE = numpy_dtype(cq_fmt.batch_consumequeue_unit)
INDEX_ENTRY_DTYPE = numpy_dtype(idx_fmt.index_entry)
INDEX_SLOT_DTYPE = numpy_dtype(idx_fmt.index_slot)
TIMERLOG_UNIT = declared(timer_fmt.timerlog_unit)
TIMERLOG_BLANK = struct.Struct(">" + struct_format(timer_fmt.timerlog_blank.subcons[0])
                               + struct_format(timer_fmt.timerlog_blank.subcons[1]) + "I")
# DLedger mode: entry header, end-of-file blank (magic first), index unit
DLEDGER_ENTRY_HEADER = declared(dl_fmt.entry_header)
DLEDGER_BLANK = declared(dl_fmt.end_of_file_blank)
DLEDGER_INDEX_UNIT = declared(dl_fmt.index_unit)
DLEDGER_ENTRY_HEADER_DTYPE = numpy_dtype(dl_fmt.entry_header)
DLEDGER_INDEX_UNIT_DTYPE = numpy_dtype(dl_fmt.index_unit)
TIMERWHEEL_SLOT = declared(timer_fmt.timerwheel_slot)


# --- numpy codecs of CommitLog records, for scanning many records at once -------------------------

def _numpy_field(decl: construct.Construct) -> np.dtype:
    """numpy_dtype, with fixed byte strings as opaque (void) fields: "S" would drop trailing NULs."""
    if isinstance(decl, construct.Renamed):
        return _numpy_field(decl.subcon)
    if isinstance(decl, construct.Bytes) and isinstance(decl.length, int):
        return np.dtype(f"V{decl.length}")
    if isinstance(decl, construct.Struct):
        return np.dtype([(sc.name, _numpy_field(sc)) for sc in decl.subcons])
    return numpy_dtype(decl)


def _message_middle_dtype(born_v6: bool, store_v6: bool) -> np.dtype:
    return np.dtype([(name, _numpy_field(decl))
                     for name, decl in _message_middle_fields(born_v6, store_v6)])


# total_size .. born_timestamp; born_host .. body_length keyed by sys_flag & HOST_FLAGS; the
# length fields of the variable part (topic_length keyed by magic code)
MESSAGE_HEADER_DTYPE = _numpy_field(cl_fmt.message_header)
MESSAGE_MIDDLE_DTYPES = {
    flags: _message_middle_dtype(bool(flags & cl_fmt.BORNHOST_V6_FLAG),
                                 bool(flags & cl_fmt.STOREHOSTADDRESS_V6_FLAG))
    for flags in MESSAGE_MIDDLE
}
TOPIC_LENGTH_DTYPES = {magic: numpy_dtype(_message_subcon("topic_length").cases[magic])
                       for magic in cl_fmt.MESSAGE_MAGIC_CODES}
PROPERTIES_LENGTH_DTYPE = numpy_dtype(_message_subcon("properties_length"))


def gather(buf, dtype, positions: np.ndarray) -> np.ndarray:
    """The ``dtype`` values stored at each byte position of ``buf`` (any alignment); every
    position must leave room for a whole value."""
    dtype = np.dtype(dtype)
    size = dtype.itemsize
    length = len(buf) - size + 1
    if length <= 0 or len(positions) == 0:
        return np.zeros(0, dtype)
    # an overlapping view with a one-byte stride: element i is the value starting at byte i
    every = np.ndarray((length,), np.dtype(f"V{size}"), buffer=buf, strides=(1,))
    try:
        return every[positions].view(dtype)
    finally:
        del every


# --- String.hashCode of many byte strings at once ---------------------------------------------------

_HASH_WIDTHS = (8, 16, 32, 64, 128, 256)
HASH_MAX_LENGTH = _HASH_WIDTHS[-1]
POW31 = np.array([pow(31, n, 1 << 32) for n in range(HASH_MAX_LENGTH + 1)], dtype=np.uint32)
# 31^(width-1) .. 31^0: right-aligned units times these, summed, are the polynomial
_POW31_DESCENDING = POW31[HASH_MAX_LENGTH - 1::-1].copy()
_HIGH_BITS = np.uint64(0x8080808080808080)     # a byte >= 0x80 in any of 8
# column numbers of the fixed-width rows below (all widths fit uint16)
_UNIT_COLUMNS = np.arange(1 << 16, dtype=np.uint16)


def java_hashes(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                prefix: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Unsigned 32-bit String.hashCode of the strings ``data[starts[i]:ends[i]]`` (uint8) read as
    ASCII, continued from ``prefix[i]`` (the unsigned hash of a text before it) when given.

    Returns (hashes, exact): ``exact[i]`` is False where the string holds a byte >= 0x80 (it is
    UTF-8 and its UTF-16 units differ from its bytes) or is longer than HASH_MAX_LENGTH; the
    caller hashes those with :func:`mqtool.formats.codecs.java_hash_extend`.

    Strings are right-aligned in a matrix per width class (leading zero units add nothing to
    the polynomial sum(u_i * 31^(n-1-i)) mod 2^32), multiplied by the powers of 31 and summed;
    non-ASCII strings are decoded from UTF-8 to UTF-16 units and summed the same way."""
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    core = native_core.core
    if core is not None and data.dtype == np.uint8 and data.flags.c_contiguous:
        # the same contract, one string at a time in Rust: exact False only where the bytes
        # are not well-formed 1- to 3-byte UTF-8
        return core.java_hashes(data, starts, ends, None if prefix is None else
                                np.ascontiguousarray(prefix, dtype=np.uint32))
    return _java_hashes_numpy(data, starts, ends, prefix)


def _java_hashes_numpy(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                       prefix: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`java_hashes` with numpy: the reference the native core is held to."""
    lengths = ends - starts
    hashes = np.zeros(len(starts), dtype=np.uint32)
    exact = lengths <= HASH_MAX_LENGTH
    # zeros in front, so that the window of any width ending at a string's end lies inside
    padded = np.concatenate((np.zeros(HASH_MAX_LENGTH, dtype=np.uint8), data))
    lower = -1
    for width in _HASH_WIDTHS:
        sel = np.flatnonzero((lengths > lower) & (lengths <= width))
        lower = width
        if len(sel) == 0:
            continue
        windows = gather(padded, f"V{width}", ends[sel] + (HASH_MAX_LENGTH - width))
        units = windows.view(np.uint8).reshape(len(sel), width)
        # uint16 comparisons and a uint8 product: several times faster than int64 and bool
        units *= (_UNIT_COLUMNS[:width] >= (width - lengths[sel]).astype(np.uint16)[:, None]
                  ).view(np.uint8)
        exact[sel] &= ~(units.view(np.uint64) & _HIGH_BITS).any(axis=1)
        # uint32 accumulation wraps as Java's int arithmetic does
        hashes[sel] = np.einsum("ij,j->i", units, _POW31_DESCENDING[HASH_MAX_LENGTH - width:],
                                dtype=np.uint32)
    units = np.minimum(lengths, HASH_MAX_LENGTH)
    others = np.flatnonzero(~exact)
    if len(others):
        hashes[others], units[others], exact[others] = _java_hashes_distinct(
            padded, data, starts[others], ends[others])
    if prefix is not None:
        hashes = np.asarray(prefix, dtype=np.uint32) * _pow31(units) + hashes
    return hashes, exact


def _pow31(exponents: np.ndarray) -> np.ndarray:
    """31^e mod 2^32 (uint32) for each exponent."""
    top = int(exponents.max()) if len(exponents) else 0
    table = POW31 if top <= HASH_MAX_LENGTH else np.concatenate(
        ([1], np.cumprod(np.full(top, 31, dtype=np.uint32), dtype=np.uint32))).astype(np.uint32)
    return table[exponents]


def _java_hashes_distinct(padded: np.ndarray, data: np.ndarray, starts: np.ndarray,
                          ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_java_hashes_utf8` once per distinct string: non-ASCII tags are a handful of
    values over hundreds of thousands of records (a quarter of verify's hashing time was
    spent decoding the same few). ``padded`` is ``data`` after HASH_MAX_LENGTH zeros."""
    lengths = ends - starts
    width = int(lengths.max()) if len(lengths) else 0
    if len(starts) < 2 or width == 0 or width > HASH_MAX_LENGTH:
        return _java_hashes_utf8(data, starts, ends)
    rows = gather(padded, f"V{width}", ends + (HASH_MAX_LENGTH - width)).view(
        np.uint8).reshape(len(starts), width)
    rows *= (_UNIT_COLUMNS[:width] >= (width - lengths).astype(np.uint16)[:, None]).view(np.uint8)
    # right-aligned and zero-filled, a row and the length together name the string
    keys = np.concatenate((rows, lengths.astype("<u2").view(np.uint8).reshape(-1, 2)), axis=1)
    _, first, inverse = np.unique(keys.view(f"V{width + 2}").reshape(-1), return_index=True,
                                  return_inverse=True)
    hashes, counts, exact = _java_hashes_utf8(data, starts[first], ends[first])
    inverse = inverse.reshape(-1)
    return hashes[inverse], counts[inverse], exact[inverse]


def _java_hashes_utf8(data: np.ndarray, starts: np.ndarray,
                      ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hashes, UTF-16 unit counts, exact) of UTF-8 strings of any length, decoded as Python's
    strict decoder does for well-formed input of 1- to 3-byte sequences (one UTF-16 unit each).
    Anything else - malformed bytes, which ``errors="replace"`` turns into U+FFFD by rules not
    repeated here, and 4-byte sequences (surrogate pairs) - is left to the caller (exact False).

    The polynomial is summed directly: unit k of n contributes u_k * 31^(n-1-k)."""
    n = len(starts)
    lengths = ends - starts
    hashes = np.zeros(n, dtype=np.uint32)
    counts = np.zeros(n, dtype=np.int64)
    exact = np.ones(n, dtype=bool)
    total = int(lengths.sum())
    if total == 0:
        return hashes, counts, exact
    owner = np.repeat(np.arange(n, dtype=np.int64), lengths)
    first = np.cumsum(lengths) - lengths
    position = np.arange(total, dtype=np.int64) + np.repeat(starts - first, lengths)
    b = data[position].astype(np.int64)
    # the byte after, and the one after that, inside the same string (-1 past its end)
    rest = (first + lengths)[owner] - np.arange(total)
    b1 = np.where(rest > 1, data[np.minimum(position + 1, len(data) - 1)], -1).astype(np.int64)
    b2 = np.where(rest > 2, data[np.minimum(position + 2, len(data) - 1)], -1).astype(np.int64)
    continuation = (b & 0xC0) == 0x80
    lead2 = (b >= 0xC2) & (b <= 0xDF)
    lead3 = (b >= 0xE0) & (b <= 0xEF)
    single = b < 0x80
    c1 = (b1 & 0xC0) == 0x80
    c2 = (b2 & 0xC0) == 0x80
    # no overlong 3-byte form (E0 80..9F) and no surrogate (ED A0..BF)
    second_ok = ~((b == 0xE0) & (b1 < 0xA0)) & ~((b == 0xED) & (b1 > 0x9F))
    well_formed = single | (lead2 & c1) | (lead3 & c1 & c2 & second_ok)
    starts_char = ~continuation
    needed = np.where(lead2, 1, np.where(lead3, 2, 0))
    bad = (starts_char & ~well_formed).astype(np.int64)
    # every continuation byte must belong to the sequence before it
    conts = continuation.astype(np.int64)
    bad_strings = np.add.reduceat(bad, first[lengths > 0]) > 0
    cont_count = np.add.reduceat(conts, first[lengths > 0])
    need_count = np.add.reduceat(np.where(starts_char, needed, 0), first[lengths > 0])
    nonempty = np.flatnonzero(lengths > 0)
    exact[nonempty] = ~bad_strings & (cont_count == need_count)
    unit = np.where(single, b, np.where(lead2, ((b & 0x1F) << 6) | (b1 & 0x3F),
                                        ((b & 0x0F) << 12) | ((b1 & 0x3F) << 6) | (b2 & 0x3F)))
    starts_int = starts_char.astype(np.int64)
    index_in_string = np.cumsum(starts_int) - starts_int
    index_in_string -= np.repeat(index_in_string[first[lengths > 0]], lengths[lengths > 0])
    counts[nonempty] = np.add.reduceat(starts_int, first[lengths > 0])
    exponent = np.maximum(counts[owner] - 1 - index_in_string, 0)
    contribution = np.where(starts_char, unit.astype(np.uint32) * _pow31(exponent),
                            0).astype(np.uint32)
    hashes[nonempty] = np.add.reduceat(contribution, first[lengths > 0], dtype=np.uint32)
    return hashes, counts, exact


def signed32(values: np.ndarray) -> np.ndarray:
    """uint32 hashCodes as Java ints (int64)."""
    return values.astype(np.uint32).view(np.int32).astype(np.int64)


def index_hashes_of(values: np.ndarray) -> np.ndarray:
    """IndexFile.indexKeyHashMethod of uint32 hashCodes: abs, with Integer.MIN_VALUE -> 0."""
    signed = signed32(values)
    return np.where(signed == -(1 << 31), 0, np.abs(signed))


def string_hash_codes(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                      hashed: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """String.hashCode (as Java ints) of the UTF-8 strings ``data[starts:ends]``, 0 where a
    start is negative (an absent property): the tagsCode of a TAGS value. ``hashed``: the
    :func:`java_hashes` (hashes, exact) of every row, when a pass over the bytes made them."""
    starts = np.asarray(starts, dtype=np.int64)
    codes = np.zeros(len(starts), dtype=np.int64)
    has = np.flatnonzero(starts >= 0)
    if len(has):
        if hashed is None:
            hashes, exact = java_hashes(data, starts[has], ends[has])
        else:
            hashes, exact = hashed[0][has], hashed[1][has]
        codes[has] = signed32(hashes)
        for k in np.flatnonzero(~exact).tolist():
            i = int(has[k])
            codes[i] = codecs.java_string_hash_fast(_text(data, starts[i], ends[i]))
    return codes


def index_key_spans(data: np.ndarray, uniq: tuple[np.ndarray, np.ndarray],
                    keys: tuple[np.ndarray, np.ndarray], separator: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(owner, starts, ends) of the keys buildIndex puts for each record, in its order: the
    record's UNIQ_KEY, then its KEYS items split at ``separator``. ``uniq``/``keys`` are the
    properties' (starts, ends) per record, starts -1 where absent; owner is the record's row."""
    core = native_core.core
    if core is not None and data.dtype == np.uint8 and data.flags.c_contiguous:
        return core.index_key_spans(data, *(np.ascontiguousarray(a, dtype=np.int64)
                                            for a in (*uniq, *keys)), separator)
    return _index_key_spans_numpy(data, uniq, keys, separator)


def _index_key_spans_numpy(data: np.ndarray, uniq: tuple[np.ndarray, np.ndarray],
                           keys: tuple[np.ndarray, np.ndarray], separator: int
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`index_key_spans` with numpy: the reference the native core is held to."""
    u_starts, u_ends = uniq
    k_starts, k_ends = keys
    with_uniq = np.flatnonzero(u_starts >= 0)
    with_keys = np.flatnonzero(k_starts >= 0)
    k_owner, k_piece_starts, k_piece_ends = split_spans(data, k_starts[with_keys],
                                                        k_ends[with_keys], separator)
    owner = np.concatenate((with_uniq, with_keys[k_owner]))
    order = np.argsort(owner * 2 + np.repeat((0, 1), (len(with_uniq), len(k_owner))),
                       kind="stable")
    return (owner[order], np.concatenate((u_starts[with_uniq], k_piece_starts))[order],
            np.concatenate((u_ends[with_uniq], k_piece_ends))[order])


def index_key_hashes(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                     prefixes: np.ndarray,
                     hashed: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """IndexFile hashes of ``topic#key`` for the keys ``data[starts:ends]``, ``prefixes`` being
    the unsigned hashCodes of their ``topic#``. ``hashed``: the :func:`java_hashes` (hashes,
    exact) of those keys with their prefixes, when a pass over the bytes made them."""
    if hashed is None:
        hashes, exact = java_hashes(data, starts, ends, prefixes)
    else:
        hashes, exact = np.array(hashed[0]), hashed[1]
    for k in np.flatnonzero(~exact).tolist():
        hashes[k] = codecs.java_hash_extend(int(prefixes[k]), _text(data, starts[k], ends[k]))
    return index_hashes_of(hashes)


def _text(data: np.ndarray, start, end) -> str:
    return data[int(start):int(end)].tobytes().decode("utf-8", errors="replace")


# --- message properties of many records at once ----------------------------------------------------

_PROPERTY = ord(codecs.PROPERTY_SEPARATOR)
_ROW_WIDTHS = (48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096, 8192, 16384,
               1 << 16)


def property_blob(buf, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The properties ``buf[starts[i]:ends[i]]`` of many records copied into one uint8 array,
    each between two property separators and followed by zeros (a row of a fixed width per
    size class: copying fixed-size rows is one numpy gather); and where each record's
    properties begin in it."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(ends, dtype=np.int64) - starts
    begins = np.empty(len(starts), dtype=np.int64)
    parts, used, lower = [], 0, -1
    for width in _ROW_WIDTHS:
        sel = np.flatnonzero((lengths > lower) & (lengths <= width - 2))
        lower = width - 2
        if len(sel) == 0:
            continue
        # a row starts one byte before the properties (that byte becomes the separator)
        row_starts = starts[sel] - 1
        fits = (row_starts >= 0) & (row_starts + width <= len(buf))
        if fits.all():
            rows = gather(buf, f"V{width}", row_starts).view(np.uint8).reshape(-1, width)
        else:
            rows = np.zeros((len(sel), width), dtype=np.uint8)
            inside = np.flatnonzero(fits)
            rows[inside] = gather(buf, f"V{width}", row_starts[inside]).view(
                np.uint8).reshape(-1, width)
            for k in np.flatnonzero(~fits).tolist():
                start = int(starts[sel[k]])
                rows[k, 1:1 + int(lengths[sel[k]])] = np.frombuffer(
                    bytes(buf[start:start + int(lengths[sel[k]])]), dtype=np.uint8)
        row_lengths = lengths[sel]
        rows *= (_UNIT_COLUMNS[:width] <= row_lengths.astype(np.uint16)[:, None]).view(np.uint8)
        rows[:, 0] = _PROPERTY
        rows[np.arange(len(sel)), row_lengths + 1] = _PROPERTY
        parts.append(rows.reshape(-1))
        begins[sel] = used + np.arange(len(sel), dtype=np.int64) * width + 1
        used += len(sel) * width
    blob = np.concatenate(parts) if len(parts) > 1 else (
        parts[0] if parts else np.zeros(0, dtype=np.uint8))
    return blob, begins


def property_spans(buf, starts: np.ndarray, ends: np.ndarray, names: tuple[str, ...]
                   ) -> tuple[np.ndarray, np.ndarray, dict]:
    """:func:`property_blob` and :func:`property_values` of its records in one step: (blob,
    begins, {name: (value_start, value_end)}). The native core copies each record's properties
    once, between two separators and without the padding, and parses them on the way; the
    spans then index its own blob, and every value is the same bytes."""
    core = native_core.core
    if core is not None:
        patterns = [(name + codecs.NAME_VALUE_SEPARATOR).encode("utf-8") for name in names]
        blob, begins, spans = core.property_spans(
            buf, np.ascontiguousarray(starts, dtype=np.int64),
            np.ascontiguousarray(ends, dtype=np.int64), patterns)
        return blob, begins, dict(zip(names, spans))
    blob, begins = property_blob(buf, starts, ends)
    return blob, begins, property_values(blob, begins, names)


def property_values(blob: np.ndarray, begins: np.ndarray, names: tuple[str, ...]) -> dict:
    """For the records of a :func:`property_blob`, the value of each property name as
    :func:`mqtool.formats.codecs.decode_properties` would return it, as byte spans in the blob:
    {name: (value_start, value_end)}, -1 where a record has no such (non-empty) property.

    Separators are ASCII bytes, which UTF-8 decoding never merges into another character, so
    splitting the bytes is splitting the decoded text: a pair counts when its segment starts with
    the name and 0x01 and has a value after it; a later pair wins."""
    core = native_core.core
    if core is not None and blob.dtype == np.uint8 and blob.flags.c_contiguous:
        patterns = [(name + codecs.NAME_VALUE_SEPARATOR).encode("utf-8") for name in names]
        spans = core.property_values(blob, np.ascontiguousarray(begins, dtype=np.int64), patterns)
        return dict(zip(names, spans))
    return _property_values_numpy(blob, begins, names)


def _property_values_numpy(blob: np.ndarray, begins: np.ndarray, names: tuple[str, ...]) -> dict:
    """:func:`property_values` with numpy: the reference the native core is held to."""
    separators = np.flatnonzero(blob == _PROPERTY)
    seg_starts = separators + 1
    seg_ends = np.empty_like(separators)
    seg_ends[:-1] = separators[1:]
    if len(separators):
        seg_ends[-1] = len(blob)
    seg_lengths = seg_ends - seg_starts
    record_order = np.argsort(begins, kind="stable")
    sorted_begins = begins[record_order]
    # the first four bytes of every segment at once (segments shorter than that match no name)
    heads = gather(blob, ">u4", np.minimum(seg_starts, max(len(blob) - 4, 0)))
    out = {}
    for name in names:
        pattern = name.encode("utf-8") + codecs.NAME_VALUE_SEPARATOR.encode()
        # a non-empty value: the segment is longer than name + 0x01
        longer = seg_lengths > len(pattern)
        if len(pattern) >= 4 and len(heads):
            cand = np.flatnonzero((heads == int.from_bytes(pattern[:4], "big")) & longer)
            if len(pattern) > 4 and len(cand):
                # the rest of the name in one gather and compare, not a pass per byte
                tail = pattern[4:]
                rest = gather(blob, f"V{len(tail)}", seg_starts[cand] + 4)
                cand = cand[rest == np.frombuffer(tail, f"V{len(tail)}")[0]]
        else:
            cand = np.flatnonzero(longer)
            for j in range(len(pattern)):
                cand = cand[blob[seg_starts[cand] + j] == pattern[j]]
        starts = np.full(len(begins), -1, dtype=np.int64)
        ends = np.full(len(begins), -1, dtype=np.int64)
        if len(cand):
            owner = record_order[np.searchsorted(sorted_begins, seg_starts[cand],
                                                 side="right") - 1]
            last = np.ones(len(cand), dtype=bool)
            last[:-1] = owner[1:] != owner[:-1]
            cand, owner = cand[last], owner[last]
            starts[owner] = seg_starts[cand] + len(pattern)
            ends[owner] = seg_ends[cand]
        out[name] = (starts, ends)
    return out


def split_spans(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                separator: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-empty pieces of ``data[starts[i]:ends[i]]`` split on one byte (str.split then
    dropping empty items): (owner i, piece start, piece end), in order."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    width = int(lengths.max())
    if width <= _SPLIT_ROW_MAX:
        return _split_rows(data, starts, lengths, width, separator)
    owner = np.repeat(np.arange(len(starts), dtype=np.int64), lengths)
    first = np.cumsum(lengths) - lengths
    position = np.arange(total, dtype=np.int64) + np.repeat(starts - first, lengths)
    inside = data[position] != separator
    at_first = np.zeros(total, dtype=bool)
    at_first[first[lengths > 0]] = True
    at_last = np.zeros(total, dtype=bool)
    at_last[(first + lengths - 1)[lengths > 0]] = True
    begin = inside & (at_first | np.concatenate(([True], ~inside[:-1])))
    finish = inside & (at_last | np.concatenate((~inside[1:], [True])))
    b, f = np.flatnonzero(begin), np.flatnonzero(finish)
    return owner[b], position[b], position[f] + 1


_SPLIT_ROW_MAX = 256


def _split_rows(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int,
                separator: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`split_spans` of short spans, each copied into a row of one width: a piece begins
    where a byte inside is not preceded by one, and ends where it is not followed by one.
    Row-major order is owner then position, the order wanted (a third of the time of a
    per-byte index built with repeat)."""
    if int(starts.max()) + width > len(data):
        data = np.concatenate((data, np.zeros(width, dtype=np.uint8)))
    rows = gather(data, f"V{width}", starts).view(np.uint8).reshape(len(starts), width)
    inside = (rows != separator) & (_UNIT_COLUMNS[:width] < lengths.astype(np.uint16)[:, None])
    begin = inside.copy()
    begin[:, 1:] &= ~inside[:, :-1]
    finish = inside
    finish[:, :-1] &= ~inside[:, 1:]
    # flat indexes: np.nonzero of a 2-D mask is several times slower
    first = np.flatnonzero(begin)
    owner = first // width
    at = starts[owner] - owner * width
    return owner, at + first, at + np.flatnonzero(finish) + 1
