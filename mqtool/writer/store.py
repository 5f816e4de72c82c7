"""A whole store written the way a broker writes it: append, assign queue offsets, dispatch;
the CommitLog plain or in DLedger mode (from the start, or switched to later)."""
from __future__ import annotations

from pathlib import Path

from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..formats import consumequeue as cq_fmt
from ..formats import indexfile as idx_fmt
from ..property_order import PRODUCER_UNIQ_KEY_FIRST, PropertyInsertion
from ..codec import BLANK_RECORD
from ..formats import dledger as dl_fmt
from .commitlog import CommitLogWriter
from .dledger import DLedgerWriter
from .index import IndexWriter
from .queues import BatchConsumeQueueWriter, ConsumeQueueWriter
from .records import (APPENDED_BATCH_PROPERTIES, CLASSIC_BATCH_LAYOUTS, Message, encode_message,
                      encode_properties, host_flags, message_magic)
from .small_files import checkpoint_bytes


class StoreWriter:
    """Writes a whole store the way a broker does: append to the CommitLog, assign queue
    offsets (topicQueueTable), dispatch to ConsumeQueues and IndexFiles, write the checkpoint."""

    def __init__(self, root: Path, *, commitlog_file_size: int = 1024 ** 3,
                 cq_units_per_file: int = cq_fmt.DEFAULT_CQ_UNITS_PER_FILE,
                 index_slots: int = idx_fmt.DEFAULT_SLOT_COUNT,
                 index_entries: int = idx_fmt.DEFAULT_ENTRY_COUNT,
                 broker_version: int = 4, prop_crc: bool = False, index: bool = True,
                 batch_topics: frozenset[str] = frozenset(),
                 bcq_units_per_file: int | None = None,
                 property_insertion: PropertyInsertion = PRODUCER_UNIQ_KEY_FIRST,
                 dledger_self_id: str | None = None, dledger_term: int = 0,
                 classic_batches: str = APPENDED_BATCH_PROPERTIES,
                 commitlog_dirs: list[Path] | None = None):
        if classic_batches not in CLASSIC_BATCH_LAYOUTS:
            raise ValueError(f"classic_batches must be one of {', '.join(CLASSIC_BATCH_LAYOUTS)}, "
                             f"not {classic_batches!r}")
        # a classic batch's properties appended to each message (up to 5.3.3) or not (5.3.4+)
        self.classic_batches = classic_batches
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.broker_version = broker_version
        self.prop_crc = prop_crc
        self.commitlog_file_size = commitlog_file_size
        # enableDLegerCommitLog: the records go into DLedger entries (data files as large as
        # CommitLog files, mappedFileSizeCommitLog) instead of commitlog/
        self.commitlog: CommitLogWriter | DLedgerWriter = (
            CommitLogWriter(self.root / "commitlog", commitlog_file_size,
                            directories=commitlog_dirs)
            if dledger_self_id is None else
            DLedgerWriter(self.root / f"{dl_fmt.DLEDGER_DIR_PREFIX}{dledger_self_id}",
                          commitlog_file_size, term=dledger_term))
        self.consume_queues = ConsumeQueueWriter(self.root / "consumequeue", cq_units_per_file)
        # topics with queue.type=BatchCQ dispatch into batchconsumequeue/ instead
        self.batch_topics = frozenset(batch_topics)
        # mapperFileSizeBatchConsumeQueue is its own setting; by default as many units as a CQ file
        self.batch_consume_queues = BatchConsumeQueueWriter(
            self.root / "batchconsumequeue",
            cq_units_per_file if bcq_units_per_file is None else bcq_units_per_file)
        self.property_insertion = property_insertion
        self.index = IndexWriter(self.root / "index", index_slots, index_entries, enabled=index)
        self._tags_codes: dict[str, int] = {}
        self.topic_queue_table: dict[str, int] = {}
        self.last_store_timestamp = 0

    def append(self, msg: Message) -> tuple[int, int, int]:
        """Append one message; returns (commitlog offset, size, queue offset)."""
        tran = cl_fmt.transaction_type(msg.sys_flag)
        key = f"{msg.topic}-{msg.queue_id}"
        if msg.queue_offset is not None:
            queue_offset = msg.queue_offset
        elif tran in (cl_fmt.TRANSACTION_PREPARED_TYPE, cl_fmt.TRANSACTION_ROLLBACK_TYPE):
            queue_offset = 0
        else:
            queue_offset = self.topic_queue_table.get(key, 0)
        inner_num = 1
        if msg.sys_flag & cl_fmt.INNER_BATCH_FLAG:
            # the broker numbers the batch's messages from the queue offset it assigns
            if msg.raw_properties is None:
                msg.properties = {**msg.properties, "INNER_BASE": str(queue_offset)}
                stated = msg.properties
            else:
                stated = codecs.decode_properties(msg.raw_properties)
            inner_num = max(1, codecs.batch_position(stated, queue_offset)[1])
        magic = message_magic(msg.topic, self.broker_version)
        props = encode_properties(msg, self.prop_crc, self.broker_version,
                                  self.property_insertion, self.classic_batches)
        length = cl_fmt.message_length(magic, host_flags(msg), len(msg.body or b""),
                                       len(msg.topic.encode("utf-8")), len(props))
        offset = self.commitlog.reserve(length)
        record = encode_message(msg, offset, queue_offset, magic=magic, properties=props,
                                prop_crc=self.prop_crc)
        self.commitlog.write(offset, record)
        if tran not in (cl_fmt.TRANSACTION_PREPARED_TYPE, cl_fmt.TRANSACTION_ROLLBACK_TYPE):
            self.topic_queue_table[key] = queue_offset + inner_num
        self.last_store_timestamp = max(self.last_store_timestamp, msg.store_timestamp)
        return offset, len(record), queue_offset

    def switch_to_dledger(self, self_id: str, term: int = 0) -> int:
        """What a broker's first start in DLedger mode does to a plain store: a plain blank at
        the plain write position closes the last plain file, and DLedger's data begins at its
        end (dividedCommitlogOffset), entry index 0. Returns dividedCommitlogOffset."""
        plain = self.commitlog
        if isinstance(plain, DLedgerWriter):
            raise ValueError("the CommitLog is in DLedger mode already")
        write_position = plain.offset
        remaining = -write_position % plain.file_size      # 0: the last plain file is full
        if remaining:
            plain.write(write_position, BLANK_RECORD.pack(remaining, cl_fmt.BLANK_MAGIC_CODE))
        divided = write_position + remaining
        plain.close()
        self.commitlog = DLedgerWriter(self.root / f"{dl_fmt.DLEDGER_DIR_PREFIX}{self_id}",
                                       plain.file_size,
                                       start_offset=divided, term=term)
        return divided

    def dispatch(self, topic: str, queue_id: int, offset: int, size: int, sys_flag: int,
                 queue_offset: int, store_timestamp: int, properties: dict[str, str]) -> None:
        tran = cl_fmt.transaction_type(sys_flag)
        if tran in (cl_fmt.TRANSACTION_NOT_TYPE, cl_fmt.TRANSACTION_COMMIT_TYPE):
            tags = properties.get("TAGS")
            if topic == codecs.SCHEDULE_TOPIC or not tags:
                code = codecs.tags_code(topic, properties, store_timestamp)
            else:
                code = self._tags_codes.get(tags)
                if code is None:
                    code = self._tags_codes[tags] = codecs.tags_code(topic, properties,
                                                                     store_timestamp)
            if topic in self.batch_topics:
                self.batch_consume_queues.put(topic, queue_id, offset, size, code,
                                              store_timestamp,
                                              *codecs.batch_position(properties, queue_offset))
            else:
                self.consume_queues.put(topic, queue_id, offset, size, code, queue_offset)
        self.index.build_index(topic, offset, sys_flag, store_timestamp, properties)

    def put(self, msg: Message) -> tuple[int, int, int]:
        """Append and dispatch, as a running broker does."""
        offset, size, queue_offset = self.append(msg)
        self.dispatch(msg.topic, msg.queue_id, offset, size, msg.sys_flag, queue_offset,
                      msg.store_timestamp, self.stored_properties(msg))
        return offset, size, queue_offset

    def stored_properties(self, msg: Message) -> dict[str, str]:
        """The properties the stored record decodes to (what the broker dispatches and indexes):
        a classic batch's appended map wins over the message's own (the decoder keeps the last
        of a repeated name)."""
        if msg.raw_properties is not None:
            return codecs.decode_properties(msg.raw_properties)
        if msg.batch_properties is not None and self.classic_batches == APPENDED_BATCH_PROPERTIES:
            return {**msg.properties, **msg.batch_properties}
        return dict(msg.properties)

    def write_checkpoint(self, physic: int, logics: int, index: int | None = None,
                         master_flushed: int = 0, confirm_phy: int = 0) -> None:
        index = self.index.index_msg_timestamp if index is None else index
        (self.root / "checkpoint").write_bytes(
            checkpoint_bytes(physic, logics, index, master_flushed, confirm_phy))

    def close(self) -> None:
        self.commitlog.close()
        self.consume_queues.close()
        self.batch_consume_queues.close()
        self.index.close()
