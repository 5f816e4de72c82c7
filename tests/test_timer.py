"""The 5.x timer store: written by the one writer, dumped and checked."""
from __future__ import annotations

import json
import struct

import pytest

from mqtool.formats import codecs
from mqtool.formats import timer as timer_fmt
from mqtool.scan import Scanner
from mqtool.store import Store
from mqtool.timer import check_timer_store, iter_timerlog, iter_timerwheel
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
    timers.close(last_read_time_ms=BASE_MS)
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
    # the slot's units are now on no chain: the broker's dequeue never reaches them
    assert found == {("TIMER_MAGIC", f"timerlog/{log.name}", 52),
                     ("TIMER_DANGLING", f"timerlog/{log.name}", 104),
                     ("TIMER_SLOT_POINTER", "timerwheel", at),
                     ("TIMER_UNREACHABLE", f"timerlog/{log.name}", used_first_unit(root, used))}


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
