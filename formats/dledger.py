"""DLedger-mode CommitLog (openmessaging DLedger ``DLedgerEntry``, ``DLedgerEntryCoder``,
``DLedgerMmapFileStore``, ``MemberState``), as a RocketMQ broker with
``enableDLegerCommitLog=true`` leaves it in ``<store>/dledger-<selfId>/``.

Layout of ``dledger-<selfId>/``:

* ``data/<20-digit offset>`` - data files (default 1 GiB; the file name is the offset of its first
  byte). Each holds entries back to back; an entry is a 48-byte header (``entry_header``) followed
  by one complete RocketMQ CommitLog record (:mod:`.commitlog`) of ``body_size`` bytes. A file
  whose next entry does not fit ends in ``end_of_file_blank``: the int -1, then the number of
  bytes left in the file, then zeros. DLedger preallocates no empty next file.
* ``index/<20-digit offset>`` - the DLedger index: one ``index_unit`` per entry, unit ``n`` (the
  entry with index n) at byte ``n * 32`` of the index space; one file of 5,242,880 units.
* ``checkpoint`` (and ``checkpoint.bak``, the previous content) and ``currterm`` - Java
  properties text, see :func:`parse_properties_text`.

Offsets: ``pos`` is the entry's absolute offset in the data space (file base + position in the
file). The RocketMQ record inside starts ``ENTRY_HEADER_SIZE`` bytes later, and that is the
offset the broker calls commitLogOffset (the record's PHYSICALOFFSET, ConsumeQueue units,
offsetMsgId, IndexFile entries). The record's own TOTALSIZE excludes the entry header.

Upgraded stores: a broker that ran with a plain CommitLog first keeps ``commitlog/`` below
``dividedCommitlogOffset`` (the end of the last plain file); the first data file is named by that
offset, its first entry has index 0 and ``pos`` = dividedCommitlogOffset.

The 4.9.8 broker writes ``channel``, ``chain_crc`` and ``body_crc`` as 0 and never checks a CRC
of any kind in DLedger mode (not even the record's BODYCRC).
"""
from __future__ import annotations

from construct import Const, Int32sb, Int64sb, Struct

ENTRY_MAGIC = 1                     # DLedgerEntry magic (the only one 0.3.1.2 writes)
BLANK_MAGIC = -1                    # MmapFileList.BLANK_MAGIC_CODE
MIN_BLANK_LENGTH = 8                # MmapFileList.MIN_BLANK_LEN: magic + bytes left
ENTRY_HEADER_SIZE = 48              # DLedgerEntry.BODY_OFFSET
POS_FIELD_OFFSET = 24               # DLedgerEntry.POS_OFFSET: where ``pos`` sits in the header
INDEX_UNIT_SIZE = 32                # DLedgerMmapFileStore.INDEX_UNIT_SIZE
INDEX_UNITS_PER_FILE = 5_242_880    # DLedgerConfig default indexFileSize / 32
INDEX_FILE_SIZE = INDEX_UNITS_PER_FILE * INDEX_UNIT_SIZE
DEFAULT_DATA_FILE_SIZE = 1024 ** 3  # the broker sizes data files as mappedFileSizeCommitLog
DLEDGER_DIR_PREFIX = "dledger-"     # <storePathRootDir>/dledger-<selfId>
DATA_DIR, INDEX_DIR = "data", "index"
CHECKPOINT_FILE, CURRTERM_FILE = "checkpoint", "currterm"
# checkpoint keys (DLedgerMmapFileStore) and currterm keys (MemberState)
COMMITTED_INDEX_KEY, END_INDEX_KEY = "committedIndex", "endIndex"
CURR_TERM_KEY, VOTE_LEADER_KEY = "currTerm", "voteLeader"

# The header in front of every entry body (DLedgerEntryCoder.encode; magic always first).
entry_header = Struct(
    "magic" / Int32sb,          # ENTRY_MAGIC
    "size" / Int32sb,           # whole entry: ENTRY_HEADER_SIZE + body_size
    "index" / Int64sb,          # 0, 1, 2, ... in write order (ledger index)
    "term" / Int64sb,           # election term of the leader that wrote it; never decreases
    "pos" / Int64sb,            # absolute offset of this header in the data space
    "channel" / Int32sb,        # reserved, 0
    "chain_crc" / Int32sb,      # unused, 0
    "body_crc" / Int32sb,       # unused by RocketMQ's DLedger 0.3.1.2 (0)
    "body_size" / Int32sb,      # the RocketMQ record's length (its TOTALSIZE)
)
assert entry_header.sizeof() == ENTRY_HEADER_SIZE

# The tail of a data file whose next entry did not fit (MmapFileList.append): magic first, then
# the number of bytes from here to the end of the file (this blank included), then zeros.
end_of_file_blank = Struct(
    "magic" / Const(BLANK_MAGIC, Int32sb),
    "bytes_left" / Int32sb,
)
assert end_of_file_blank.sizeof() == MIN_BLANK_LENGTH

# One DLedger index unit (DLedgerEntryCoder.encodeIndex); an all-zero unit is "not written".
index_unit = Struct(
    "magic" / Int32sb,          # the entry's magic
    "pos" / Int64sb,            # the entry's pos
    "size" / Int32sb,           # the entry's size (header included)
    "index" / Int64sb,          # the entry's index (= unit number)
    "term" / Int64sb,           # the entry's term
)
assert index_unit.sizeof() == INDEX_UNIT_SIZE


def record_offset(entry_pos: int) -> int:
    """The commitLogOffset of the RocketMQ record inside the entry at ``entry_pos``."""
    return entry_pos + ENTRY_HEADER_SIZE


def entry_pos_of(commitlog_offset: int) -> int:
    """The inverse of :func:`record_offset`."""
    return commitlog_offset - ENTRY_HEADER_SIZE


def parse_properties_text(text: str) -> dict[str, str]:
    """``checkpoint`` (``committedIndex=N`` / ``endIndex=N``) and ``currterm``
    (``voteLeader=<selfId>`` / ``currTerm=N``) as written through java.util.Properties:
    ``key=value`` lines; ``#``/``!`` comment lines and blank lines carry nothing. Values stay
    text (the caller decides what a garbled number means)."""
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        values[key.strip()] = value.strip()
    return values


def format_properties_text(values: dict[str, object]) -> str:
    """The inverse of :func:`parse_properties_text` for the two files DLedger writes, keys in the
    order given (the broker writes committedIndex, endIndex and voteLeader, currTerm)."""
    return "".join(f"{key}={value}\n" for key, value in values.items())
