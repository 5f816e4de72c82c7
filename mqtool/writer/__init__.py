"""The one writer of store files: CommitLog records, ConsumeQueue units, IndexFiles, checkpoint.

It reproduces the broker's own write path (``CommitLog.doAppend`` with its end-of-file blank,
``ConsumeQueue.putMessagePositionInfo`` with pre-blank units, ``IndexService.buildIndex`` /
``IndexFile.putKey`` with roll-over) so that the fixture forge writes stores laid out exactly as a
broker lays them out, and repair commands regenerate files byte-identical to the broker's.
Records are built by the construct declarations of :mod:`mqtool.formats`.

Modules, in the order to read them:

* :mod:`.records` - the :class:`Message` a broker is about to store and its record bytes.
* :mod:`.files` - file names, durable writes, sparse files opened for update.
* :mod:`.commitlog` - :class:`CommitLogWriter`: records and end-of-file blanks.
* :mod:`.dledger` - :class:`DLedgerWriter`: the same records inside DLedger entries, with the
  DLedger index (a DLedger-mode broker's CommitLog).
* :mod:`.queues` - ConsumeQueue and BatchConsumeQueue units, the dispatch rule for them.
* :mod:`.index` - :class:`IndexWriter`: IndexFile keys, one by one or in bulk.
* :mod:`.small_files` - the checkpoint, DLedger's checkpoint and currterm, controller mode's
  epoch checkpoint and broker identity: files built whole.
* :mod:`.store` - :class:`StoreWriter`: a whole store, appended and dispatched as a broker does.
* :mod:`.timer` - :class:`TimerWriter`: the 5.x timer store.
"""
from __future__ import annotations

from .records import (APPENDED_BATCH_PROPERTIES, CLASSIC_BATCH_LAYOUTS, OWN_PROPERTIES_ONLY,
                      Message, client_inner_message, encode_message, encode_properties,
                      host_flags, inner_batch_message, message_magic)
from .files import (atomic_write, fsync_dir, fsync_path, index_file_name, offset_file_name,
                    open_existing_or_zero)
from .commitlog import CommitLogWriter
from .dledger import DLedgerWriter
from .queues import BatchConsumeQueueWriter, ConsumeQueueWriter, dispatch_consume_queue
from .index import IndexWriter
from .small_files import (broker_identity_bytes, checkpoint_bytes, dledger_checkpoint_bytes,
                          dledger_currterm_bytes, dledger_index_unit_bytes,
                          epoch_checkpoint_bytes)
from .store import StoreWriter
from .timer import TimerWriter

__all__ = ["APPENDED_BATCH_PROPERTIES", "CLASSIC_BATCH_LAYOUTS", "OWN_PROPERTIES_ONLY", "Message", "client_inner_message", "encode_message", "encode_properties",
           "host_flags", "inner_batch_message", "message_magic", "atomic_write", "fsync_dir",
           "fsync_path", "index_file_name", "offset_file_name", "open_existing_or_zero",
           "CommitLogWriter", "DLedgerWriter", "dledger_checkpoint_bytes",
           "dledger_currterm_bytes", "BatchConsumeQueueWriter", "ConsumeQueueWriter",
           "dispatch_consume_queue", "IndexWriter", "checkpoint_bytes",
           "dledger_index_unit_bytes", "StoreWriter", "TimerWriter", "epoch_checkpoint_bytes",
           "broker_identity_bytes"]
