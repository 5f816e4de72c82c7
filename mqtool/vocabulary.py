"""The names mqtool's library and command line share: broker versions, recovery modes, the repair
backup's folder names, verify's finding codes and severities, forge's default topics.

They live here, apart from the modules that use them (:mod:`mqtool.recovery`, :mod:`mqtool.verify`,
:mod:`mqtool.forge`, which re-export them), because the CLI builds every command's help from them
on every run, ``mqtool --help`` included, and those modules import numpy and the store model.
So this module imports nothing.
"""
from __future__ import annotations

# --- the broker's recovery (mqtool.recovery) -----------------------------------------------------

VERSION_49 = "4.9"
VERSION_50 = "5.0-5.3.1"
VERSION_532 = "5.3.2+"
#: the store code after 5.3.3 (released as 5.3.4 and 5.4.0): the recovery start file's first
#: record is CRC-checked, ConsumeQueues are always truncated, classic batches keep each message's
#: own properties, a torn config file is deleted on load
VERSION_534 = "5.3.4+"
BROKER_VERSIONS = (VERSION_49, VERSION_50, VERSION_532, VERSION_534)
#: the families whose normal recovery starts where the ConsumeQueues end and dispatches there
DISPATCHING_NORMAL_RECOVERY = (VERSION_532, VERSION_534)
MODES = ("auto", "normal", "abnormal")

# --- store files (mqtool.store) -------------------------------------------------------------------

DLEDGER_INDEX_KIND = "dledger-index"      # dledger-<id>/index/<offset>
DLEDGER_TEXT_KIND = "dledger-text"        # dledger-<id>/checkpoint, currterm (and .bak)
#: the kinds of a single store file: what identify_file answers and ``dump --kind`` accepts
FILE_KINDS = ("commitlog", "consumequeue", "batchconsumequeue", "index", "checkpoint", "abort",
              "lock", "config", "timerlog", "timerwheel", "timercheck", DLEDGER_INDEX_KIND,
              DLEDGER_TEXT_KIND)

# --- repair backups (mqtool.backup; the store model knows them as folders no broker reads) ------

BACKUP_DIR = ".mqtool-backup"             # STORE/.mqtool-backup/<UTC timestamp>/
BACKUP_MANIFEST = "manifest.json"         # what a backup folder holds
STAGE_PREFIX = ".mqtool-stage-"           # a repair's staging folder in the store root

# --- verify's findings (mqtool.verify) -----------------------------------------------------------

ERROR, WARNING, INFO = "error", "warning", "info"

#: code -> (default severity, meaning). Codes are stable: scripts and --expect files rely on them.
CODES: dict[str, tuple[str, str]] = {
    "CL_BAD_MAGIC": (ERROR, "a CommitLog record starts with neither a message nor a blank magic code"),
    "CL_CRC_MISMATCH": (ERROR, "a record's body CRC does not match its stored body"),
    "CL_PROP_CRC_MISMATCH": (ERROR, "a record's __CRC32# property does not match the record (5.2+)"),
    "CL_LENGTH_MISMATCH": (ERROR, "a record's TOTALSIZE disagrees with the lengths of its fields"),
    "CL_TRUNCATED": (ERROR, "a record runs past the end of its file"),
    "CL_OFFSET_MISMATCH": (ERROR, "a record's PHYSICALOFFSET field is not its real position"),
    "CL_FILE_SIZE": (ERROR, "a CommitLog file is not the store's file size (the broker refuses to load)"),
    "CL_GAP": (ERROR, "CommitLog file start offsets are not contiguous (data is missing)"),
    "CL_STRAY_FILE": (WARNING, "a file in a data directory whose name the broker does not load"),
    "CL_STALE_DATA": (WARNING, "plausible records lie past the end of the written data"),
    "CL_INNER_BATCH": (ERROR, "a 5.x inner batch's body is torn or holds another number of "
                              "messages than INNER_NUM (consumers cannot unwrap it)"),
    "CQ_DANGLING": (ERROR, "a ConsumeQueue unit points past the CommitLog data or not at a record start"),
    "CQ_MISMATCH": (ERROR, "a ConsumeQueue unit disagrees with the record it points to"),
    "CQ_MISSING": (ERROR, "a dispatchable record has no unit in its ConsumeQueue"),
    # reported as info: what the database is and what the next start does to it
    "ROCKSDB_PRESENT": (WARNING, "the store keeps ConsumeQueues or metadata in a RocksDB "
                                 "database (5.2+): read through a shadow copy, never written"),
    "CQ_QUEUE_GAP": (ERROR, "queue offsets recorded in the CommitLog skip or repeat"),
    "CQ_FILE_SIZE": (ERROR, "a ConsumeQueue file is not a whole number of units / not the geometry's "
                            "size (inferred, or the broker's default when the files show none)"),
    "IDX_HEADER": (ERROR, "an IndexFile header disagrees with its entries or its size"),
    "IDX_DANGLING": (ERROR, "an index entry or slot points nowhere (past the data, not a record, "
                            "past indexCount, a looping chain)"),
    "IDX_HASH_MISMATCH": (ERROR, "an index entry's hash matches none of the keys of its record"),
    "IDX_MISSING_KEY": (ERROR, "a key of an indexed record cannot be found through its slot chain"),
    "CKPT_AHEAD": (WARNING, "a checkpoint timestamp is later than the newest stored message"),
    "CKPT_MISSING": (WARNING, "the checkpoint file is missing or unreadable"),
    "ABORT_PRESENT": (WARNING, "the abort file exists: the last shutdown was abnormal"),
    "LOCK_HELD": (WARNING, "a live process holds the store's lock file"),
    "REPAIR_PENDING": (WARNING, "an mqtool repair was interrupted half-way (.mqtool-pending.json): "
                                "the next repair command finishes it, undo of its backup takes "
                                "it back"),
    "REPAIR_LEFTOVER": (WARNING, "a stage folder or a backup folder without manifest.json left by "
                                 "an mqtool repair killed before it changed the store: the next "
                                 "repair or undo removes it"),
    "RECOVERY_TRUNCATES": (ERROR, "the broker's next start would drop written data"),
    "BCQ_DANGLING": (ERROR, "a BatchConsumeQueue unit points where no record starts"),
    "BCQ_MISMATCH": (ERROR, "a BatchConsumeQueue unit disagrees with its record"),
    "BCQ_GAP": (ERROR, "BatchConsumeQueue units do not continue each other's queue offsets"),
    "BCQ_FILE_SIZE": (ERROR, "a BatchConsumeQueue file is not a whole number of 46-byte units"),
    "BCQ_MISSING": (ERROR, "a dispatchable record of a BatchConsumeQueue topic has no unit"),
    "TIMER_UNIT_SIZE": (ERROR, "a TimerLog unit does not declare 52 bytes"),
    "TIMER_MAGIC": (ERROR, "a TimerLog unit's magic bits are not valid"),
    "TIMER_PREV_POS": (ERROR, "a TimerLog unit links to a unit that is not before it"),
    "TIMER_DANGLING": (ERROR, "a TimerLog unit points at no record of the size it records"),
    "TIMER_SLOT_TIME": (ERROR, "a TimerWheel slot's time does not match its index or its units"),
    "TIMER_SLOT_POINTER": (ERROR, "a TimerWheel slot points at no TimerLog unit"),
    "TIMER_SLOT_CHAIN": (ERROR, "a TimerWheel slot's chain does not lead from lastPos to firstPos"),
    "TIMER_WHEEL_SIZE": (ERROR, "the TimerWheel is missing or not 2 x 604,800 slots (the broker "
                                "refuses to start)"),
    "TIMER_FILE_SIZE": (ERROR, "a TimerLog file's size differs from the others'"),
    "TIMER_TORN": (ERROR, "a TimerLog file ends inside a unit"),
    "TIMER_MISMATCH": (ERROR, "a TimerLog unit's record is no timer message or is due at "
                              "another time"),
    "TIMER_CKPT": (WARNING, "config/timercheck is missing, of the wrong size or ahead of the "
                            "TimerLog"),
    "TIMER_UNREACHABLE": (ERROR, "pending TimerLog units that no wheel slot leads to (never "
                                 "delivered)"),
    "TIMER_LOST": (ERROR, "a pending timer whose message the broker's next start truncates"),
    "TIMER_WHEEL_BEHIND": (WARNING, "pending TimerLog units on no slot chain that the broker's "
                                    "load re-links (wheel not flushed)"),
    "TXN_OP_DANGLING": (WARNING, "a transaction op message ends half-queue offsets where no half "
                                 "message is (expired, truncated, or never written)"),
    "TXN_COMMIT_ORPHAN": (WARNING, "a COMMIT record's preparedTransactionOffset points at no half "
                                   "message"),
    "TXN_OP_BODY": (WARNING, "a transaction op message's body is not a comma-separated list of "
                             "numbers (the check ignores the items that are not)"),
    "TXN_HALF_NO_REAL_TOPIC": (ERROR, "a transaction half message has no REAL_TOPIC property "
                                      "(its commit cannot reach a topic)"),
    "DL_ENTRY_MAGIC": (ERROR, "a DLedger entry's magic is not 1 (DLedger's recovery ends the log "
                              "there)"),
    "DL_ENTRY_POS": (ERROR, "a DLedger entry's pos field is not its real offset (DLedger's "
                            "recovery ends the log there)"),
    "DL_ENTRY_SIZE": (ERROR, "a DLedger entry's size is not its body size + 48, or its body is "
                             "too short for a record (DLedger's recovery ends the log there)"),
    "DL_ENTRY_TRUNCATED": (ERROR, "a DLedger entry runs past the end of its data file"),
    "DL_INDEX_SEQUENCE": (ERROR, "a DLedger entry's index does not follow the previous entry's"),
    "DL_TERM_ORDER": (ERROR, "a DLedger entry's term is lower than the previous entry's"),
    "DL_INDEX_UNIT": (ERROR, "a DLedger index unit is missing or disagrees with its entry"),
    "DL_CHECKPOINT": (WARNING, "the DLedger checkpoint or currterm is missing, unreadable or "
                               "ahead of the data"),
    "DL_LAYOUT": (ERROR, "commitlog/ and the DLedger data do not meet at dividedCommitlogOffset"),
    # controller mode (mqtool.controller): epochFileCheckpoint, rules from EpochFileCache and
    # CheckpointFile in RocketMQ 5.x's source
    "EPOCH_UNREADABLE": (ERROR, "epochFileCheckpoint (or .bak) has a count, CRC or entry line "
                                "that is not a number (the broker's start fails on it)"),
    "EPOCH_COUNT": (ERROR, "epochFileCheckpoint's count line disagrees with its entry lines (the "
                           "broker loads the .bak instead)"),
    "EPOCH_CRC": (ERROR, "epochFileCheckpoint's CRC line does not match its entry lines (the "
                         "broker loads the .bak instead)"),
    "EPOCH_ORDER": (ERROR, "epochs or their start offsets do not increase"),
    "EPOCH_PAST_END": (ERROR, "an epoch starts past the CommitLog's end after recovery"),
    "EPOCH_NOT_RECORD": (ERROR, "an epoch's start offset is not where a message record starts"),
    "EPOCH_EXPIRED": (WARNING, "an epoch ends before the first CommitLog file (dropped on the "
                            "broker's next file deletion)"),
    "EPOCH_BAK": (WARNING, "epochFileCheckpoint.bak gives an epoch another start offset than "
                           "epochFileCheckpoint"),
}

# --- consumer forensics (mqtool.consumers) ---------------------------------------------------

#: consumer forensics' codes (mqtool.consumers.consumer_findings), stable like verify's
CONSUMER_CODES: dict[str, tuple[str, str]] = {
    "CFG_UNREADABLE": (ERROR, "a config file the broker loads is empty or unparsable (the "
                              "finding says whether the broker falls back to .bak, starts with "
                              "an empty table, or refuses to start)"),
    "CFG_BAD_VALUE": (WARNING, "a config entry is not what the broker writes (wrong type, out of "
                               "range); mqtool skips it and does not predict its decoding"),
    "CFG_IN_ROCKSDB": (WARNING, "5.x metadata kept in RocksDB under config/ that mqtool does "
                               "not read (or RocksDB cannot read), so it is not checked"),
    # a warning: the store is sound and the broker corrects the offset itself; what it costs
    # the group (re-delivery or skipped messages) is the finding's sentence
    "CONSUMER_OFFSET_AHEAD": (WARNING, "a committed consumer offset is past its queue's end "
                                       "after the predicted recovery: the first pull moves the "
                                       "group back"),
    "CONSUMER_OFFSET_AHEAD_NOW": (WARNING, "a committed consumer offset is past its queue's end on "
                                           "disk; the next start dispatches the queue up to it"),
    "CONSUMER_OFFSET_BELOW_MIN": (WARNING, "a committed consumer offset is below its queue's "
                                           "minimum: messages were deleted before the group read "
                                           "them"),
    "TOPIC_NOT_IN_CONFIG": (WARNING, "queues on disk for a topic topics.json does not list"),
    "DELAY_OFFSET_AHEAD": (WARNING, "a delayOffset.json level is past its SCHEDULE_TOPIC_XXXX "
                                    "queue's end: the scheduler's load clamps it"),
}
# verify reports them beside its own
CODES.update(CONSUMER_CODES)

# --- the fixture forge (mqtool.forge) ------------------------------------------------------------

DEFAULT_TOPICS = ("TopicTest", "OrderTopic", "%RETRY%GroupA")
