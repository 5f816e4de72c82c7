"""Small store files built whole: the checkpoint; DLedger's index unit, checkpoint and currterm;
controller mode's epoch checkpoint and broker identity."""
from __future__ import annotations

from .. import codec as _codec
from ..formats import checkpoint as ckpt_fmt
from ..formats import dledger as dl_fmt
from ..formats import epoch as epoch_fmt


def dledger_index_unit_bytes(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    """One DLedger index unit (DLedgerEntryCoder.encodeIndex)."""
    return _codec.DLEDGER_INDEX_UNIT.pack(magic, pos, size, index, term)


def checkpoint_bytes(physic: int, logics: int, index: int, master_flushed: int = 0,
                     confirm_phy: int = 0) -> bytes:
    return ckpt_fmt.checkpoint.build(dict(
        physic_msg_timestamp=physic, logics_msg_timestamp=logics, index_msg_timestamp=index,
        master_flushed_offset=master_flushed, confirm_phy_offset=confirm_phy,
        padding=b"\0" * (ckpt_fmt.CHECKPOINT_SIZE - 40)))


def dledger_checkpoint_bytes(committed_index: int, end_index: int) -> bytes:
    """``dledger-<selfId>/checkpoint`` (and ``.bak``, its previous content) as DLedger persists
    it (-1 before the first entry)."""
    return dl_fmt.format_properties_text({dl_fmt.COMMITTED_INDEX_KEY: committed_index,
                                          dl_fmt.END_INDEX_KEY: end_index}).encode()


def dledger_currterm_bytes(vote_leader: str, term: int) -> bytes:
    """``dledger-<selfId>/currterm`` as MemberState persists it."""
    return dl_fmt.format_properties_text({dl_fmt.VOTE_LEADER_KEY: vote_leader,
                                          dl_fmt.CURR_TERM_KEY: term}).encode()


def epoch_checkpoint_bytes(entries: list[tuple[int, int]]) -> bytes:
    """``epochFileCheckpoint`` as EpochFileCache's CheckpointFile writes it."""
    return epoch_fmt.format_epoch_text(entries).encode("utf-8")


def broker_identity_bytes(cluster: str, broker_name: str, broker_id: int) -> bytes:
    """``brokerIdentity`` as BrokerMetadata writes it."""
    return epoch_fmt.format_broker_identity(cluster, broker_name, broker_id).encode("utf-8")
