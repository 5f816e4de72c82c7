"""``struct`` codecs derived from the construct declarations, for the hot loops.

The scanner decodes and the writer encodes through these; each is computed from a declaration's
fixed-size fields, so the two cannot drift apart (tests compare both against construct)."""
from __future__ import annotations

import struct

import construct
import numpy as np

from .formats import commitlog as cl_fmt
from .formats import consumequeue as cq_fmt
from .formats import indexfile as idx_fmt
from .formats import timer as timer_fmt


def struct_format(decl: construct.Construct) -> str:
    """The big-endian struct format of a fixed-size declaration."""
    if isinstance(decl, construct.Renamed):
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


def _message_middle(born_v6: bool, store_v6: bool) -> str:
    """commitlog_message from born_host through body_length for one host variant."""
    names = [sc.name for sc in cl_fmt.commitlog_message.subcons]
    start, stop = names.index("born_host"), names.index("body_length") + 1
    out = []
    for sc in cl_fmt.commitlog_message.subcons[start:stop]:
        inner = sc.subcon
        if isinstance(inner, construct.IfThenElse):
            v6 = born_v6 if sc.name == "born_host" else store_v6
            out.append(struct_format(inner.thensubcon if v6 else inner.elsesubcon))
        else:
            out.append(struct_format(inner))
    return "".join(out)


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
TIMERWHEEL_SLOT = declared(timer_fmt.timerwheel_slot)
