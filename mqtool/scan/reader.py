"""Reading CommitLog records by offset, for the answers of every lookup (mapped files, opened
once, read at random)."""
from __future__ import annotations

import mmap
import struct

from ..errors import MqtoolError
from .records import MessageRecord, decode_message
from ..store import CommitLog, MappedFile, Segment


def _random_access(data) -> None:
    """Tell the kernel a mapping is read at random: on a cold page cache a fault would
    otherwise read ahead far more of a 420 MB IndexFile than the one chain a lookup needs."""
    if isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_RANDOM"):
        try:
            data.madvise(mmap.MADV_RANDOM)
        except OSError:
            pass


# --- reading records by offset -------------------------------------------------------------------

class RecordReader:
    """Decodes records at given offsets, keeping each segment mapped between reads.
    ``random_access=False`` for look-ups that mostly move forward through the CommitLog (the
    records a TimerLog's units point at, millions on a busy broker), where the kernel's
    read-ahead helps instead of wasting reads."""

    def __init__(self, commitlog: CommitLog, random_access: bool = True):
        self.commitlog = commitlog
        self.random_access = random_access
        self._maps: dict[int, MappedFile] = {}

    def close(self) -> None:
        for mapped in self._maps.values():
            mapped.close()
        self._maps.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def buffer(self, seg: Segment):
        mapped = self._maps.get(seg.base_offset)
        if mapped is None:
            mapped = self._maps[seg.base_offset] = MappedFile(seg.path)
            if self.random_access:
                _random_access(mapped.data)
        return mapped.data

    def at(self, offset: int, check_crc: bool = False) -> tuple[MessageRecord | None, str]:
        """(record, "") or (None, why there is no record starting at ``offset``)."""
        if offset < 0:
            return None, f"offset {offset} is negative"
        seg = self.commitlog.segment_for(offset)
        if seg is None:
            return None, f"no CommitLog file holds offset {offset}"
        buf = self.buffer(seg)
        try:
            record = decode_message(buf, offset - seg.base_offset, len(buf), seg.base_offset,
                                    check_crc)
        except (MqtoolError, struct.error) as bad:
            return None, f"no message starts at offset {offset}: {getattr(bad, 'detail', bad)}"
        return record, ""

    def body(self, record: MessageRecord) -> bytes:
        if record.body_length <= 0:
            return b""
        seg = self.commitlog.segment_for(record.offset)
        start = record.body_position - seg.base_offset
        return bytes(self.buffer(seg)[start:start + record.body_length])
