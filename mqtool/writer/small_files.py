"""Small store files built whole: the checkpoint, a DLedger index unit."""
from __future__ import annotations

from .. import codec as _codec
from ..formats import checkpoint as ckpt_fmt


def dledger_index_unit_bytes(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    """One DLedger index unit (DLedgerEntryCoder.encodeIndex)."""
    return _codec.DLEDGER_INDEX_UNIT.pack(magic, pos, size, index, term)


def checkpoint_bytes(physic: int, logics: int, index: int, master_flushed: int = 0,
                     confirm_phy: int = 0) -> bytes:
    return ckpt_fmt.checkpoint.build(dict(
        physic_msg_timestamp=physic, logics_msg_timestamp=logics, index_msg_timestamp=index,
        master_flushed_offset=master_flushed, confirm_phy_offset=confirm_phy,
        padding=b"\0" * (ckpt_fmt.CHECKPOINT_SIZE - 40)))
