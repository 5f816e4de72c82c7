"""Man page prose of transactions (loaded by man/pages.py)."""

PAGES = {
    ("transactions",): {
        "summary": "list the transactions of a RocketMQ store and what the broker's next check "
                   "does to each",
        "description": """\
Answers, with no broker running, which transactional messages were still open when the broker
stopped and what it will do about them. One pass over the CommitLog collects the half messages
(RMQ_SYS_TRANS_HALF_TOPIC: the original and every copy a check put back at the end of the half
queue, TRANSACTION_CHECK_TIMES counting the checks), the op messages (RMQ_SYS_TRANS_OP_HALF_TOPIC,
tag d, body = the comma-separated half-queue offsets a commit or rollback ended) and the COMMIT
records (sysFlag COMMIT in the real topic, preparedTransactionOffset = the half copy's CommitLog
offset). Copies of one transaction share its UNIQ_KEY.

What the producers decided, as far as the store shows: committed (a COMMIT record for one of its
copies), rolled back (an op message ends one of its copies, no COMMIT record) or open.

What the broker's next check round does (TransactionalMessageServiceImpl.check of 5.x), on the
queues as the next start's recovery leaves them (as mqtool-verify(1) predicts it: copies, op
messages and COMMIT records past its truncation point are gone): from the half and op offsets
of group CID_RMQ_SYS_TRANS in config/consumerOffset.json (loaded as the broker loads it, the .bak
when the file is torn; a missing offset starts at the queue's minimum), the op messages are read
32 at a time; each half entry from the check offset on is skipped when an op message ends it,
discarded (moved to TRANS_CHECK_MAX_TIME_TOPIC) when it has been checked --check-max times, else
put back as a new copy and checked with its producer. The round stops at the first copy it put
back itself, after discarding the put-back copies already at --check-max. A transaction's fate is
its newest copy's: committed or rolled back (ended by an op message), checked again, discarded,
or lost (the recovery truncates the copy the check would have used). A transaction ended on an
older copy after a check had put it back is still checked: the op message covers the older copy
only (the note says so).

Assumed: the check runs later than transactionTimeout after the messages' birth and, unless
--at says when it runs, within fileReservedTime (with --at, half messages born more than
--file-reserved-hours before it are discarded unchecked, as the broker's needSkip does); no
producer answers it, no CHECK_IMMUNITY_TIME_IN_SECONDS and no
slave-acting-master escape. The answers equal the real 5.3.3 broker's check on the reference
store v5-txn-crash, with transactionCheckMax 15 and 3.

An op body item that is no number is read as -1 by the broker and ends nothing; a half message
without REAL_TOPIC cannot be committed into any topic; a consumerOffset.json without the
transaction group, or torn, changes where the check starts: each is a problem line, never an
error. mqtool-verify(1) reports them as TXN_* findings; mqtool-export(1) --open-transactions
writes the open transactions' newest half copies; mqtool-query(1) --uniq-key --explain shows a
transaction's half copies and COMMIT record as the broker's queryMessage returns them.""",
        "arguments": {"store_path": "A store root."},
        "output": """\
A table on stdout: the check progress and counts, then one row per transaction (UNIQ_KEY,
producer group, real topic and queue, half copies as half-queue offset:check times, the op
messages ending it, the COMMIT record's CommitLog offset, what the store shows, the next check).
The round's summary, COMMIT records and op offsets pointing at no half message, lost
transactions and problems go to stderr.

--json prints one document: check_max, check_at_ms, recovery (process_offset, mode, broker_version),
check_progress (half_offsets, op_offsets, source, broker_refuses_to_start, notes),
check_rounds (per half queue: half_offset, op_offset, half_offset_after, op_offset_after,
checked_with_producer, discarded), half_entries (half_queue_offset, commitlog_offset,
check_times, uniq_key, transaction_id, producer_group, real_topic, real_queue_id, keys,
covered_by_op_messages, commit_record, truncated_by_recovery, next_check, next_check_detail,
put_back_as), op_messages (op_queue_offset, commitlog_offset, tags, half_offsets, bad_items,
half_offsets_missing, truncated_by_recovery), transactions (uniq_key, transaction_id,
producer_group, real_topic, real_queue_id, keys, half_copies, op_messages, commit_record,
ended_in_store, next_check, next_check_detail, recovery, note), commit_records_without_half,
op_offsets_without_half, summary and problems.

ended_in_store is one of committed, rolled back, open. next_check is one of committed, rolled
back, checked again, discarded, lost, not checked (the broker skips the queue: a negative check
offset), broker refuses to start. A half entry's next_check is one
of removed by op, put back, discarded, not reached, checked before the crash (with put_back_as),
consumed before the crash, truncated by recovery.""",
        "exit": """\
0 nothing lost and nothing odd.

1 the recovery loses transactions, the broker would refuse to start, or the store holds op
messages or COMMIT records pointing at no half message, or other problems.

2 bad usage, or input that cannot be read as a store.""",
        "examples": [
            ("The open transactions of a crashed 5.x broker and what its check does:",
             "mqtool transactions STORE"),
            ("One producer group, with the broker's transactionCheckMax set to 3, as JSON:",
             "mqtool transactions --json --check-max 3 --group TxnProducerGroupA STORE"),
            ("The broker is started again a week later (half messages past fileReservedTime "
             "are discarded):", "mqtool transactions --at 2026-12-05T00:00:00Z STORE"),
            ("Write the open transactions for replay elsewhere:",
             "mqtool export --open-transactions --out open.jsonl STORE"),
        ],
        "see_also": ["mqtool-verify", "mqtool-export", "mqtool-query"],
    },
}
