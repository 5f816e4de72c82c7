"""Hand-written prose of the man pages; man/generate.py adds SYNOPSIS and OPTIONS from the code.

Keys are command paths: () is mqtool(1) itself, ("dump",) is mqtool-dump(1)."""

COMMON_EXIT = """\
0 success: nothing wrong found, or the command did what was asked.

1 errors found (verify), or a repair that had to drop data.

2 bad usage, or input that cannot be read as a store or a store file (one line on stderr).

3 refused: a live process (a running broker) holds the store's lock file."""

SEE_ALSO_EXTRA = []

_GEOMETRY = """\
Geometry is inferred from the files: the CommitLog file size from the segments (stores with
1 MiB or 64 MiB files exist; 1 GiB is only the broker's default), ConsumeQueue units per file
from the most common queue file size, IndexFile slots and entries from the index file size
(assuming the broker's 1:4 ratio). A queue file size above the broker's default (300,000 units)
is taken only when at least two files have it, it is a whole number of units and a broker can
map it; otherwise the default applies and the odd file is a CQ_FILE_SIZE finding. The
--commitlog-file-size, --cq-units, --index-slots and --index-entries options override what was
inferred."""

PAGES = {
    (): {
        "summary": "forensic and recovery toolkit for Apache RocketMQ broker stores",
        "description": """\
mqtool reads, verifies and repairs the on-disk store of an Apache RocketMQ broker (4.9.x and
5.x, file-based CommitLog and ConsumeQueue): CommitLog segments, ConsumeQueue and
BatchConsumeQueue files, IndexFiles, the checkpoint, abort and lock files and the config JSON.
It needs no running broker.

Read-only commands (info, dump, verify) never open a store file for writing and work on a
read-only copy. Data goes to stdout (a table on a terminal, JSON with --json); messages,
summaries and progress bars go to stderr.

""" + _GEOMETRY,
        "examples": [
            ("One screen about a store:", "mqtool info /var/rocketmq/store"),
            ("Is it damaged, and what would the broker drop on its next start?",
             "mqtool verify /var/rocketmq/store"),
            ("Every message of a topic as JSON lines:",
             "mqtool dump --json --topic TopicTest /var/rocketmq/store"),
        ],
    },
    ("info",): {
        "summary": "summarise a RocketMQ store on one screen",
        "description": """\
Prints what a store holds: the inferred geometry; the store passport (which broker family
wrote the store: 4.x or 5.x, 5.1+ when V2 records exist, 5.2+ when records carry the
__CRC32# property CRC, 5.3.4+ (the store code after 5.3.3) when producer messages lack the
CLUSTER every send gets, as that code stores the messages of a classic batch, each with the
evidence: abort.bak, a PID in abort, checkpoint fields @24/@32, compaction/, timerlog/; in 5.x
controller mode the epochs of epochFileCheckpoint (or of its .bak when the broker would load
that) with their offset ranges and the broker identity (brokerIdentity:
cluster#brokerName#brokerId); and the inconsistencies among the files: CommitLog files of
different sizes, ConsumeQueue files that are not a multiple of 20, IndexFiles of different
geometry); CommitLog files with their sizes, offset
ranges, message counts and where each file's data ends (blank record, unwritten zeros or
damage); message counts by transaction type; topics and queues with message counts and
queue-offset ranges from the CommitLog beside the ConsumeQueue's own unit counts; IndexFile
headers; the checkpoint's fields as UTC times and raw milliseconds (4.x: three timestamps, 5.x
also masterFlushedOffset and confirmPhyOffset); whether an abort file says the last shutdown was
abnormal; whether a live process holds the lock file; a summary of config/*.json (fastjson with
unquoted integer keys; the .bak copy is used when the main file is empty or unreadable, and a
5.3.4+ broker deletes such a main file on load, which the summary says); one
line per consumer group: its queues and its lag in messages and bytes against the queues as
they are (mqtool-consumers(1) adds what the broker's next start does to each group).

The CommitLog is scanned without CRC checks (use verify for integrity).

DLedger-mode stores (enableDLegerCommitLog: no commitlog/, the records inside DLedger entries
under dledger-<selfId>/data/) and stores upgraded from a plain CommitLog to DLedger are read the
same way; the passport then names the layout and the DLedger ledger: first and last entry
(index, term), the committed index of the DLedger checkpoint and how far it lags the data,
currTerm, and for an upgraded store dividedCommitlogOffset. CommitLog offsets are the broker's
(a record's offset is its entry's pos + 48).

A 5.2+ store whose ConsumeQueues live in RocksDB (storeType=defaultRocksDB) is read through a
shadow copy of the database: each queue's units, minOffset and maxOffset as the broker's RocksDB
ConsumeQueue serves them (stale units past a queue's max entry counted apart), and the CQ
checkpoint; the passport names every RocksDB database of the store with its evidence.

""" + _GEOMETRY,
        "arguments": {"store": "A store root (the directory holding commitlog/, consumequeue/, "
                               "index/, checkpoint) or a bare CommitLog directory."},
        "output": """\
With --json, one JSON document with the keys root, layout, geometry, passport (family,
claims, recovery_rules, geometry, inconsistencies, layout, and dledger for a DLedger-mode
store), commitlog, consume_queues, topics,
index_files, checkpoint, abort, lock and config. Offsets are CommitLog byte offsets,
times are epoch milliseconds (the table also shows UTC).""",
        "examples": [
            ("Summary of the example store:", "mqtool info fixtures/rocketmq-4.9.8/clean-small/store"),
            ("One row per queue, as JSON:", "mqtool info --queues --json STORE"),
        ],
    },
    ("dump",): {
        "summary": "print the records of a RocketMQ store or store file",
        "description": """\
Given a store root, prints the CommitLog's messages in offset order; given one file, prints
what that file holds: a CommitLog segment (messages, the end-of-file blank record, the
unwritten tail, corrupt regions), a ConsumeQueue or BatchConsumeQueue file (units with their
queue offsets; pre-blank units and the end of valid units are marked), an IndexFile (header,
used slots and entries; --follow-slot walks one slot's chain and stops at loops or pointers past
indexCount), the checkpoint (fields with UTC times), abort, lock or a config file.

Messages can be filtered by topic, queue, CommitLog offset range, store time range, a KEYS item
or UNIQ_KEY. Compressed bodies (sysFlag 0x1) are decompressed, zlib, LZ4 and ZSTD alike (the lz4
and zstandard packages come with mqtool); a body that does not decompress is shown as stored and
body_decompress_error says why.

A record the broker would not accept (bad magic, lengths that do not add up, a record running
past the file end) ends that file's scan, as it ends the broker's; the dump goes on with the
next file. --resync instead continues at the next plausible record (magic, self-recorded offset
equal to its position, consistent lengths, matching body CRC).

Given consumequeue/ of a 5.2+ store whose ConsumeQueues live in RocksDB
(storeType=defaultRocksDB: CURRENT, MANIFEST-*, *.sst), prints every unit of the database
(topic, queue, queue offset, CommitLog offset, size, tagsCode, store time; status served, or
stale for a unit past its queue's max entry, which a truncation leaves and the broker never
serves), each queue's max/min entry and the CQ checkpoint (CHECKPOINT_TOPIC: the CommitLog offset
the queues are built to); a key or value that does not decode is a rocksdb-cq/problem record.
The database is read through a temporary shadow (its small files copied, its SSTs hard-linked):
nothing is written into the store. A database RocksDB cannot open or read (CURRENT naming a
missing MANIFEST, a torn or corrupted SST) is one line on stderr, exit 2.""",
        "arguments": {"path": "A store root, a single store file, or a RocksDB consumequeue/."},
        "output": """\
A table on a terminal; with --json one JSON object per line. Every object starts with
record_type (commitlog/message, commitlog/blank, commitlog/unwritten, commitlog/corrupt,
consumequeue/unit, batchconsumequeue/unit, index/header, index/slot, index/entry, checkpoint,
abort, lock, config, rocksdb-cq/unit, rocksdb-cq/offset, rocksdb-cq/checkpoint,
rocksdb-cq/problem) and file.

A commitlog/message object has file_offset, commitlog_offset (the real position),
total_size, magic_code, magic_version (V1 or V2), body_crc, body_crc_ok, queue_id, flag,
queue_offset, physical_offset (the self-recorded field), offset_ok, sys_flag, transaction,
born_timestamp, born_host, store_timestamp, store_host, reconsume_times,
prepared_transaction_offset, body_length, topic, properties, tags, keys, uniq_key, msg_id
(offsetMsgId), prop_crc_ok, body, body_encoding, body_stored_length and, where they apply,
body_compression, body_decompressed, body_decompress_error, body_truncated. Hosts are
written as the broker's MessageDecoder prints them (IPv6 in brackets).

Messages of system topics, or carrying system properties, also have a system object (kind
first): trace (RMQ_SYS_TRACE_TOPIC, rmq_sys_TRACE_DATA_*: contexts, each with type Pub,
SubBefore, SubAfter, EndTransaction or Recall and its fields: timestamp, group, topic, msg_id,
offset_msg_id, keys, cost_time, success, ...); pop-checkpoint, pop-ack and pop-batch-ack
(rmq_sys_REVIVE_LOG_*: start_offset, pop_time, invisible_time, revive_time, queue_offsets,
consumer_group, ack_offset(s), ...); delayed (SCHEDULE_TOPIC_XXXX) and timer
(rmq_sys_wheel_timer) with real_topic, real_queue_id and deliver_timestamp (a pop record waiting
in the timer wheel adds its decoded payload); retry and dlq (%RETRY%, %DLQ%: consumer_group,
reconsume_times); origin (ORIGIN_MESSAGE_ID, RETRY_TOPIC, DLQ_ORIGIN_TOPIC,
DLQ_ORIGIN_MESSAGE_ID, MAX_RECONSUME_TIMES) and priority (_SYS_MSG_PRIORITY_, 5.4). A body that
is not what its topic or tag claims gives a problem string instead of fields. Transaction
records: transaction-op (RMQ_SYS_TRANS_OP_HALF_TOPIC: half_offsets, the half-queue offsets its
body ends, bad_items, the items that are no number, ends_half_messages) and transaction-half
(RMQ_SYS_TRANS_HALF_TOPIC: real_topic, real_queue_id, producer_group, transaction_id,
check_times).

--broker-config and --commitlog-dirs read a CommitLog spread over several directories
(storePathCommitLog "a,b", readOnlyCommitLogStorePaths), in offset order.""",
        "examples": [
            ("Messages of one queue in a time window:",
             "mqtool dump --topic TopicTest --queue 1 --since 2026-11-21T10:00:00Z STORE"),
            ("A ConsumeQueue file:", "mqtool dump STORE/consumequeue/TopicTest/0/00000000000000000000"),
            ("Walk one hash slot of an IndexFile:",
             "mqtool dump --follow-slot 17 STORE/index/20261122005125786"),
            ("Bodies as stored (compressed), for checking body_crc:",
             "mqtool dump --json --no-decompress --body base64 STORE"),
        ],
    },
    ("fixture", "make"): {
        "summary": "write a deterministic RocketMQ store for tests and benchmarks",
        "description": """\
Writes a complete store laid out as a broker lays it out: CommitLog segments named by offset
with the end-of-file blank record, ConsumeQueues with the broker's dispatch rules, IndexFiles
with roll-over, the checkpoint, lock and config/*.json in fastjson's format. Everything goes
through mqtool's one store writer, which reproduces the 4.9.8 broker's bytes exactly.

The message mix follows the reference stores: several topics and queues, tags (some
non-ASCII, 10% none), KEYS with hot keys shared by many messages, UNIQ_KEY built like the
client's, user properties, delay-level messages in SCHEDULE_TOPIC_XXXX, transaction records
(PREPARED/COMMIT/ROLLBACK), zlib bodies, optional IPv6 hosts, V2 records and the property CRC
for 5.x. --classic-batch-ratio adds classic batches (putMessages: a record per message, stored
at once): up to 5.3.3 (--broker-version 5) the batch's UNIQ_KEY, WAIT and CLUSTER are appended
to every message's properties; --broker-version 5.3.4+ writes each message with its own
properties only, as the store code after 5.3.3 does. --crash leaves what a JVM halt leaves. --consumer-group NAME:LAG adds a group whose
committed offset is LAG messages behind every queue end (a negative LAG puts it past the end)
and writes subscriptionGroup.json. The same seed and options give byte-identical
stores. The directory must be new or empty.""",
        "arguments": {"directory": "Where to write the store (created if missing)."},
        "output": "One JSON document summarising what was written (messages, files, offsets, "
                  "topics and queues, checkpoint).",
        "examples": [
            ("A small store:", "mqtool fixture make /tmp/store --messages 2000 --seed 1"),
            ("A crashed 5.x store with long topics and the property CRC:",
             "mqtool fixture make /tmp/v5 -n 3000 --broker-version 5 --long-topic --prop-crc --crash"),
            ("Classic batches as the newest broker stores them:",
             "mqtool fixture make /tmp/v534 -n 2000 --broker-version 5.3.4+ --classic-batch-ratio 0.2"),
        ],
    },
    ("fixture", "damage"): {
        "summary": "inject one fault into a test store and describe it",
        "description": """\
Changes a store in place, on purpose: torn-tail (the second half of the last record zeroed),
bit-flip (one bit of a message body or header field), zero-range (a range of bytes spanning
records zeroed), truncate-file (a CommitLog file shortened), delete-file (a ConsumeQueue or
middle CommitLog file removed), stray-file (junk files in commitlog/ and consumequeue/),
stale-checkpoint (checkpoint timestamps moved ahead or behind), config-empty, config-truncate
and config-zeros (a config file, by default config/consumerOffset.json, emptied, cut short at
--offset or a seed-chosen size, or its bytes zeroed, as an OS crash leaves them; --file aims at
another one, a .bak included). The seed chooses the file,
record, byte and bit, so the same seed does the same damage. It refuses (exit 3) a store whose
lock file is held by a live process. Use it on copies only.""",
        "arguments": {"directory": "The store to damage."},
        "output": """\
One JSON object saying exactly what was done: kind, file, byte range, old and new bytes (hex,
shortened), and the affected records (CommitLog offset, topic, queue, queue offset).""",
        "examples": [
            ("Flip a body bit of a seed-chosen record:",
             "mqtool fixture damage /tmp/store --kind bit-flip --seed 3"),
        ],
    },
    ("verify",): {
        "summary": "check a RocketMQ store and predict what the broker's next start drops",
        "description": """\
First states the geometry and the store passport (which broker family wrote the store, with
the evidence, so the right broker's rules are applied). Then checks every file of a store and
reports findings, each with a stable code, a severity (error,
warning, info), the file, the byte offset in that file and one sentence:

CommitLog: records with a bad magic code (CL_BAD_MAGIC), a body CRC or 5.2+ property CRC that
does not match (CL_CRC_MISMATCH, CL_PROP_CRC_MISMATCH), a declared size that disagrees with its
fields (CL_LENGTH_MISMATCH), a record running past the file end (CL_TRUNCATED), a
self-recorded PHYSICALOFFSET other than the record's position (CL_OFFSET_MISMATCH), files of
the wrong size (CL_FILE_SIZE), gaps between files (CL_GAP), stray files (CL_STRAY_FILE),
plausible records beyond the end of written data (CL_STALE_DATA).

ConsumeQueues: units pointing past the CommitLog or between records (CQ_DANGLING), units whose
size, tagsCode, topic, queue or queue offset disagree with the record (CQ_MISMATCH), records
without their unit (CQ_MISSING), queue offsets that skip or repeat (CQ_QUEUE_GAP), files whose
size is not the geometry's (CQ_FILE_SIZE).

IndexFiles: inconsistent headers (IDX_HEADER), entries pointing nowhere or chains that loop or
point past indexCount (IDX_DANGLING), entries whose hash matches no key of their record
(IDX_HASH_MISMATCH), keys that cannot be found through their slot chain (IDX_MISSING_KEY).

5.x BatchConsumeQueues: units pointing nowhere (BCQ_DANGLING), disagreeing with their record
(BCQ_MISMATCH), not continuing each other's offsets (BCQ_GAP), partial units (BCQ_FILE_SIZE),
records of a batch topic that no unit references (BCQ_MISSING), inner batches whose body is torn
or disagrees with INNER_NUM/INNER_BASE (CL_INNER_BATCH).
5.x timer store: TimerLog units of the wrong size (TIMER_UNIT_SIZE), with invalid magic bits
(TIMER_MAGIC), linking forward (TIMER_PREV_POS), pointing past the CommitLog or at no record
(TIMER_DANGLING) or at a record that is no timer message due then (TIMER_MISMATCH); TimerLog
files of another size (TIMER_FILE_SIZE) or ending inside a unit (TIMER_TORN); a missing wheel or
one of the wrong size (TIMER_WHEEL_SIZE: the broker refuses to start); slots at the wrong index
or chaining units of another second (TIMER_SLOT_TIME), pointing nowhere (TIMER_SLOT_POINTER),
whose chain does not reach firstPos (TIMER_SLOT_CHAIN); pending units no slot leads to, even
after the broker's load re-links its last TimerLog file (TIMER_UNREACHABLE), or only then
(TIMER_WHEEL_BEHIND, a warning: the wheel was not flushed before a crash); pending timers whose message recovery truncates (TIMER_LOST); a missing,
short or ahead config/timercheck (TIMER_CKPT).
Transactions (stores with a RMQ_SYS_TRANS_HALF_TOPIC or RMQ_SYS_TRANS_OP_HALF_TOPIC queue): op
messages listing half-queue offsets where no half message is - expired, truncated, never written
(TXN_OP_DANGLING, a warning); COMMIT records whose preparedTransactionOffset points at no half
message (TXN_COMMIT_ORPHAN, a warning); op bodies with items that are not numbers, which the
broker's check reads as -1 and ignores (TXN_OP_BODY, a warning); half messages without
REAL_TOPIC, whose commit cannot reach any topic (TXN_HALF_NO_REAL_TOPIC). What each transaction
becomes: mqtool-transactions(1).
DLedger-mode stores (dledger-<selfId>/): every record is read inside its DLedger entry. Entry
headers the broker's DLedger recovery refuses (the log ends there): a magic other than 1
(DL_ENTRY_MAGIC), a pos field other than the entry's offset (DL_ENTRY_POS), a size other than
body size + 48 (DL_ENTRY_SIZE), an entry running past its data file (DL_ENTRY_TRUNCATED); the
records inside are checked with the CommitLog codes above. Besides, entries whose index does
not follow the previous one (DL_INDEX_SEQUENCE) or whose term goes down (DL_TERM_ORDER), index
units missing or disagreeing with their entry (DL_INDEX_UNIT), a DLedger checkpoint or currterm
that is missing, unreadable or ahead of the data (DL_CHECKPOINT), and commitlog/ and the
DLedger data not meeting at dividedCommitlogOffset (DL_LAYOUT). The body CRC is checked although
the broker never checks it in DLedger mode, and the prediction follows DLedger's own recovery.

5.x controller mode (epochFileCheckpoint and its .bak, read as the broker's CheckpointFile
reads them): a count, CRC or entry line that is not a number, on which the broker's start fails
(EPOCH_UNREADABLE); a count line that disagrees with the entry lines (EPOCH_COUNT) or a CRC line
that does not match them (EPOCH_CRC), on which the broker loads the .bak; epochs or start
offsets that do not increase (EPOCH_ORDER); an epoch starting past the CommitLog's end after
recovery (EPOCH_PAST_END) or where no message record starts (EPOCH_NOT_RECORD); an epoch that
ends before the first CommitLog file (EPOCH_EXPIRED, a warning); a .bak giving an epoch another
start offset (EPOCH_BAK, a warning). A repair that cuts the CommitLog below an epoch's start
cuts the epoch file as the broker's own truncation does (truncateSuffixByOffset; the old content
becomes the .bak, backed up like every change), and refuses (exit 2, nothing changed) where no
epoch would be left or the file is unusable.

A CommitLog spread over several directories (storePathCommitLog with ','-separated paths,
readOnlyCommitLogStorePaths) is read with --broker-config or --commitlog-dirs; the repairs
refuse such a store.

Store: checkpoint later than the newest message (CKPT_AHEAD) or missing (CKPT_MISSING), an
abort file (ABORT_PRESENT: the last shutdown was abnormal), a lock held by a live process
(LOCK_HELD), and RECOVERY_TRUNCATES when the broker's next start would drop written data.
ROCKSDB_PRESENT (info) names each RocksDB database of a 5.2+ store (a RocksDB ConsumeQueue, a
CombineConsumeQueue, RocksDB metadata under config/) with the files that show it. When the
ConsumeQueues live in RocksDB (read through a shadow copy, never in place) every served unit is
checked against the record it points at (CQ_DANGLING, CQ_MISMATCH: topic, queue, queue offset,
size, store time, tagsCode), entries that do not decode are CQ_MISMATCH, and only records below
where the next start dispatches again that no unit serves are CQ_MISSING. The prediction follows
the 5.2-5.3.3 RocksDB rules: an abnormal start begins at the newest CommitLog file whose first
record is at or before the CQ checkpoint (CHECKPOINT_TOPIC) and dispatches every record from
there; a truncation moves each queue's max entry back and leaves later units stale; the report
gives the units the start dispatches again, those it leaves served and stale, and the CQ
checkpoint after it (equal to the real broker's recovery on the reference RocksDB stores).

Then it states what the broker's next start does (4.9.x, 5.0-5.3.1, 5.3.2+ or 5.3.4+ rules;
normal recovery, or abnormal when an abort file exists): the start file, the CRC-checked scan,
processOffset, the messages and bytes dropped, the CommitLog files deleted, the ConsumeQueue
units truncated, where re-dispatch starts and which IndexFiles are deleted. The prediction
equals the real brokers' recovery on every reference store.

Damage after the first bad record does not stop the check: the scan resynchronises on the next
plausible record, so every damaged place is reported. --quick skips CRCs.

With --expect, verify compares its findings (code, file, offset) with an expectation file and
exits 0 exactly when they match, printing the missing and unexpected findings otherwise; CI
pipelines use this to pin a fixture's known damage.

""" + _GEOMETRY,
        "arguments": {"store": "A store root or a bare CommitLog directory."},
        "output": """\
A summary on stdout: the store and its geometry, the findings grouped by code with their first
locations, each error on its own line, and the recovery prediction. With --json, one JSON
document with the keys store, geometry, findings (code, severity, file, offset, message and,
where known, commitlog_offset, topic, queue_id, details), summary (errors, warnings, by_code)
recovery (mode, rules, start_file, process_offset, dropped messages and bytes, files
deleted, ConsumeQueue truncation, index files deleted) and passport (the writer family and
its evidence, as in mqtool-info(1)).""",
        "exit": """\
0 no error (warnings may be present).

1 errors found, or the findings do not match --expect.

2 bad usage, or input that cannot be read as a store.""",
        "examples": [
            ("Check the example store:", "mqtool verify fixtures/rocketmq-4.9.8/clean-small/store"),
            ("Pin the expected findings of a damaged fixture in CI:",
             "mqtool verify --json STORE > expected.json && mqtool verify --expect expected.json STORE"),
            ("A 5.x store recovered with forceVerifyPropCRC:",
             "mqtool verify --broker-version 5.3.2+ --force-verify-prop-crc STORE"),
        ],
    },
}


def _load_extra_pages() -> None:
    """Each command family may keep its prose in man/pages_<family>.py (a PAGES dict)."""
    import importlib
    from pathlib import Path

    for extra in sorted(Path(__file__).resolve().parent.glob("pages_*.py")):
        PAGES.update(importlib.import_module(extra.stem).PAGES)


_load_extra_pages()
