"""Man page prose of timers (loaded by man/pages.py)."""

PAGES = {
    ("timers",): {
        "summary": "list the pending and delivered 5.x timer messages of a RocketMQ store",
        "description": """\
Reads the 5.x timer store (timerlog/, timerwheel and config/timercheck) the way the broker's
dequeue does, with no broker running: every wheel slot due at or after the checkpoint's
lastReadTimeMs is pending; its chain is walked from lastPos back through prevPos to -1, and
each TimerLog unit's rmq_sys_wheel_timer message is read from the CommitLog
for its real topic and queue (REAL_TOPIC, REAL_QID), UNIQ_KEY, KEYS and TIMER_OUT_MS. Units in
earlier slots have been delivered; their delivered copy (same UNIQ_KEY, with TIMER_DEQUEUE_MS)
is looked up in the CommitLog.

Then it predicts what the broker's next start does with each pending timer
(TimerMessageStore.recover, then the dequeue): the CommitLog recovery (as mqtool-verify(1)
predicts it) may truncate a timer's message, and the timer is lost; the TimerLog recovery cuts
the log at its first bad unit, puts the units of its last file back on their slots (after a
crash the wheel on disk can lag the TimerLog: those timers are listed as relinked) and re-reads
the timer topic's queue from the offset after the last kept unit; the dequeue starts at lastReadTimeMs but never earlier than 7 days minus 60 slots
before the start (older slots are skipped); slots due before the start are delivered at once.
A wheel file of the wrong size makes the broker refuse to start.

mqtool-verify(1) checks the same files (TIMER_* findings); mqtool-export(1) --pending-timers
writes the pending timers' messages for replay elsewhere.""",
        "arguments": {"store_path": "A 5.x store root with a timer store."},
        "output": """\
A table on stdout: the checkpoint, the TimerLog and wheel in one line each, then one row per
pending timer (due time, slot, real topic and queue, UNIQ_KEY, keys, the CommitLog offset of its
rmq_sys_wheel_timer message, next start); --delivered adds the delivered timers with the offset
of their copy. The next start's summary and every lost timer go to stderr.

--json prints one document: checkpoint, timerlog (files with their unit count and where and how
they end), wheel, pending_count, pending_slots (slot, slot_time_ms, first_pos, last_pos, num,
magic and timers: the unit's fields, the message's topic, queue_id, queue_offset, real_topic,
real_queue_id, uniq_key, keys, tags, timer_out_ms, timer_deliver_ms, timer_delay_sec,
cancels_uniq_key, cancelled, and next_start with next_start_detail), delivered_count, delivered_copies_found, delivered (with
delivered_copy), not_in_timerlog (timer-topic records no unit points at), unreachable_units,
next_start (assumed_start_ms, refuses_to_start, commitlog_process_offset, timerlog_kept_end,
timer_queue_reread_from, dequeue_reads_from_ms, relinked, fates, lost) and problems.

next_start is one of delivered-when-due, delivered-at-start, re-enqueued-from-queue,
delivered-twice, cancelled, rolled-forward, lost-message-truncated, lost-message-missing, lost-timerlog-cut,
lost-slot-skipped, broker-refuses-to-start.""",
        "exit": """\
0 no pending timer is lost.

1 the broker's next start loses pending timers, or refuses to start.

2 bad usage, or a store without a timer store or that cannot be read.""",
        "examples": [
            ("The pending timers of a crashed 5.x broker:", "mqtool timers STORE"),
            ("As JSON, assuming the broker starts again at a given time:",
             "mqtool timers --json --at 2026-11-25T08:00:00Z STORE > timers.json"),
        ],
        "see_also": ["mqtool-verify", "mqtool-export"],
    },
}
