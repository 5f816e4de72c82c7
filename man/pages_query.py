"""Man page prose of query, salvage, export and diff (loaded by man/pages.py)."""

_MESSAGE_FIELDS = """\
Each message object is the one mqtool dump --json prints (record_type commitlog/message, file,
file_offset, commitlog_offset, total_size, magic_code, magic_version, body_crc, body_crc_ok,
queue_id, flag, queue_offset, physical_offset, offset_ok, sys_flag, transaction,
born_timestamp, born_host, store_timestamp, store_host, reconsume_times,
prepared_transaction_offset, body_length, topic, properties, tags, keys, uniq_key, msg_id,
prop_crc_ok, body, body_encoding, body_stored_length, body_compression, body_decompressed,
body_decompress_error, body_truncated)"""

_FIELD_LIST = _MESSAGE_FIELDS.split("(", 1)[1].split(")")[0]

PAGES = {
    ("query",): {
        "summary": "find RocketMQ messages offline by id, key or queue position",
        "description": """\
The offline equivalents of mqadmin's queryMsgById, queryMsgByUniqueKey, queryMsgByKey,
queryMsgByOffset and the broker's getOffsetInQueueByTime, on a store no broker is running on.
Give exactly one of:

--msg-id ID: an offsetMsgId (32 hex digits for an IPv4 store host, 56 for IPv6) is the store
host and the CommitLog offset; the record at that offset is read and checked (its
PHYSICALOFFSET must be that offset).

--uniq-key ID: a UNIQ_KEY (the client's message id). The id holds milliseconds since the start
of some month in the producer's time zone; the IndexFiles whose time range meets one of the
windows this allows (every month of the store's span, every zone, an hour of clock skew) are
searched first, then the others. Every record carrying the id is returned: the
SCHEDULE_TOPIC_XXXX copy of a delayed message and its delivered copy, retries, transaction half
and commit records. Without --topic every topic the store knows (queue directories,
config/topics.json, the system topics) is tried.

--key K [--topic T] [--since TIME] [--until TIME] [--max N]: every message whose KEYS include
K, without the broker's 64-result cap; --max keeps the N most recently stored.

--traces (with any of the above) also lists the trace records of the messages found: the
messages of the trace topic (--trace-topic, default RMQ_SYS_TRACE_TOPIC) whose KEYS name their
UNIQ_KEY or offsetMsgId (the client's trace dispatcher sets them so), decoded into their
system.contexts; found_by is trace, or trace-key-only for a record found by the key whose
contexts do not name the message (a body that is no trace).

--topic T --queue Q --offset N: the ConsumeQueue unit of queue offset N (file
floor(N*20/fileSize)*fileSize, position N*20 minus the file start) and the message it points at;
pre-blank filler units and units past the queue's end are reported as such. On a store whose
ConsumeQueues live in RocksDB the unit is the database's (read through a shadow copy); a stale
unit past the queue's max entry is reported, not served.

--topic T --queue Q --time TIME: the queue offset whose message was stored nearest TIME, by the
broker's binary search (getOffsetInQueueByTime, 4.9). The broker chooses the ConsumeQueue file
by its modification time, which copying a store loses; mqtool takes the first file whose last
unit's message was stored at or after TIME instead.

The IndexFiles are read through a read-only memory map; a lookup touches the header, one hash
slot and that slot's chain, never the whole file. The key itself is not stored in an IndexFile,
only its hash, so every entry is checked against the real record: entries of other keys with the
same hash (collisions) and entries pointing at no such record (stale after a truncation) are
left out and counted. Where no IndexFile covers part of the CommitLog (no index, an index that
stops before the end of the data, IndexFiles deleted by an abnormal recovery) or a hash chain is
damaged (a loop, a pointer past indexCount or past the file, a pointer to a newer entry), that
part of the CommitLog is scanned instead, and a note on stderr says so. --scan skips the
IndexFiles altogether. ROLLBACK records are never indexed by the broker and are not returned.

--explain adds why the broker's own query would fail or return something else: the offsets
queryMessage would return on a broker started on this store (its recovery predicted as verify
does); messages past the CommitLog offset where that recovery truncates; messages whose only
index entries sit in IndexFiles an abnormal recovery deletes and does not rebuild; messages no
IndexFile holds; hash collisions, which the broker returns and which count toward its cap; the
64-entry cap; an index time outside the query's window (for --uniq-key: mqadmin searches from
the id's approximate time minus one second, read in the zone and month of the machine running
it); a chain the broker would walk forever; an offsetMsgId given where a UNIQ_KEY is meant, and
the reverse. For the UNIQ_KEY of a transactional message it names the half copies (indexed
under RMQ_SYS_TRANS_HALF_TOPIC, one per check that put the message back, with their half-queue
offsets and check times) and the COMMIT record (indexed under the real topic), and what
queryMessage returns for each topic: queryMsgByUniqueKey with the real topic shows the COMMIT
record, and finds nothing for a transaction never committed (open or rolled back).

--broker-compatible answers exactly as DefaultMessageStore.queryMessage(topic, key, 64, since,
until) does on a broker started on this store: IndexFiles only, newest file and entry first,
at most 64 entries, no collision filter, sorted ascending, duplicates kept (a message indexed
twice, or with a key repeated in its KEYS, comes twice), entries outside the readable CommitLog
skipped. The readable end is the recovery's processOffset (--broker-version,
--force-verify-prop-crc).""",
        "arguments": {"store_path": "A store root."},
        "output": """\
A table on a terminal. With --json one JSON object per message, then one query/summary object
(query, found, offsets, notes, scanned_ranges, index_problems, hash_collisions,
stale_index_entries, duplicate_index_entries and, per mode, the decoded id, the UNIQ_KEY's time
windows, the ConsumeQueue unit and queue bounds), then with --explain one query/explanation
object (recovery, broker_offsets per topic, reasons: each with reason, detail and offsets,
broker_finds_all).

""" + _MESSAGE_FIELDS + """, plus found_by (index, scan, msg-id, consume-queue or
broker-compatible) and index_entries (file, entry number, index time) for messages found through
an IndexFile.

Notes (the index was not usable, a range was scanned, collisions were dropped) go to stderr.""",
        "exit": """\
0 at least one message found.

1 nothing found (the query was well formed).

2 bad usage: a malformed id, an unknown topic or queue, input that cannot be read as a
store.""",
        "examples": [
            ("A message by the id the producer got back:",
             "mqtool query --msg-id 7F00000100002A9F0000000000001028 STORE"),
            ("By client message id, and why mqadmin cannot find it:",
             "mqtool query --uniq-key 0AC26B19D072E3CA828D46E686000001 --explain STORE"),
            ("Every message with a key in a time window, as JSON:",
             "mqtool query --json --key order-42 --topic TopicTest --since 2026-11-21T10:00:00Z "
             "STORE"),
            ("What the broker's queryMessage returns, exactly:",
             "mqtool query --broker-compatible --key order-42 --topic TopicTest STORE"),
            ("The message at queue offset 120 of TopicTest queue 1:",
             "mqtool query --topic TopicTest --queue 1 --offset 120 STORE"),
        ],
    },
    ("salvage",): {
        "summary": "get every intact message off a damaged RocketMQ store",
        "description": """\
Reads every byte of every CommitLog file once. After damage it resynchronises on the next
plausible record: a message magic code whose record has consistent lengths, a PHYSICALOFFSET
equal to its real position and a matching body CRC. Every intact message (lengths, position,
body CRC and, where present, the 5.2+ property CRC all agree) is written to --out, including the
messages at or past the point where the broker's next start truncates the CommitLog (the
recovery is predicted from the same pass, as verify predicts it; every message says whether it
lies beyond that point). --beyond-truncation writes only those: what a broker restart would
throw away. --include-damaged also writes records that decode but fail a check, marked.
--unconsumed-by GROUP writes only what that consumer group had not consumed, as mqtool
export --unconsumed-by selects it (the map still covers the whole CommitLog).

It also maps the CommitLog into islands, runs of intact messages, and holes, byte ranges that
hold no intact message between data (a damaged record, bytes that are no record, a zeroed range,
a missing file). Each hole has its byte range and lost bytes, what kind of damage it holds, the
damaged records that still decode, the intact messages just before and after it (topics, queues,
queue offsets and store times, hence the time range of the loss) and, per queue, the queue
offsets missing across it (an estimate of the messages lost there). Zeros after the last
message of a file are the unwritten tail, not a hole.

Nothing is written into the store; --out and --map inside the store are refused.""",
        "arguments": {"store_path": "A store root or a bare CommitLog directory."},
        "output": """\
--out FILE.jsonl: one JSON object per message, the shape mqtool dump --json prints
(""" + _FIELD_LIST + """), bodies in base64, plus beyond_truncation (true when the broker's
next start drops the message) and, with --include-damaged, damage (null, offset-mismatch,
body-crc or prop-crc).

The map, one JSON document on stdout (or in --map FILE.json): store, broker_version,
messages_intact, messages_damaged, messages_written, messages_beyond_truncation, bytes_lost,
truncation (process_offset, mode, stop_file, stop_reason, messages_lost_by_recovery,
commitlog_files_deleted), islands (file, start, end, messages, first and last store timestamp),
holes (file, start, end, lost_bytes, kinds, details, damaged_records, before, after, topics,
time_range, queue_gaps, messages_lost_estimate) and unexplained_queue_gaps. Offsets are global
CommitLog offsets; end offsets are exclusive.

A summary line goes to stderr.""",
        "exit": """\
0 the CommitLog was read to the end (holes or not: the map says what is lost).

2 bad usage, input that cannot be read as a store, or an output path inside the store.""",
        "examples": [
            ("Everything that can be read, and the map of what cannot:",
             "mqtool salvage STORE --out /safe/messages.jsonl > /safe/map.json"),
            ("Only what a broker restart would discard:",
             "mqtool salvage STORE --beyond-truncation --out /safe/at-risk.jsonl"),
        ],
    },
    ("export",): {
        "summary": "export RocketMQ messages as JSON lines for replay",
        "description": """\
Writes every intact message of the CommitLog, in CommitLog order, as one JSON object per line,
with what a replay needs to send it again to the right place. Messages the broker parked in its
own topics are marked with their real topic: delayed messages (SCHEDULE_TOPIC_XXXX, with
REAL_TOPIC and REAL_QID and the delivery time), 5.x timer messages (rmq_sys_wheel_timer),
transaction half messages (RMQ_SYS_TRANS_HALF_TOPIC). --topic selects by stored or real topic,
so --topic TopicTest includes the delayed messages bound for TopicTest.

The CommitLog is read as salvage reads it (past damage, CRC checked); damaged records are left
out with a warning. Messages past the broker's truncation point are exported and marked;
--live-only leaves them out.

--pending-timers exports only the 5.x timer messages still pending in the timer wheel (the ones
mqtool-timers(1) lists, lost ones included; cancellations and the timers they cancel left out),
to replay them on another broker.

--open-transactions exports only the transactions the store shows neither committed nor rolled
back (no COMMIT record, no op message ending any of their copies; see mqtool-transactions(1)):
for each its newest half copy the recovery keeps, marked with its real topic and queue, to
replay it once its producer has decided.

--unconsumed-by GROUP keeps exactly the messages at or after GROUP's committed offset in each
queue it has one for (config/consumerOffset.json as the broker loads it, its .bak when the file
is empty or unreadable; see mqtool-consumers(1)), its retry topic included: what that group had
not consumed, to replay elsewhere. Delay messages still waiting in SCHEDULE_TOPIC_XXXX are in no
queue of the group yet and are not included.""",
        "arguments": {"store_path": "A store root or a bare CommitLog directory."},
        "output": """\
JSON lines (--format jsonl, the only format) on stdout or in --out. Each object is the message
shape of mqtool dump --json (""" + _FIELD_LIST + """), the body in
base64 and decompressed unless --no-decompress (body_compression then names the codec), plus:

kind: normal, delayed, timer, retry, dlq, transaction-half, transaction-op,
transaction-prepared, transaction-commit or transaction-rollback.

real_topic, real_queue_id: where the message belongs: REAL_TOPIC/REAL_QID for delayed, timer and
half messages, else the stored topic and queue.

delay_level, deliver_timestamp: the DELAY level and, for a delayed message, when the broker
delivers it (store time plus the level's delay); for a timer message its TIMER_OUT_MS.

transaction_id: the __transactionId__ property, if any.

beyond_truncation: true when the broker's next start would drop the message.

pending_timer (with --pending-timers): deliver_time_ms, timer_out_ms, timer_deliver_ms,
timerlog_offset, next_start and next_start_detail, as in mqtool-timers(1).

open_transaction (with --open-transactions): transaction_id, producer_group, check_times,
half_copies (the half-queue offsets of every copy) and next_check with next_check_detail, as in
mqtool-transactions(1).

system (as in mqtool dump --json): for a transaction op message (RMQ_SYS_TRANS_OP_HALF_TOPIC,
kind transaction-op) the half-queue offsets its body lists (half_offsets), the items that are no
number (bad_items) and whether its tag ends half messages; for a half message (kind
transaction-half) its real topic and queue, producer group, transaction id and check times.

A summary line (counts by kind) goes to stderr.""",
        "exit": """\
0 exported (damaged records left out are counted on stderr).

2 bad usage, input that cannot be read as a store, or an output path inside the store.""",
        "examples": [
            ("All messages of one topic, delayed ones included:",
             "mqtool export STORE --format jsonl --topic TopicTest > topictest.jsonl"),
            ("One hour of traffic, live messages only:",
             "mqtool export STORE --since 2026-11-21T10:00:00Z --until 2026-11-21T11:00:00Z "
             "--live-only --out hour.jsonl"),
        ],
    },
    ("diff",): {
        "summary": "compare two RocketMQ stores (master and slave, backup and live)",
        "description": """\
A slave's CommitLog is a byte copy of its master's and a backup is an earlier copy of the live
store, so both CommitLogs are compared by global offset: the first offset inside either side's
written data at which the bytes differ (or one side ends), the records (matched by offset and
compared byte for byte) that are the same, different, or on one side only, and per
ConsumeQueue the first queue offset whose unit differs and the units only one side has. Bytes
past both sides' written data (zeros, stale bytes after a truncation) and IndexFile names
(creation times: a slave builds its own) do not count as differences; they are mentioned in
the notes.""",
        "arguments": {"store_a": "The first store (e.g. the master, or the backup).",
                      "store_b": "The second store (e.g. the slave, or the live store)."},
        "output": """\
A summary on stdout; with --json one JSON document: a, b, identical, commitlog
(first_divergent_offset, records_same, records_only_in_a, records_only_in_b and
records_different, each with count and the first --limit records: commitlog_offset, size,
topic, queue_id, queue_offset, store_timestamp), consume_queues (queues_a, queues_b,
queues_different, queues: topic, queue_id, a and b as [first, end) queue offsets,
first_divergent_queue_offset, units_only_in_a, units_only_in_b, units_different, the two units
at the first divergence) and notes.""",
        "exit": """\
0 identical: the same CommitLog records and the same ConsumeQueue units.

1 the stores differ.

2 bad usage, or input that cannot be read as a store.""",
        "examples": [
            ("How far behind is the slave?", "mqtool diff /data/master/store /data/slave/store"),
            ("What changed since the backup, as JSON:",
             "mqtool diff --json /backup/store /var/rocketmq/store"),
        ],
    },
}
