"""The CommitLog scanner every command shares.

It walks segment files on a read-only mmap with ``struct`` codecs derived from the construct
declarations in :mod:`mqtool.formats.commitlog`, and yields, in offset order:

* :class:`MessageRecord` - a message, with its integrity flags (body CRC, property CRC,
  self-recorded PHYSICALOFFSET vs real position);
* :class:`BlankRecord` - the end-of-file filler; the rest of the file is not data;
* :class:`UnwrittenTail` - zeros where a record should start: the end of written data;
* :class:`CorruptRegion` - bytes that are not a record the broker would accept (bad magic,
  declared vs computed length, a record running past the file end). Without ``resync`` the scan
  of that file stops here, as the broker's does; with it the scanner resynchronises on the next
  plausible record (magic, PHYSICALOFFSET equal to its position, consistent length, body CRC).

Only records that pass the cheap checks are decoded by the fast path; anything else is handed
to the interpreted construct declaration so the reported error names the failing field.

:func:`scan_buffer_batches` / :func:`scan_segment_batches` yield the same events with runs of
records as :class:`RecordBatch` columns (numpy), decoded a run at a time; ``scan_buffer`` stays
the reference they are tested against, and decodes every record the batch path refuses.

Both CommitLog layouts go through the same functions: a :class:`~mqtool.store.Segment` says
whether its records are back to back (plain) or each inside a DLedger entry (48-byte header in
front, :mod:`mqtool.formats.dledger`). For DLedger data the scan steps from entry to entry, checks
each header as the broker's DLedger recovery does (magic, pos = its own offset, size = header +
body, the body is exactly one record) and decodes the record behind it; events carry the same
offsets as in plain mode (a record's offset is entry pos + 48, the broker's commitLogOffset; a
corrupt region starts at the entry). The buffer-level functions take ``layout``.

Read the modules in this order: :mod:`.records` (the events, one record decoded, the reference
walk :func:`scan_buffer`), :mod:`.batches` (the same walk a run of records at a time, as numpy
columns), :mod:`.segments` (whole files and stores: :class:`Scanner`, reads by offset).
"""
from __future__ import annotations

from ..formats import commitlog as fmt  # noqa: F401  (callers read scan.fmt)
from .records import (BlankRecord, CorruptRegion, EntryHeader, HEADER, MIDDLE, MIN_MESSAGE_SIZE,
                      MessageRecord, ScanEvent, UnwrittenTail, decode_message, entry_fields,
                      entry_damage, entry_header_at, entry_problem, explain_corruption,
                      find_sync_point, framed_record,
                      first_int, plausible_entry_at, plausible_record_at, scan_buffer)
from .batches import (FLAG_FALSE, FLAG_NONE, FLAG_TRUE, RecordBatch, TopicTable, _COLUMNS,
                      expand_batches, scan_buffer_batches)
from .segments import (Scanner, message_at, read_body, read_record_bytes, scan_segment,
                       scan_segment_batches)
