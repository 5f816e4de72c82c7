"""The 5.x timer store: written by the one writer, dumped and checked."""
from __future__ import annotations

import gzip
import json
import shutil
import struct
from pathlib import Path

import pytest

from mqtool.formats import codecs
from mqtool.formats import timer as timer_fmt
from mqtool.recovery import predict_recovery
from mqtool.scan import Scanner
from mqtool.store import Store
from mqtool.timer import check_timer_store, iter_timerlog, iter_timerwheel
from mqtool.timers import timer_report
from mqtool.writer import Message, StoreWriter, TimerWriter

SLOTS_TOTAL = timer_fmt.DEFAULT_SLOTS_TOTAL  # the broker refuses any other wheel size
BASE_MS = 1_800_000_000_000


@pytest.fixture
def timer_store(tmp_path):
    """Timer-topic messages in the CommitLog and their TimerLog units / wheel slots."""
    root = tmp_path / "store"
    writer = StoreWriter(root, commitlog_file_size=64 * 1024, cq_units_per_file=300,
                         index_slots=100, index_entries=400, broker_version=5)
    timers = TimerWriter(root, timerlog_file_size=52 * 10 + 30, slots_total=SLOTS_TOTAL)
    expected = []
    for i in range(25):
        write_ms = BASE_MS + i * 10
        deliver_ms = write_ms + 1000 * (i % 4 + 1)
        msg = Message(topic=timer_fmt.TIMER_TOPIC, queue_id=0, body=b"x" * (i * 7),
                      properties={"REAL_TOPIC": "TopicTest", "REAL_QID": "1",
                                  "TIMER_OUT_MS": str(deliver_ms), "UNIQ_KEY": f"{i:032X}"},
                      born_timestamp=write_ms, store_timestamp=write_ms)
        offset, size, _ = writer.put(msg)
        position = timers.enqueue(offset, size, deliver_ms, write_ms, "TopicTest")
        expected.append((position, offset, size, deliver_ms))
    writer.close()
    timers.close(last_read_time_ms=BASE_MS, last_timer_queue_offset=len(expected))
    _set_master_timer_queue_offset(root, len(expected))
    return root, expected


def units_of(root):
    out = []
    for seg in Store(root).root.joinpath("timerlog").iterdir():
        out += [r for r in iter_timerlog(seg, int(seg.name)) if r["record_type"] == "timerlog/unit"]
    return sorted(out, key=lambda r: r["timerlog_offset"])


def test_units_roll_over_with_a_blank_and_point_at_their_records(timer_store):
    root, expected = timer_store
    files = sorted((root / "timerlog").iterdir())
    assert len(files) == 3  # 10 units per file: 25 units need three files
    first = files[0].read_bytes()
    # a 16-byte blank (remaining, 0L, BLANK_MAGIC_CODE) closes the full file, built by hand here
    assert first[520:536] == struct.pack(">iqI", 30, 0, 0xCBD43194)
    units = units_of(root)
    assert [(u["timerlog_offset"], u["commitlog_offset"], u["commitlog_size"],
             u["deliver_time_ms"]) for u in units] == expected
    assert all(u["real_topic_hash"] == codecs.java_string_hash("TopicTest") for u in units)
    records = {r.offset: r for r in Scanner(Store(root).commitlog).messages()}
    assert all(records[u["commitlog_offset"]].topic == timer_fmt.TIMER_TOPIC for u in units)


def test_wheel_slots_chain_units_of_the_same_second(timer_store):
    root, expected = timer_store
    by_second = {}
    for position, _, _, deliver_ms in expected:
        by_second.setdefault(deliver_ms // 1000, []).append(position)
    slots = {s["time_slot"]: s for s in iter_timerwheel(root / "timerwheel")}
    assert set(slots) == set(by_second)
    units = {u["timerlog_offset"]: u for u in units_of(root)}
    for second, positions in by_second.items():
        slot = slots[second]
        assert slot["slot"] == second % (2 * SLOTS_TOTAL)
        assert (slot["first_pos"], slot["last_pos"], slot["num"]) == \
            (positions[0], positions[-1], len(positions))
        chain, pos = [], slot["last_pos"]
        while pos != -1:
            chain.append(pos)
            pos = units[pos]["prev_pos"]
        assert chain == positions[::-1]


def test_check_finds_nothing_on_a_good_store(timer_store):
    assert check_timer_store(Store(timer_store[0])) == []


def used_first_unit(root, slot) -> int:
    """File position of the first unit of ``slot`` (every unit here lives in the first file)."""
    return min(u["file_offset"] for u in units_of(root) if u["deliver_time_ms"] // 1000 ==
               slot["time_slot"])


def test_check_names_damaged_units_and_slots(timer_store):
    root, expected = timer_store
    log = sorted((root / "timerlog").iterdir())[0]
    data = bytearray(log.read_bytes())
    data[52 + 12:52 + 16] = struct.pack(">i", 8)           # unit 1: magic without DEFAULT
    data[104 + 28:104 + 36] = struct.pack(">q", 3)         # unit 2: CommitLog pointer into a record
    log.write_bytes(bytes(data))
    wheel = bytearray((root / "timerwheel").read_bytes())
    used = next(iter_timerwheel(root / "timerwheel"))
    at = used["file_offset"]
    wheel[at + 16:at + 24] = struct.pack(">q", 999_999)    # lastPos to nowhere
    (root / "timerwheel").write_bytes(bytes(wheel))
    found = {(f["code"], f["file"], f["offset"]) for f in check_timer_store(Store(root))}
    # the slot's units are now on no chain of the wheel on disk; the broker's load walks the
    # last TimerLog file again and points the slot at its newest unit there, whose chain leads
    # back to them
    assert found == {("TIMER_MAGIC", f"timerlog/{log.name}", 52),
                     ("TIMER_DANGLING", f"timerlog/{log.name}", 104),
                     ("TIMER_SLOT_POINTER", "timerwheel", at),
                     ("TIMER_WHEEL_BEHIND", f"timerlog/{log.name}", used_first_unit(root, used))}


def test_dump_reads_each_timer_file(timer_store, mqtool):
    root, expected = timer_store
    log = sorted((root / "timerlog").iterdir())[0]
    proc = mqtool("dump", "--json", log)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["record_type"] for r in rows] == ["timerlog/unit"] * 10 + ["timerlog/blank"]
    assert rows[0]["commitlog_offset"] == expected[0][1]
    proc = mqtool("dump", "--json", root / "timerwheel")
    assert proc.returncode == 0, proc.stderr
    assert sum(json.loads(line)["num"] for line in proc.stdout.splitlines()) == len(expected)
    proc = mqtool("dump", "--json", root / "config" / "timercheck")
    assert proc.returncode == 0, proc.stderr
    check = json.loads(proc.stdout)
    assert check["last_read_time_ms"] == BASE_MS
    assert check["last_timer_log_flush_pos"] == expected[-1][0] + 52


def test_verify_includes_the_timer_checks(timer_store, mqtool):
    root, _ = timer_store
    assert mqtool("verify", "--json", root).returncode == 0
    log = sorted((root / "timerlog").iterdir())[0]
    data = bytearray(log.read_bytes())
    data[52 + 12:52 + 16] = struct.pack(">i", 8)
    log.write_bytes(bytes(data))
    proc = mqtool("verify", "--json", root)
    assert proc.returncode == 1
    found = [(f["code"], f["offset"]) for f in json.loads(proc.stdout)["findings"]
             if f["code"].startswith("TIMER_")]
    assert found == [("TIMER_MAGIC", 52)]


# --- the real 5.3.3 broker's timer store (v5-timer-crash) ---------------------------------------

def _broker_timers() -> dict:
    from conftest import SHARED_STORES
    with gzip.open(SHARED_STORES / "v5-timer-crash" / "timer.json.gz", "rt") as fh:
        return json.load(fh)


def _broker_pending(slots: list[dict]) -> list[tuple]:
    """timer.json's pending slots as comparable tuples: slot, then each unit newest first with
    the message it points at."""
    out = []
    for slot in slots:
        units = []
        for item in slot["unitsNewestFirst"]:
            (pos, size, prev, magic, write_ms, delay, offset_py, size_py, topic_hash, reserved,
             deliver_ms) = item["unit"]
            m = item["message"]
            units.append((pos, size, prev, magic, write_ms, delay, offset_py, size_py, topic_hash,
                          deliver_ms, m["topic"], m["queueId"], m["queueOffset"],
                          m["commitLogOffset"], m["realTopic"], int(m["realQueueId"]),
                          m["uniqKey"], m["keys"], int(m["timerOutMs"]),
                          int(m["timerDeliverMs"]) if m["timerDeliverMs"] else None,
                          int(m["timerDelaySec"]) if m["timerDelaySec"] else None))
        out.append((slot["slotTimeMs"], slot["firstPos"], slot["lastPos"], slot["num"], units))
    return out


def _our_pending(report: dict) -> list[tuple]:
    return [(s["slot_time_ms"], s["first_pos"], s["last_pos"], s["num"],
             [(t["timerlog_offset"], t["size"], t["prev_pos"], t["magic"], t["write_time_ms"],
               t["delay_ms"], t["commitlog_offset"], t["commitlog_size"], t["real_topic_hash"],
               t["deliver_time_ms"], t["topic"], t["queue_id"], t["queue_offset"],
               t["commitlog_offset"], t["real_topic"], t["real_queue_id"], t["uniq_key"],
               t["keys"], t["timer_out_ms"], t["timer_deliver_ms"], t["timer_delay_sec"])
              for t in s["timers"]])
            for s in report["pending_slots"]]


@pytest.mark.parametrize("which", ["store", "recovered"])
def test_pending_timers_equal_the_brokers(v5_timer_crash_unpacked, which):
    broker = _broker_timers()[which]
    report = timer_report(Store(v5_timer_crash_unpacked / which))
    assert report["pending_count"] == broker["pendingUnitCount"] == 306
    assert _our_pending(report) == _broker_pending(broker["pendingSlots"])
    ckpt = broker["timerCheckpoint"]
    assert report["checkpoint"] == {
        "last_read_time_ms": ckpt["lastReadTimeMs"],
        "last_timer_log_flush_pos": ckpt["lastTimerLogFlushPos"],
        "last_timer_queue_offset": ckpt["lastTimerQueueOffset"],
        "master_timer_queue_offset": ckpt["masterTimerQueueOffset"],
        "state_version": ckpt["dataVersion"]["stateVersion"],
        "data_version_timestamp": ckpt["dataVersion"]["timestamp"],
        "data_version_counter": ckpt["dataVersion"]["counter"]}
    assert report["timerlog"]["units"] == broker["timerLogFiles"][0]["units"]
    assert report["wheel"]["size"] == broker["timerWheelFileSize"]
    assert report["wheel"]["used_slots"] == len(broker["timerWheelSlots"])


def test_every_unit_and_used_slot_equals_the_brokers(v5_timer_crash_unpacked):
    broker = _broker_timers()["store"]
    root = v5_timer_crash_unpacked / "store"
    units = [(u["timerlog_offset"], u["size"], u["prev_pos"], u["magic"], u["curr_write_time_ms"],
              u["delay_ms"], u["commitlog_offset"], u["commitlog_size"], u["real_topic_hash"],
              u["reserved"], u["deliver_time_ms"]) for u in units_of(root)]
    assert units == [tuple(row) for row in broker["timerLogFiles"][0]["unitRows"]]
    slots = [(s["slot"], s["time_slot"] * 1000, s["first_pos"], s["last_pos"], s["num"],
              s["magic"]) for s in iter_timerwheel(root / "timerwheel")]
    assert slots == [tuple(row) for row in broker["timerWheelSlots"]]


def test_delivered_timers_and_their_copies_equal_the_brokers(v5_timer_crash_unpacked):
    data = _broker_timers()
    report = timer_report(Store(v5_timer_crash_unpacked / "store"))
    assert report["delivered_count"] == data["recordsInTimerTopic"] - 306 == 207
    ours = sorted((t["delivered_copy"]["commitlog_offset"], t["uniq_key"])
                  for t in report["delivered"])
    assert ours == sorted((c["commitLogOffset"], c["uniqKey"])
                          for c in data["deliveredCopiesInStore"])
    assert not any(t["delivered_copy"]["lost_on_recovery"] for t in report["delivered"])


def test_next_start_prediction_agrees_with_the_running_broker(v5_timer_crash_unpacked):
    """recoveryRuntime is what the broker itself had in memory after starting on store/."""
    runtime = _broker_timers()["recoveryRuntime"]
    report = timer_report(Store(v5_timer_crash_unpacked / "store"),
                          start_ms=runtime["currReadTimeMs"])
    nxt = report["next_start"]
    assert nxt["timerlog_kept_end"] == runtime["timerLogMaxOffset"]
    assert nxt["timer_queue_reread_from"] == runtime["queueOffset"]
    assert nxt["dequeue_reads_from_ms"] == runtime["currReadTimeMs"]
    assert nxt["refuses_to_start"] == [] and nxt["lost"] == []
    assert nxt["fates"] == {"delivered-when-due": runtime["dequeueBehindMessages"]}
    assert report["not_in_timerlog"] == [] and report["unreachable_units"] == []
    # eight days later the wheel has wrapped past every slot: all of them are skipped
    late = timer_report(Store(v5_timer_crash_unpacked / "store"),
                        start_ms=runtime["currReadTimeMs"] + 8 * 86_400_000)
    assert late["next_start"]["fates"] == {"lost-slot-skipped": 306}


@pytest.mark.parametrize("which", ["store", "recovered"])
def test_the_brokers_timer_files_have_no_findings(v5_timer_crash_unpacked, which):
    store = Store(v5_timer_crash_unpacked / which)
    assert check_timer_store(store, plan=predict_recovery(store)) == []


def _damaged_copy(v5_timer_crash_unpacked, tmp_path) -> Path:
    root = tmp_path / "store"
    shutil.copytree(v5_timer_crash_unpacked / "store", root)
    return root


def test_timers_whose_message_recovery_truncates_are_lost(v5_timer_crash_unpacked, tmp_path,
                                                          mqtool):
    """One body byte of a pending timer's own message changed: the broker's CRC check stops the
    CommitLog recovery there (abnormal recovery starts at the last file, which holds it), so
    that timer and every pending one stored after it is lost."""
    from conftest import SHARED_STORES
    root = _damaged_copy(v5_timer_crash_unpacked, tmp_path)
    pending = [u for s in _broker_timers()["store"]["pendingSlots"] for u in s["unitsNewestFirst"]]
    victim = sorted(u["message"]["commitLogOffset"] for u in pending)[-20]
    with gzip.open(SHARED_STORES / "v5-timer-crash" / "dump.json.gz", "rt") as fh:
        record = next(m for m in json.load(fh)["messages"] if m["fileBasedOffset"] == victim)
    segment = root / "commitlog" / record["file"]
    data = bytearray(segment.read_bytes())
    data[record["layout"]["bodyPos"]] ^= 0xFF  # bodyPos is a position in the file
    segment.write_bytes(bytes(data))
    expected = sorted(u["message"]["uniqKey"] for u in pending
                      if u["message"]["commitLogOffset"] >= victim)

    report = timer_report(Store(root))
    lost = report["next_start"]["lost"]
    assert sorted(t["uniq_key"] for t in lost) == expected
    assert {t["next_start"] for t in lost} == {"lost-message-truncated"}
    store = Store(root)
    found = [f for f in check_timer_store(store, plan=predict_recovery(store))
             if f["code"] == "TIMER_LOST"]
    assert sorted(f["commitlog_offset"] for f in found) == sorted(
        u["message"]["commitLogOffset"] for u in pending
        if u["message"]["commitLogOffset"] >= victim)

    proc = mqtool("timers", root, "--json")
    assert proc.returncode == 1, proc.stderr
    assert len(json.loads(proc.stdout)["next_start"]["lost"]) == len(expected)
    proc = mqtool("timers", root)
    assert proc.returncode == 1 and proc.stderr.count("lost: UNIQ_KEY") == len(expected)


def test_timers_table_and_json_on_the_broker_store(v5_timer_crash_unpacked, mqtool):
    root = v5_timer_crash_unpacked / "store"
    proc = mqtool("timers", root, "--at", "2026-11-25T00:02:00Z")
    assert proc.returncode == 0, proc.stderr
    broker = _broker_timers()["store"]
    for slot in broker["pendingSlots"]:
        for item in slot["unitsNewestFirst"]:
            assert item["message"]["uniqKey"] in proc.stdout
    assert "306 delivered-when-due" in proc.stderr
    proc = mqtool("timers", root, "--json", "--at", "1795564920000")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["pending_count"] == 306


def test_timers_refuses_a_store_without_timers(fixture_store, mqtool):
    proc = mqtool("timers", fixture_store)
    assert proc.returncode == 2 and proc.stderr.startswith("mqtool: error: ")
    assert proc.stderr.count("\n") == 1


# --- bad input: findings or one-line errors, never a traceback ----------------------------------

def _codes(root) -> set[str]:
    return {f["code"] for f in check_timer_store(Store(root))}


def _cli_survives(mqtool, root) -> tuple:
    """timers (table and JSON) and verify on a damaged store: no traceback, a documented code."""
    table = mqtool("timers", root, "--at", str(BASE_MS))
    as_json = mqtool("timers", root, "--json", "--at", str(BASE_MS))
    verify = mqtool("verify", "--json", root)
    for proc in (table, as_json, verify):
        assert proc.returncode in (0, 1, 2), proc.stderr
        if proc.returncode == 2:
            assert proc.stderr.startswith("mqtool: error: ") and proc.stderr.count("\n") == 1
    return table, as_json, verify


def test_a_wheel_of_the_wrong_size_is_one_finding_and_refuses_the_start(timer_store, mqtool):
    root, _ = timer_store
    with open(root / "timerwheel", "r+b") as fh:
        fh.truncate(1000 * timer_fmt.TIMERWHEEL_SLOT_SIZE)
    assert _codes(root) == {"TIMER_WHEEL_SIZE"}
    table, as_json, verify = _cli_survives(mqtool, root)
    assert table.returncode == 1 and "refuses to start" in table.stderr
    report = json.loads(as_json.stdout)
    assert report["next_start"]["refuses_to_start"] and report["pending_count"] == 0
    assert verify.returncode == 1
    assert "TIMER_WHEEL_SIZE" in {f["code"] for f in json.loads(verify.stdout)["findings"]}


@pytest.mark.parametrize("how", ["missing", "empty"])
def test_a_missing_or_empty_wheel(timer_store, mqtool, how):
    """The broker starts with an empty wheel; its load re-links the units of the TimerLog's last
    two files (it walks from the file holding lastTimerLogFlushPos minus a file size). Every
    timer here is due in one of four seconds that also have units there, so all come back."""
    root, expected = timer_store
    if how == "missing":
        (root / "timerwheel").unlink()
    else:
        (root / "timerwheel").write_bytes(b"")
    found = {f["code"]: f for f in check_timer_store(Store(root))}
    assert set(found) == {"TIMER_WHEEL_SIZE", "TIMER_WHEEL_BEHIND"}
    assert how in found["TIMER_WHEEL_SIZE"]["message"]
    assert found["TIMER_WHEEL_BEHIND"]["count"] == len(expected)
    _, as_json, _ = _cli_survives(mqtool, root)
    report = json.loads(as_json.stdout)
    assert report["pending_count"] == 0
    assert sorted(t["timerlog_offset"] for t in report["next_start"]["relinked"]) == \
        sorted(pos for pos, _, _, _ in expected)


def test_a_unit_pointing_past_the_commitlog(timer_store, mqtool):
    root, expected = timer_store
    log = sorted((root / "timerlog").iterdir())[0]
    data = bytearray(log.read_bytes())
    data[3 * 52 + 28:3 * 52 + 36] = struct.pack(">q", 10 ** 12)
    log.write_bytes(bytes(data))
    found = check_timer_store(Store(root))
    assert [(f["code"], f["offset"], f["commitlog_offset"]) for f in found] == \
        [("TIMER_DANGLING", 3 * 52, 10 ** 12)]
    assert "past the CommitLog" in found[0]["message"]
    _, as_json, _ = _cli_survives(mqtool, root)
    assert as_json.returncode == 1
    lost = json.loads(as_json.stdout)["next_start"]["lost"]
    assert [(t["timerlog_offset"], t["next_start"]) for t in lost] == \
        [(expected[3][0], "lost-message-missing")]


def test_a_torn_timerlog_file(timer_store, mqtool):
    root, _ = timer_store
    last = sorted((root / "timerlog").iterdir())[-1]
    with open(last, "r+b") as fh:
        fh.truncate(2 * 52 + 20)
    found = check_timer_store(Store(root))
    assert ("TIMER_TORN", f"timerlog/{last.name}", 2 * 52) in \
        {(f["code"], f["file"], f["offset"]) for f in found}
    assert "TIMER_FILE_SIZE" in {f["code"] for f in found}
    _cli_survives(mqtool, root)


def test_a_short_or_missing_timer_checkpoint(timer_store, mqtool):
    root, _ = timer_store
    check = root / "config" / "timercheck"
    check.write_bytes(check.read_bytes()[:20])
    assert _codes(root) == {"TIMER_CKPT"}
    _cli_survives(mqtool, root)
    check.unlink()
    assert _codes(root) == {"TIMER_CKPT"}
    _cli_survives(mqtool, root)


def test_a_slot_pointing_at_a_unit_of_another_second(timer_store, mqtool):
    root, expected = timer_store
    wheel = bytearray((root / "timerwheel").read_bytes())
    slots = list(iter_timerwheel(root / "timerwheel"))
    victim = slots[0]
    stranger = next(pos for pos, _, _, deliver in expected
                    if deliver // 1000 != victim["time_slot"])
    at = victim["file_offset"]
    wheel[at + 16:at + 24] = struct.pack(">q", stranger)   # lastPos
    (root / "timerwheel").write_bytes(bytes(wheel))
    found = [(f["code"], f["offset"]) for f in check_timer_store(Store(root))]
    assert ("TIMER_SLOT_TIME", at) in found
    _cli_survives(mqtool, root)


def test_garbage_in_every_timer_file(timer_store, mqtool):
    root, _ = timer_store
    import random
    rng = random.Random(17)
    for path in sorted((root / "timerlog").iterdir()):
        path.write_bytes(bytes(rng.getrandbits(8) for _ in range(path.stat().st_size)))
    wheel = bytearray((root / "timerwheel").read_bytes())
    for at in range(0, 64 * 32):
        wheel[at] = rng.getrandbits(8)
    (root / "timerwheel").write_bytes(bytes(wheel))
    check_timer_store(Store(root))   # must not raise
    _cli_survives(mqtool, root)


def test_export_pending_timers_writes_the_brokers_pending_messages(v5_timer_crash_unpacked,
                                                                   tmp_path, mqtool):
    from conftest import SHARED_STORES
    out = tmp_path / "pending.jsonl"
    proc = mqtool("export", v5_timer_crash_unpacked / "store", "--pending-timers", "--out", out,
                  "--no-decompress")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    pending = {u["message"]["commitLogOffset"]: u for s in _broker_timers()["store"]["pendingSlots"]
               for u in s["unitsNewestFirst"]}
    assert sorted(r["commitlog_offset"] for r in rows) == sorted(pending)
    with gzip.open(SHARED_STORES / "v5-timer-crash" / "dump.json.gz", "rt") as fh:
        bodies = {m["fileBasedOffset"]: m["body"] for m in json.load(fh)["messages"]}
    for row in rows:
        expected = pending[row["commitlog_offset"]]
        assert (row["kind"], row["real_topic"], row["real_queue_id"], row["uniq_key"]) == \
            ("timer", expected["message"]["realTopic"], int(expected["message"]["realQueueId"]),
             expected["message"]["uniqKey"])
        assert row["deliver_timestamp"] == row["pending_timer"]["deliver_time_ms"] == \
            expected["unit"][-1]
        assert row["body"] == bodies[row["commitlog_offset"]]


def test_export_pending_timers_of_a_store_without_timers(fixture_store, mqtool):
    proc = mqtool("export", fixture_store, "--pending-timers")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


def test_units_written_after_the_last_wheel_flush_are_relinked_by_the_load(timer_store, mqtool):
    """A crash before the wheel's flush: the slot of the newest unit is still empty on disk.
    The broker's load walks the last TimerLog file again and puts the slot back, so its timers
    are delivered, not lost."""
    root, expected = timer_store
    newest_pos, _, _, newest_due = expected[-1]
    second = newest_due // 1000
    in_slot = [pos for pos, _, _, due in expected if due // 1000 == second]
    wheel = bytearray((root / "timerwheel").read_bytes())
    at = timer_fmt.slot_index(second, 2 * SLOTS_TOTAL) * timer_fmt.TIMERWHEEL_SLOT_SIZE
    wheel[at:at + timer_fmt.TIMERWHEEL_SLOT_SIZE] = bytes(timer_fmt.TIMERWHEEL_SLOT_SIZE)
    (root / "timerwheel").write_bytes(bytes(wheel))

    found = check_timer_store(Store(root))
    assert [(f["code"], f["severity"], f["count"]) for f in found] == \
        [("TIMER_WHEEL_BEHIND", "warning", len(in_slot))]
    report = timer_report(Store(root), start_ms=BASE_MS)
    assert report["pending_count"] == len(expected) - len(in_slot)
    relinked = report["next_start"]["relinked"]
    assert sorted(t["timerlog_offset"] for t in relinked) == sorted(in_slot)
    assert {t["next_start"] for t in relinked} == {"delivered-when-due"}
    assert report["next_start"]["lost"] == [] and report["unreachable_units"] == []


def _set_master_timer_queue_offset(root, value: int) -> None:
    """The forge leaves masterTimerQueueOffset 0; a broker that enqueued N timers has N."""
    check = root / "config" / "timercheck"
    data = bytearray(check.read_bytes())
    data[24:32] = struct.pack(">q", value)
    check.write_bytes(bytes(data))


def test_a_unit_with_bad_magic_cuts_the_timerlog_and_its_timers_are_read_again(timer_store):
    """TimerMessageStore.recover stops at the first unit with magic bits above the low four and
    drops the rest of the TimerLog; then it re-reads rmq_sys_wheel_timer from the queue offset
    after the last kept unit's message, so the dropped timers are enqueued again."""
    root, expected = timer_store
    cut = 20                                     # the first unit of the last file
    position = expected[cut][0]
    log = sorted((root / "timerlog").iterdir())[-1]
    data = bytearray(log.read_bytes())
    at = position - int(log.name)
    data[at + 12:at + 16] = struct.pack(">i", 0x10)
    log.write_bytes(bytes(data))

    assert {(f["code"], f["offset"]) for f in check_timer_store(Store(root))} >= \
        {("TIMER_MAGIC", at)}
    report = timer_report(Store(root), start_ms=BASE_MS)
    nxt = report["next_start"]
    assert nxt["timerlog_kept_end"] == position
    assert nxt["timer_queue_reread_from"] == cut   # queue offsets follow the TimerLog order here
    fates = {t["timerlog_offset"]: t["next_start"] for s in report["pending_slots"]
             for t in s["timers"]}
    assert {pos for pos, fate in fates.items() if fate == "re-enqueued-from-queue"} == \
        {pos for pos, _, _, _ in expected[cut:]}
    assert {fate for pos, fate in fates.items() if pos < position} == {"delivered-when-due"}


def test_a_lagging_master_timer_queue_offset_makes_timers_enqueued_twice(timer_store):
    """currQueueOffset is capped by masterTimerQueueOffset: messages whose units are kept get a
    second unit, and their timers fire twice."""
    root, expected = timer_store
    _set_master_timer_queue_offset(root, 15)
    report = timer_report(Store(root), start_ms=BASE_MS)
    assert report["next_start"]["timer_queue_reread_from"] == 15
    twice = sorted(t["queue_offset"] for s in report["pending_slots"] for t in s["timers"]
                   if t["next_start"] == "delivered-twice")
    assert twice == list(range(15, len(expected)))


def test_a_cancellation_unit_cancels_its_timer_and_neither_is_exported(tmp_path, mqtool):
    """A delete unit (magic DEFAULT|DELETE) whose message carries TIMER_DEL_UNIQKEY: the dequeue
    of that second drops the timer with that UNIQ_KEY."""
    root = tmp_path / "store"
    writer = StoreWriter(root, commitlog_file_size=64 * 1024, cq_units_per_file=300,
                         index_slots=100, index_entries=400, broker_version=5)
    timers = TimerWriter(root)
    due = BASE_MS + 5000
    offsets = []
    for i, extra in enumerate([{}, {}, {"TIMER_DEL_UNIQKEY": f"{1:032X}"}]):
        msg = Message(topic=timer_fmt.TIMER_TOPIC, queue_id=0, body=b"t%d" % i,
                      properties={"REAL_TOPIC": "TopicTest", "REAL_QID": "0",
                                  "TIMER_OUT_MS": str(due), "UNIQ_KEY": f"{i:032X}", **extra},
                      born_timestamp=BASE_MS, store_timestamp=BASE_MS)
        offset, size, _ = writer.put(msg)
        magic = timer_fmt.MAGIC_DEFAULT | (timer_fmt.MAGIC_DELETE if extra else 0)
        timers.enqueue(offset, size, due, BASE_MS, "TopicTest", magic=magic)
        offsets.append(offset)
    writer.close()
    timers.close(last_read_time_ms=BASE_MS, last_timer_queue_offset=3)
    _set_master_timer_queue_offset(root, 3)

    report = timer_report(Store(root), start_ms=BASE_MS)
    fates = {t["uniq_key"]: (t["kind"], t["next_start"])
             for t in report["pending_slots"][0]["timers"]}
    assert fates == {f"{0:032X}": ("timer", "delivered-when-due"),
                     f"{1:032X}": ("timer", "cancelled"),
                     f"{2:032X}": ("delete", "cancelled")}
    proc = mqtool("export", root, "--pending-timers")
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["commitlog_offset"] for line in proc.stdout.splitlines()] == \
        [offsets[0]]


def test_a_rolled_unit_goes_back_into_the_wheel(tmp_path):
    """A timer due beyond the roll window gets a unit with magic DEFAULT|ROLL in an earlier slot;
    at that slot the broker puts the message back into rmq_sys_wheel_timer rather than
    delivering it. Its unit's time is not its TIMER_OUT_MS, and that is no mismatch."""
    root = tmp_path / "store"
    writer = StoreWriter(root, commitlog_file_size=64 * 1024, cq_units_per_file=300,
                         index_slots=100, index_entries=400, broker_version=5)
    timers = TimerWriter(root)
    roll_at, due = BASE_MS + 5000, BASE_MS + 9 * 86_400_000
    msg = Message(topic=timer_fmt.TIMER_TOPIC, queue_id=0, body=b"later",
                  properties={"REAL_TOPIC": "TopicTest", "REAL_QID": "0",
                              "TIMER_OUT_MS": str(due), "UNIQ_KEY": f"{7:032X}"},
                  born_timestamp=BASE_MS, store_timestamp=BASE_MS)
    offset, size, _ = writer.put(msg)
    timers.enqueue(offset, size, roll_at, BASE_MS, "TopicTest",
                   magic=timer_fmt.MAGIC_DEFAULT | timer_fmt.MAGIC_ROLL)
    writer.close()
    timers.close(last_read_time_ms=BASE_MS, last_timer_queue_offset=1)
    _set_master_timer_queue_offset(root, 1)
    assert check_timer_store(Store(root)) == []
    [timer] = timer_report(Store(root), start_ms=BASE_MS)["pending_slots"][0]["timers"]
    assert (timer["kind"], timer["next_start"], timer["timer_out_ms"]) == \
        ("roll", "rolled-forward", due)
