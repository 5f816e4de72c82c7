"""Read-only views of a store: the ``info`` summary and the ``dump`` record streams.

Everything here returns plain JSON-ready values (dicts of str/int/bool/None/lists) so the CLI,
``query``/``export`` and the Spark jobs can share them:

* :func:`store_info` - one dict describing the files, the CommitLog scan, the topic/queue table
  (from the CommitLog and from the ConsumeQueues), checkpoint, abort/lock, configs, geometry;
* :func:`message_to_dict` - the flat record of one CommitLog message (bodies decompressed,
  truncated and encoded on request);
* :func:`dump_path` - the records of a whole store or of any single store file, as dicts with a
  ``record_type`` (``commitlog/message``, ``consumequeue/unit``, ``index/entry``, ...).

Files are only ever opened ``"rb"`` or mapped with ``ACCESS_READ`` (through
:class:`mqtool.store.MappedFile`). Fixed-size units are decoded with numpy dtypes derived from
the construct declarations, so there is no second description of any format here.

Modules, in the order to read them:

* :mod:`.info` - :func:`store_info`.
* :mod:`.dump` - :func:`dump_path`: which kind a path is, and its record stream.
* :mod:`.messages` - CommitLog messages: bodies, :func:`message_to_dict`, the filter.
* :mod:`.queues` - ConsumeQueue and BatchConsumeQueue units, the per-queue summary.
* :mod:`.index` - IndexFile header, slots and entries.
* :mod:`.small_files` - checkpoint, abort, lock, configs.
* :mod:`.records` - the record types and the time codecs all of them use.
"""
from __future__ import annotations

from .records import (RT_ABORT, RT_BCQ_END, RT_BCQ_PARTIAL, RT_BCQ_UNIT, RT_BLANK, RT_CHECKPOINT,
                      RT_CONFIG, RT_CORRUPT, RT_CQ_END, RT_CQ_PARTIAL, RT_CQ_UNIT, RT_INDEX_ENTRY,
                      RT_INDEX_HEADER, RT_INDEX_NOTE, RT_INDEX_SLOT, RT_LOCK, RT_MESSAGE,
                      RT_RDB_CHECKPOINT, RT_RDB_OFFSET, RT_RDB_PROBLEM, RT_RDB_UNIT,
                      RT_UNWRITTEN, ms_to_iso, parse_time)
from .messages import (BODY_MODES, MAX_DECOMPRESSED_BODY, DecodedBody, MessageFilter,
                       decompress_body, encode_body, inner_message_dicts, iter_commitlog_records,
                       may_have_system, message_to_dict, system_object, system_reads_body,
                       unwrap_message_dict)
from .queues import (BCQ_DTYPE, CQ_DTYPE, iter_batch_consume_queue_file, iter_consume_queue_file,
                     queue_summary)
from .index import (INDEX_ENTRY_DTYPE, INDEX_SLOT_DTYPE, index_geometry, index_header_dict,
                    iter_index_file, read_index_header)
from .small_files import CHECKPOINT_TIME_FIELDS, checkpoint_dict, config_dict, small_file_dict
from .dump import DUMPABLE_KINDS, DumpOptions, dump_path, path_kind
from .info import KNOWN_ROOT_ENTRIES, store_info

__all__ = ["RT_ABORT", "RT_BCQ_END", "RT_BCQ_PARTIAL", "RT_BCQ_UNIT", "RT_BLANK", "RT_CHECKPOINT",
           "RT_CONFIG", "RT_CORRUPT", "RT_CQ_END", "RT_CQ_PARTIAL", "RT_CQ_UNIT", "RT_INDEX_ENTRY",
           "RT_INDEX_HEADER", "RT_INDEX_NOTE", "RT_INDEX_SLOT", "RT_LOCK", "RT_MESSAGE",
           "RT_RDB_CHECKPOINT", "RT_RDB_OFFSET", "RT_RDB_PROBLEM", "RT_RDB_UNIT", "RT_UNWRITTEN", "ms_to_iso", "parse_time", "BODY_MODES", "MAX_DECOMPRESSED_BODY",
           "DecodedBody", "MessageFilter", "decompress_body", "encode_body",
           "iter_commitlog_records", "message_to_dict", "inner_message_dicts",
           "unwrap_message_dict", "may_have_system", "system_object",
           "system_reads_body", "BCQ_DTYPE", "CQ_DTYPE",
           "iter_batch_consume_queue_file", "iter_consume_queue_file", "queue_summary",
           "INDEX_ENTRY_DTYPE", "INDEX_SLOT_DTYPE", "index_geometry", "index_header_dict",
           "iter_index_file", "read_index_header", "CHECKPOINT_TIME_FIELDS", "checkpoint_dict",
           "config_dict", "small_file_dict", "DUMPABLE_KINDS", "DumpOptions", "dump_path",
           "path_kind", "KNOWN_ROOT_ENTRIES", "store_info"]
