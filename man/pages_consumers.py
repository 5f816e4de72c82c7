"""Man page prose of consumers (loaded by man/pages.py)."""

PAGES = {
    ("consumers",): {
        "summary": "consumer offsets of a RocketMQ store, and what the broker's next start does to them",
        "description": """\
Reads the committed consumer offsets from config/consumerOffset.json as the broker's
ConfigManager.load reads it: fastjson text with unquoted integer map keys, pretty-printed or
not, extra keys ignored. When the file is missing or empty (0 bytes), or does not decode, the
broker loads consumerOffset.json.bak instead; when that is missing or empty too it starts with
an empty table (every committed offset forgotten), and when the .bak does not decode either it
refuses to start. A file holding only whitespace or null is not empty and decodes to nothing
without an error: the broker keeps an empty table and never reads the .bak. A .tmp left by an
interrupted persist (4.9 and 5.0 write it, delete the file and rename it) is never read by the
broker, though it may hold the newest content; it is reported. A 5.3.4+ broker (the store code
after 5.3.3: --broker-version 5.3.4+, or the passport's family) takes the same file but first
deletes a main file that is empty or does not decode, so its bytes are gone after the start;
the report says so. mqtool does the same and says, for topics.json, consumerOffset.json,
subscriptionGroup.json and delayOffset.json, which file the broker uses and why. 5.x stores
that keep their metadata in RocksDB (config/rdb/, config/consumerOffsets/, config/topics/,
config/subscriptionGroups/) are recognised and reported. Offsets kept by the RocksDB offset
manager (config/consumerOffsets/) are read through a shadow copy of the database and loaded as
RocksDBConsumerOffsetManager.load loads them: every topic@group key, then consumerOffset.json
merged over them (whole entries) when its dataVersion counter is higher than the database's
kvDataVersion. Against a RocksDB ConsumeQueue the lag counts its served units. The other RocksDB
tables are not read (CFG_IN_ROCKSDB).

For every group, topic and queue it shows the committed (next) offset, the queue's minimum and
maximum offset (a maximum that changes on the next start is shown as NOW -> AFTER), the lag in
messages and in bytes (record sizes), the store time of the oldest unconsumed message, and
what the next start does to the group. The queue ends after the start come from the same
recovery prediction as mqtool-verify(1) (ConsumeQueue truncation) plus what the start
dispatches again, and equal the real brokers' on every reference store.

The offset is judged at the group's first pull by DefaultMessageStore.getMessage, the same in
4.9.8 and 5.3.3: a queue whose maximum is 0 answers NO_MESSAGE_IN_QUEUE and moves the offset to
0; an offset below the minimum answers OFFSET_TOO_SMALL and moves it up to the minimum (the
messages in between were already deleted: skipped); an offset equal to the maximum answers
OFFSET_OVERFLOW_ONE (caught up); an offset past the maximum answers OFFSET_OVERFLOW_BADLY and
moves it back to the maximum, so the messages written next at those offsets are delivered,
unless they are written before the group's first pull (then it skips them). The correction
applies on a master, or on a slave with offsetCheckInSlave; a slave otherwise keeps the old
offset. A push consumer stores the corrected offset (PULL_OFFSET_MOVED); a 5.x pop consumer's
broker commits it itself. Otherwise the messages from the committed offset to the end are
delivered (those read but not yet committed come again: the broker persists offsets every few
seconds). Messages the start drops are counted apart: those the group had consumed and those
it had not.

delayOffset.json is corrected at load instead: ScheduleMessageService.load clamps each delay
level's offset into its SCHEDULE_TOPIC_XXXX queue (correctDelayOffset), in 4.9 before the
start re-dispatches anything. The delay table shows the offset, the queue bounds at that
moment, the offset set at load and the delay messages still pending.

mqtool-verify(1) reports these findings about the same files:
CFG_UNREADABLE (a config file the broker's start loads, consumerFilter.json,
topicQueueMapping.json and consumerOrderInfo.json included, is empty or does not decode: a
warning when the broker falls back to the .bak, an error when it starts with an empty table or
refuses to start), CFG_BAD_VALUE
(an entry that is not what the broker writes: wrong type, out of Java's range; skipped, not
guessed), CFG_IN_ROCKSDB (metadata in RocksDB, not read), CONSUMER_OFFSET_AHEAD (a warning: an offset
past its queue's end after the next start, which the broker corrects on the first pull), CONSUMER_OFFSET_AHEAD_NOW (past the end on disk, but the
start dispatches up to it), CONSUMER_OFFSET_BELOW_MIN (messages deleted before the group read
them), TOPIC_NOT_IN_CONFIG (queues on disk for a topic topics.json does not list),
DELAY_OFFSET_AHEAD (a delay level past its queue's end: clamped at load).

Hostile config files (deep nesting, huge numbers, wrong types, binary, truncation) are reported
as such, never a traceback.""",
        "arguments": {"store": "A store root."},
        "output": """\
On stdout: which config file the broker loads and why, a table of every group, topic and
queue (group, topic, queue, committed, min, max, lag, lag bytes, oldest unconsumed, next
start), the delay levels, and one sentence for every queue whose offset the start moves or
whose messages it drops. With --json, one JSON document: store, broker_version, recovery_mode,
offsets_source, configs (per file: used, outcome, reason, and the state of the main file and
the .bak), groups (one summary per group), queues (one object per group, topic and queue, with
next_start: status, next_offset, slave_next_offset, delivers, skips, skips_if_refilled,
consumed_then_dropped,
unconsumed_dropped, sentence), delay_levels, problems, notes and rules.""",
        "exit": """\
0 shown.

2 bad usage, or input that cannot be read as a store.""",
        "examples": [
            ("Who had not consumed what, on a crashed broker's store:",
             "mqtool consumers /var/rocketmq/store"),
            ("One group, as JSON:", "mqtool consumers --json --group GroupA STORE"),
            ("A test store with a lagging group and a damaged offsets file:",
             "mqtool fixture make /tmp/s -n 2000 --consumer-group GroupB:50 && "
             "mqtool fixture damage /tmp/s --kind config-truncate && mqtool consumers /tmp/s"),
        ],
    },
}
