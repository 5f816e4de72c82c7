"""Man page prose of failover (loaded by man/pages.py)."""

PAGES = {
    ("failover",): {
        "summary": "list what an old master had that the new master never got (5.x controller "
                   "mode)",
        "description": """\
After an automatic master switch (5.x controller mode), the old master rejoins as a slave: its
HA client compares its epoch file (epochFileCheckpoint: epoch and start offset per line) with
the new master's, takes the newest epoch both have with the same start offset, and truncates
its CommitLog to the smaller of the two ends of that epoch (each side's last epoch ends at its
max offset). The messages past that consistent point are cut from the old master, though their
bytes may stay on disk looking valid.

mqtool failover answers, from the old master's store before it rejoins and a copy of the new
master's: where the consistent point is, and which of the old master's messages past it the new
master holds under the same UNIQ_KEY (resent: a producer retried it after the switch) and which
it never got (lost). Max offsets are where each broker's next start leaves its CommitLog (the
recovery mqtool-verify(1) predicts).

The rules are read from Apache RocketMQ 5.x's source (EpochFileCache.findConsistentPoint,
AutoSwitchHAClient.doTruncate, CheckpointFile); no broker-written store of this mode was
available to check them against, only stores forged with them.""",
        "arguments": {"old_store": "The old master's store root.",
                      "new_store": "The new master's store root (a copy is fine)."},
        "output": """\
A table on stdout: both sides' epochs and max offsets, the consistent point, then one row per
old-master message past it (offset, topic, queue, queue offset, UNIQ_KEY, keys, resent or lost,
where the new master holds it). --json prints one document: old_store, new_store,
old_max_offset, new_max_offset, old_epochs, new_epochs (epoch, start_offset, end_offset),
consistent_point, shared_epoch, truncated_bytes, summary (past_consistent_point, resent, lost)
and messages (commitlog_offset, topic, queue_id, queue_offset, store_timestamp, uniq_key, keys,
tags, failover, new_master_offsets).

--export FILE writes the lost messages as mqtool-export(1) writes messages (the dump's message
object, the replay fields kind, real_topic, real_queue_id, ..., and failover "lost"), one JSON
object per line, for replay into the new master.""",
        "exit": """\
0 nothing the old master stored past the consistent point is lost.

1 messages are lost (only the old master has them).

2 bad usage, a store that is no controller-mode store, an unusable epoch file, or two stores
that share no epoch (the rejoin finds no consistent point).""",
        "examples": [
            ("What the old master would drop on rejoining, and what of it is lost:",
             "mqtool failover /data/old-master/store /backup/new-master/store"),
            ("The lost messages for replay:",
             "mqtool failover --export lost.jsonl OLD_STORE NEW_STORE"),
        ],
        "see_also": ["mqtool-verify", "mqtool-export", "mqtool-diff", "mqtool-fixture-layout"],
    },
    ("fixture", "layout"): {
        "summary": "write a small store of a 5.x production layout",
        "description": """\
Writes, through the same writer as mqtool-fixture-make(1), a small store of a layout production
5.x brokers leave and that no reference store holds, laid out by the rules read from Apache
RocketMQ's source:

failover: DIR/old and DIR/new, two brokers of one group in controller mode after an automatic
master switch: both hold the messages replicated before it (epoch 1, from offset 0); the new
master appended epoch 2 at its end and stored the producers' retries (same UNIQ_KEY) and new
messages; the old master kept storing messages the new one never got. epochFileCheckpoint (and
the .bak string2File leaves) and brokerIdentity as the broker writes them. Try mqtool-failover(1)
on them.

system-topics: DIR/store with a message and its trace records (RMQ_SYS_TRACE_TOPIC, one of them
no trace), pop checkpoint, ack and batch-ack records (rmq_sys_REVIVE_LOG_DefaultCluster, the
checkpoint also as it waits in rmq_sys_wheel_timer), a retry delayed through
SCHEDULE_TOPIC_XXXX, a dead letter, a timer message and a 5.4 priority message.

multi-path: DIR/store whose CommitLog lies in DIR/disk1 and DIR/disk2 (storePathCommitLog
"disk1,disk2": file n in the (n % 2)-th) with its oldest file moved to DIR/readonly
(readOnlyCommitLogStorePaths), and DIR/broker.conf naming them; read it with --broker-config.""",
        "arguments": {"kind": "failover, system-topics or multi-path.",
                      "directory": "A new or empty directory."},
        "output": """\
One JSON object on stdout: what was written (offsets, UNIQ_KEYs, epochs, which messages are
resent or lost, files per directory), the expectation the tests check the commands against.""",
        "examples": [
            ("Two brokers after a failover, and what the old one would lose:",
             "mqtool fixture layout failover /tmp/fo && mqtool failover /tmp/fo/old /tmp/fo/new"),
        ],
        "see_also": ["mqtool-fixture-make", "mqtool-failover"],
    },
}
