"""Man page prose of the repair commands (issue: repair after abnormal shutdown)."""

_SAFETY = """\
Safety, for every command that writes: it refuses (exit 3) a store whose lock file a live
process holds (the POSIX record lock the broker's FileChannel.tryLock takes on byte 0).
--dry-run prints the plan: files created, changed (with byte ranges) and deleted; messages,
ConsumeQueue units and index entries affected; what is lost; and changes nothing. Otherwise every
byte that will change or go away is first copied into STORE/.mqtool-backup/<UTC timestamp>/
(or --backup-dir) with a manifest, the path is printed, and files are rewritten through a temp
file, fsync and rename, with an fsync of the directory. mqtool undo BACKUP restores the store
byte for byte. Running the command again changes nothing; a run that was killed is finished by
the next one. --out DIR writes a repaired copy and leaves STORE untouched. The commands never
prompt: runbooks and CI script them, and --dry-run is how one looks first.

A store holding what they cannot explain is refused (exit 2, one line naming it, nothing
changed), --dry-run included: a RocksDB database of a 5.2+ broker (a RocksDB ConsumeQueue in
consumequeue/ with storeType=defaultRocksDB, a CombineConsumeQueue, RocksDB metadata such as
config/consumerOffsets/), a DLedger layout the command does not know, compaction-topic data,
an unknown folder holding data, or the folder above a store. mqtool never writes into a RocksDB
database; recover and undo know a store whose ConsumeQueues live in RocksDB (see
mqtool-recover(1)), rebuild-queues --out exports its queues as files."""

_REPAIR_EXIT = """\
0 nothing to do, or repaired without losing data.

1 repaired (or, with --dry-run, would repair) with data loss.

2 bad usage, a store that cannot be read, or one holding what the command cannot explain
(a RocksDB database, see above).

3 refused: a live process holds the store's lock file."""

_OUTPUT = """\
A summary on stdout: what changed (files, byte ranges, counts), what was lost, and the backup
folder. With --json one JSON document with the plan's keys (created, changed, deleted, lost
messages, ConsumeQueue units and index entries) and the backup folder under the key backup."""

PAGES = {
    ("recover",): {
        "summary": "run the broker's startup recovery offline",
        "description": """\
Runs what an Apache RocketMQ broker does when it starts on the store, without the broker:
normal recovery, or abnormal recovery when an abort file says the last shutdown was not clean
(--mode); the start-file choice (the third-to-last file for a normal start on 4.9 to 5.3.1, the
last file the ConsumeQueues point into on 5.3.2+, the checkpoint-matched file for an abnormal
start; on 5.3.4+, for both, walking back from the last file, the first whose first record
passes the CRC check and then the rule, so that a damaged first record moves the start one
file earlier); the scan with CRC checks; the CommitLog truncation at processOffset (later files
deleted); ConsumeQueue recovery and truncation (always on 5.3.4+); re-dispatch into ConsumeQueues and IndexFiles
from the right offset; the IndexFiles an abnormal load deletes; the checkpoint update and the
removal of the abort file. On a 5.x store it also leaves what a 5.x start and clean shutdown
leave: abort.bak holding the crashed broker's PID (the old content of abort) and the persisted
compaction/position-checkpoint (its previous version in .bak); a store that needs no recovery is
left alone. The report starts with the store passport (the geometry and the writer family, each
with its evidence); the rules follow --broker-version, by default the family the passport
detects (see mqtool-info(1); recover scans no record for it, so a store of the code after 5.3.3
needs --broker-version 5.3.4+), and the report says which rules were used and where they came from.

The end state equals what the real broker leaves: the same CommitLog files, bytes identical up
to processOffset, byte-identical ConsumeQueue files and the same answers to index queries. By
default the bytes after processOffset in the cut file are erased (the broker leaves them as
stale data; the backup keeps them); --keep-stale leaves them as the broker does.
--reindex-all goes beyond the broker: it rebuilds the index for every message instead of
losing the entries of the IndexFile an abnormal load deletes.

On a 5.2+ store whose ConsumeQueues live in RocksDB (storeType=defaultRocksDB) recover does what
the broker's recovery does to the files mqtool owns (the start file is the one holding the CQ
checkpoint; the CommitLog cut at processOffset, later files deleted; the IndexFiles; the
checkpoint, whose logicsMsgTimestamp the RocksDB queues do not move; abort.bak and the
compaction position checkpoint) and leaves the RocksDB database untouched for the broker's own
start, saying what that start will do: where it starts, how many units it dispatches again from
where, which units its truncation leaves stale past their queue's max entry, and the CQ
checkpoint after it. After a crash the abort file stays, so that this start is an abnormal one
again, the one that re-dispatches from the file holding the CQ checkpoint (on the reference
RocksDB stores the CommitLog and checkpoint equal the real broker's and the predicted start
gives its units). RocksDB metadata (config/consumerOffsets/ and the like) and a
CombineConsumeQueue are still refused.

""" + _SAFETY,
        "arguments": {"store_path": "The store root."},
        "output": _OUTPUT,
        "exit": _REPAIR_EXIT,
        "examples": [
            ("See what the broker's recovery would do, changing nothing:",
             "mqtool recover --dry-run /var/rocketmq/store"),
            ("Recover a copy, keeping the original:", "mqtool recover --out /tmp/recovered STORE"),
            ("Recover in place, then undo it:",
             "mqtool recover STORE && mqtool undo STORE/.mqtool-backup/20261122T031500Z"),
        ],
    },
    ("truncate",): {
        "summary": "cut a store at a CommitLog offset",
        "description": """\
Only the truncation part of recovery: the CommitLog is cut at --to (by default the broker's
processOffset; it must be a record boundary), later CommitLog files are deleted, ConsumeQueue
units pointing at or past the offset are removed, IndexFiles holding entries at or past it are
rebuilt, and checkpoint timestamps later than the last kept message are lowered.

""" + _SAFETY,
        "arguments": {"store_path": "The store root."},
        "output": _OUTPUT,
        "exit": _REPAIR_EXIT,
        "examples": [("Cut the dirty tail the broker would cut:", "mqtool truncate --dry-run STORE"),
                     ("Cut at an offset:", "mqtool truncate --to 2421554 STORE")],
    },
    ("rebuild-queues",): {
        "summary": "regenerate ConsumeQueue files from the CommitLog",
        "description": """\
Writes the ConsumeQueue files of the selected queues (all by default) from the CommitLog
records up to the recovered end, as the broker's dispatch writes them: file names, units per
file (--cq-units, by default the store's geometry), pre-blank units when a queue does not start
at queue offset 0, units only for NOT and COMMIT transaction types, the tagsCode rules
(SCHEDULE_TOPIC_XXXX units carry the delivery time). The result is byte-identical to the
broker's files.

On a store whose ConsumeQueues live in RocksDB (storeType=defaultRocksDB), rebuild-queues --out
DIR exports the units the broker's next start leaves in RocksDB (the recovery mqtool-verify(1)
predicts) as file ConsumeQueues: DIR/<topic>/<queueId>/<20-digit name>, --cq-units per file
(default 300000), pre-blank units where a queue does not start at 0: a consumequeue/ for an
operator moving the store back to file ConsumeQueues. The store is only read; without --out (or
with --dry-run, --topic, --queue) the command refuses such a store.

""" + _SAFETY,
        "arguments": {"store_path": "The store root."},
        "output": _OUTPUT,
        "exit": _REPAIR_EXIT,
        "examples": [("Rebuild one queue:", "mqtool rebuild-queues --topic TopicTest --queue 0 STORE")],
    },
    ("rebuild-index",): {
        "summary": "regenerate the IndexFiles from the CommitLog",
        "description": """\
Writes every IndexFile anew from the CommitLog records up to the recovered end, as the broker's
buildIndex does: UNIQ_KEY and each KEYS item indexed as topic#key, rollback records skipped,
roll-over to a new file when one is full (the new header continuing the previous file's end),
file names from store time; the checkpoint's indexMsgTimestamp follows. Every key lookup then
answers what the broker's queryMessage answers for the same messages. --slots and --entries
choose another geometry.

""" + _SAFETY,
        "arguments": {"store_path": "The store root."},
        "output": _OUTPUT,
        "exit": _REPAIR_EXIT,
        "examples": [("Rebuild with the broker's default geometry:",
                      "mqtool rebuild-index --slots 5000000 --entries 20000000 STORE")],
    },
    ("undo",): {
        "summary": "restore a store from a repair's backup",
        "description": """\
Puts a store back exactly as it was before the repair that wrote BACKUP: files the repair
created are removed, changed and deleted files are restored byte for byte (checked against the
sha256 digests of their contents in the backup's manifest). It refuses a store in use (exit 3)
and changes nothing when a file was modified since the repair, unless --force.""",
        "arguments": {"backup": "A backup folder printed by a repair command (given the store "
                                "instead, undo names its newest backup)."},
        "output": "What was restored and removed; with --json one JSON document.",
        "exit": """\
0 restored, or nothing to restore.

2 an unusable backup, or files changed since the repair (without --force).

3 refused: a live process holds the store's lock file.""",
        "examples": [("Undo the last repair:",
                      "mqtool undo STORE/.mqtool-backup/20261122T031500Z")],
    },
}
