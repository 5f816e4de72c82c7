"""predict_recovery against what the real brokers did on every reference store.

Expected values come from the brokers' own recover.json/dump.json/damage.json (or, for the
stores damaged here, from dump.json positions), never from mqtool."""
from __future__ import annotations

import gzip
import json
import shutil
import struct
from pathlib import Path

import pytest

from conftest import FIXTURE_STORE, reference_dirs, run_mqtool
from mqtool.recovery import (VERSION_49, VERSION_532, detect_broker_version, predict_recovery)
from mqtool.store import Store

REFERENCE = reference_dirs()
IDS = [("fixture:" if d == FIXTURE_STORE else "") + d.name for d in REFERENCE]
CQ_UNIT = struct.Struct(">qiq")


def _load(ref: Path, name: str):
    path = ref / name
    if not path.exists():
        return None
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _is_v5(ref: Path) -> bool:
    return _load(ref, "geometry.json")["rocketmqVersion"].startswith("5")


def _broker_options(ref: Path, recover: dict) -> dict:
    """The configuration the broker recovered with (5.3.3 records it in storeConfig)."""
    config = recover.get("storeConfig") or {}
    return dict(broker_version=VERSION_532 if _is_v5(ref) else VERSION_49,
                check_crc=recover.get("checkCRCOnRecover", True),
                force_verify_prop_crc=config.get("forceVerifyPropCRC", False),
                message_index_safe=config.get("messageIndexSafe", False))


def _raw_valid_units(store_dir: Path) -> int:
    """Units passing offset >= 0 and size > 0 in every ConsumeQueue file (read with struct)."""
    total = 0
    for path in (store_dir / "consumequeue").rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        for pos in range(0, len(data) - len(data) % 20, 20):
            offset, size, _ = CQ_UNIT.unpack_from(data, pos)
            if offset >= 0 and size > 0:
                total += 1
            else:
                break
    return total


@pytest.mark.parametrize("ref", REFERENCE, ids=IDS)
def test_prediction_equals_broker(ref):
    recover = _load(ref, "recover.json.gz")
    assert_prediction_equals_broker(ref / "store", recover, _broker_options(ref, recover),
                                    _is_v5(ref))


def assert_prediction_equals_broker(store_dir: Path, recover: dict, options: dict,
                                    v5: bool) -> None:
    """predict_recovery with ``options`` on ``store_dir`` says what the broker's recover.json
    shows its recovery did."""
    plan = predict_recovery(Store(store_dir), **options)
    before, after = recover["before"], recover["after"]
    assert plan.last_exit_ok is (not before["abortFileExists"])
    assert plan.mode == ("normal" if plan.last_exit_ok else "abnormal")
    assert plan.process_offset == recover["afterRecovery"]["maxPhyOffset"]
    kept = [f["name"] for f in after["commitlogFiles"]]
    assert plan.commitlog_files_kept == kept
    assert plan.commitlog_files_deleted == [f["name"] for f in before["commitlogFiles"]
                                            if f["name"] not in kept]
    before_index, after_index = set(before["indexFiles"]), set(after["indexFiles"])
    assert set(plan.index_files_deleted) == before_index - after_index
    assert set(plan.index_files_kept) == before_index & after_index
    if plan.last_exit_ok:
        # nothing is dispatched again on these stores, so the queues afterwards are exactly
        # what truncateDirtyLogicFiles left
        after_units = sum(len(q["units"]) for topic in recover["consumeQueues"].values()
                          for q in topic.values())
        assert plan.cq_units_truncated == _raw_valid_units(store_dir) - after_units
    else:
        assert plan.start_offset == 0  # "abnormal recovery re-dispatched from file 0"
    if v5:
        expected = recover["afterRecovery"]["checkpointInMemory"]["confirmPhyOffset"]
        assert plan.confirm_offset == expected


@pytest.mark.parametrize("ref", REFERENCE, ids=IDS)
def test_broker_version_detected(ref):
    expected = VERSION_532 if _is_v5(ref) else VERSION_49
    assert detect_broker_version(Store(ref / "store"))[0] == expected


DAMAGED = {"clean-small-damaged": 2_421_554, "v5-damaged": 4_232_040}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_damaged_store_truncation(shared_stores, name):
    ref = shared_stores / name
    damage = _load(ref, "damage.json")
    plan = predict_recovery(Store(ref / "store"), **_broker_options(ref, _load(ref, "recover.json.gz")))
    assert plan.process_offset == DAMAGED[name] == damage["message"]["commitLogOffset"]
    assert plan.stop_reason == "body-crc"
    assert plan.first_lost_offset == DAMAGED[name]
    # the damaged record itself and everything after it
    assert plan.messages_lost == 1 + damage["messagesInFileAfterDamaged"] + damage["messagesInLaterFiles"]
    assert plan.cut_file == damage["file"]
    assert plan.stop_position == damage["message"]["commitLogOffset"] - int(damage["file"])


def test_prop_crc_damage_only_seen_when_forced(shared_stores):
    ref = shared_stores / "v5-propcrc-damaged"
    damage = _load(ref, "damage.json")
    store = Store(ref / "store")
    forced = predict_recovery(store, broker_version=VERSION_532, force_verify_prop_crc=True)
    assert forced.process_offset == 2_477_500 == damage["message"]["commitLogOffset"]
    assert forced.stop_reason == "prop-crc"
    assert forced.messages_lost == 1 + damage["messagesInFileAfterDamaged"]
    default = predict_recovery(store, broker_version=VERSION_532)
    clean = _load(shared_stores / "v5-propcrc-clean", "recover.json.gz")
    assert default.process_offset == clean["afterRecovery"]["maxPhyOffset"]
    assert default.messages_lost == 0


@pytest.mark.parametrize("name", ["v5-clean", "v5-damaged", "v5-crash"])
def test_normal_start_file_per_version(shared_stores, name):
    ref = shared_stores / name
    estimate = _load(ref, "recover.json.gz")["normalRecoveryStartEstimate"]
    store = Store(ref / "store")
    v532 = predict_recovery(store, mode="normal", broker_version=VERSION_532)
    assert v532.start_file == estimate["normalRecoveryStartFile533"]
    v49 = predict_recovery(store, mode="normal", broker_version=VERSION_49)
    assert v49.start_file == estimate["rule498ThirdLastFile"]


def test_49_rules_stop_at_first_v2_record(shared_stores):
    ref = shared_stores / "v5-clean"
    messages = _load(ref, "dump.json.gz")["messages"]
    plan = predict_recovery(Store(ref / "store"), broker_version=VERSION_49)
    start = int(plan.start_file)
    first_v2 = min(m["commitLogOffset"] for m in messages
                   if m["messageVersion"] == "V2" and m["commitLogOffset"] >= start)
    assert plan.process_offset == first_v2
    assert plan.stop_reason == "v2-magic"
    assert plan.messages_lost == sum(1 for m in messages if m["commitLogOffset"] >= first_v2)


# --- the fixture store, changed here ---------------------------------------------------------------

def _fixture_messages():
    return _load(FIXTURE_STORE, "dump.json.gz")["messages"]


def _fixture_recover():
    return _load(FIXTURE_STORE, "recover.json.gz")


def test_zero_file_after_blank_is_kept(store_copy):
    """A preallocated zero file survives when processOffset is its first byte: the previous file
    ended with a blank, so the scan moves into the zero file and stops at its position 0."""
    commitlog = store_copy / "commitlog"
    last = commitlog / "00000000000002097152"
    size = last.stat().st_size
    last.unlink()
    last.write_bytes(bytes(size))
    plan = predict_recovery(Store(store_copy))
    assert plan.process_offset == 2_097_152
    assert plan.stop_reason == "unwritten"
    assert plan.commitlog_files_deleted == []
    assert plan.cut_file == "00000000000002097152"
    assert plan.messages_lost == 0
    assert plan.cq_truncate_called
    dispatched = [m for m in _fixture_messages()
                  if m["commitLogOffset"] >= 2_097_152 and m["sysFlag"] & 0xC in (0, 8)]
    assert plan.cq_units_truncated == len(dispatched)


def test_abnormal_start_and_index_deletion(store_copy):
    (store_copy / "abort").write_bytes(b"")
    recover = _fixture_recover()
    checkpoint = recover["before"]["checkpoint"]
    plan = predict_recovery(Store(store_copy))
    assert plan.mode == "abnormal" and not plan.last_exit_ok
    limit = min(checkpoint["physicMsgTimestamp"], checkpoint["logicsMsgTimestamp"]) - 3000
    firsts = {m["file"]: m["storeTimestamp"] for m in reversed(_fixture_messages())
              if m["filePos"] == 0}
    matching = [name for name, ts in sorted(firsts.items()) if ts <= limit]
    assert plan.start_file == (matching[-1] if matching else "00000000000000000000")
    deleted = {name for name, header in recover["before"]["indexFiles"].items()
               if header["endTimestamp"] > checkpoint["indexMsgTimestamp"]}
    assert set(plan.index_files_deleted) == deleted and deleted
    assert plan.process_offset == recover["afterRecovery"]["maxPhyOffset"]
    assert plan.redispatch_from == int(plan.start_file)


def test_abnormal_start_follows_checkpoint(store_copy):
    """With a checkpoint later than every message, the newest file is the start file."""
    (store_copy / "abort").write_bytes(b"")
    newest = max(m["storeTimestamp"] for m in _fixture_messages())
    page = bytearray((store_copy / "checkpoint").read_bytes())
    for pos in (0, 8, 16):
        page[pos:pos + 8] = struct.pack(">q", newest + 3_600_000)
    (store_copy / "checkpoint").write_bytes(bytes(page))
    plan = predict_recovery(Store(store_copy))
    assert plan.start_file == "00000000000002097152"
    assert plan.index_files_deleted == []
    assert plan.process_offset == _fixture_recover()["afterRecovery"]["maxPhyOffset"]


def test_damage_before_the_scanned_files_is_not_seen(tmp_path):
    """4.9 normal recovery starts at the third-to-last file: with a fourth, zero file the first
    file is not scanned and a CRC error there is not truncated (as the README says)."""
    store_dir = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", store_dir)
    (store_dir / "commitlog" / "00000000000003145728").write_bytes(bytes(1_048_576))
    victim = next(m for m in _fixture_messages()
                  if m["file"] == "00000000000000000000" and m["bodyLength"] > 10)
    path = store_dir / "commitlog" / victim["file"]
    data = bytearray(path.read_bytes())
    # the body starts after the 84-byte fixed part plus the 4-byte body length (IPv4 hosts)
    body = victim["filePos"] + 88
    data[body] ^= 0xFF
    path.write_bytes(bytes(data))
    plan = predict_recovery(Store(store_dir))
    assert plan.start_file == "00000000000001048576"
    assert plan.process_offset == _fixture_recover()["afterRecovery"]["maxPhyOffset"]
    assert plan.commitlog_files_deleted == ["00000000000003145728"]


def test_plan_is_json(store_copy):
    plan = predict_recovery(Store(store_copy))
    document = json.loads(json.dumps(plan.to_dict()))
    assert document["process_offset"] == plan.process_offset
    assert document["broker_version"] == VERSION_49


def test_bad_arguments(store_copy):
    with pytest.raises(ValueError):
        predict_recovery(Store(store_copy), mode="sideways")
    with pytest.raises(ValueError):
        predict_recovery(Store(store_copy), broker_version="3.0")


@pytest.mark.parametrize("ref", reference_dirs(), ids=lambda p: p.name)
def test_batch_judge_equals_record_judge(ref, tmp_path):
    """FileJudge.feed_batch (recover's hot path) decides exactly as feed, record by record, for
    every rule variant, on the scanner's batches of every file; a flipped body byte included."""
    import dataclasses
    from mqtool.recovery import BrokerRules, FileJudge
    from mqtool.scan import RecordBatch, Scanner
    root = ref / "store" if (ref / "store").is_dir() else ref
    if not (root / "commitlog").is_dir():
        pytest.skip("no unpacked CommitLog")
    work = tmp_path / "store"
    shutil.copytree(root, work)
    store = Store(work)
    seg = store.commitlog.segments[0]
    with_body = next((r for r in Scanner(store.commitlog, check_crc=False).scan_segment(seg)
                      if type(r).__name__ == "MessageRecord" and r.body_length > 0), None)
    if with_body is not None:
        # a byte inside a body: its CRC fails from that record on
        with open(seg.path, "r+b") as fh:
            fh.seek(with_body.body_position - seg.base_offset)
            byte = fh.read(1)
            fh.seek(with_body.body_position - seg.base_offset)
            fh.write(bytes([byte[0] ^ 0xFF]))
    for store_root in (root, work):
        store = Store(store_root)
        for version in (VERSION_49, VERSION_532):
            for force in (False, True):
                rules = BrokerRules(version, True, force, True)
                scanner = Scanner(store.commitlog, check_crc=True, resync=True)
                for seg in store.commitlog.segments:
                    one, many = FileJudge(seg, rules), FileJudge(seg, rules)
                    for event in scanner.scan_segment_batches(seg):
                        if type(event) is not RecordBatch:
                            one.feed(event)
                            many.feed(event)
                            continue
                        accepted = 0
                        for rec in event.records():
                            one.feed(rec)
                            accepted += not one.stopped
                        assert many.feed_batch(event) == accepted
                        assert dataclasses.asdict(many.verdict) == dataclasses.asdict(one.verdict)
                        assert many.stopped == one.stopped


# --- one file's verdict: batches of records judge as the records one by one -------------------------

@pytest.mark.parametrize("kind", ["bit-flip", "torn-tail", "zero-range"])
def test_file_verdicts_from_batches_equal_record_by_record(tmp_path, kind):
    """judge_segment feeds the scanner's record batches to FileJudge; fed every record as an
    object instead, it must reach the same verdict (stop, reason, what lies after) in every file
    of a damaged store, under each rule set."""
    import dataclasses
    from mqtool import forge
    from mqtool.recovery import VERSION_50, BrokerRules, FileJudge, judge_segment
    from mqtool.scan import Scanner

    root = tmp_path / kind
    forge.make_store(root, forge.ForgeOptions(messages=1500, seed=5, broker_version=5,
                                              commitlog_file_size=128 * 1024))
    for seed in range(3):
        forge.damage_store(root, kind, seed=seed)
    store = Store(root)
    rules_sets = [BrokerRules(VERSION_49), BrokerRules(VERSION_50),
                  BrokerRules(VERSION_532, force_verify_prop_crc=True),
                  BrokerRules(VERSION_532, check_crc=False)]
    for rules in rules_sets:
        scanner = Scanner(store.commitlog, check_crc=rules.check_crc, resync=True)
        for segment in store.commitlog.segments:
            judge = FileJudge(segment, rules)
            for event in scanner.scan_segment(segment):
                judge.feed(event)
            batched = judge_segment(segment, rules)
            assert dataclasses.asdict(batched) == dataclasses.asdict(judge.verdict), \
                (rules, segment.name)


@pytest.mark.parametrize("crash", [False, True])
def test_prediction_is_the_same_with_files_judged_in_worker_processes(tmp_path, crash):
    """predict_recovery(workers=N) judges the files in forked processes: the plan is the one
    a single process makes, on a store damaged in several files."""
    from mqtool import forge

    root = tmp_path / "store"
    forge.make_store(root, forge.ForgeOptions(messages=1500, seed=8, crash=crash,
                                              commitlog_file_size=128 * 1024))
    for seed in range(2):
        forge.damage_store(root, "bit-flip", seed=seed)
    forge.damage_store(root, "zero-range", seed=1)
    store = Store(root)
    one = predict_recovery(store, mode="abnormal").to_dict()
    assert one["messages_lost"] > 0
    for workers in (2, 3):
        assert predict_recovery(store, mode="abnormal", workers=workers).to_dict() == one
    assert predict_recovery(store, workers=2).to_dict() == predict_recovery(store).to_dict()


def test_dirty_logic_truncation_sees_the_queue_files_recover_left(tmp_path):
    """ConsumeQueue.recover's truncateDirtyFiles deletes the files past a queue's valid end
    before the CommitLog recovery calls truncateDirtyLogicFiles: the truncation neither deletes
    nor counts them again, and recover leaves the queue where the prediction says."""
    store_dir = tmp_path / "store"
    assert run_mqtool("fixture", "make", store_dir, "-n", "1500", "--seed", "3",
                      "--commitlog-file-size", "256k", "--cq-units", "50",
                      "--topics", "TopicTest", "--queues", "1").returncode == 0
    files = sorted((store_dir / "consumequeue" / "TopicTest" / "0").iterdir())
    middle, last = files[-2], files[-1]
    data = bytearray(middle.read_bytes())
    units = [CQ_UNIT.unpack_from(data, 20 * i) for i in range(10)]
    data[200:220] = bytes(20)       # unit 10 invalid: the valid end lies in the middle file
    middle.write_bytes(bytes(data))
    # the CommitLog scan stops at unit 5's record, so the queue reaches past processOffset
    po = units[5][0]
    cl_file = store_dir / "commitlog" / f"{po - po % 262_144:020d}"
    with open(cl_file, "r+b") as fh:
        fh.seek(po % 262_144)
        fh.write(bytes(100))
    base_unit = int(middle.name) // 20
    plan = predict_recovery(Store(store_dir))
    assert (plan.mode, plan.broker_version, plan.process_offset) == ("normal", VERSION_49, po)
    (cut,) = [t for t in plan.cq_truncations if t.topic == "TopicTest"]
    assert cut.files_deleted == []          # the last file went with ConsumeQueue.recover
    assert cut.units == sum(1 for offset, _, _ in units if offset >= po) == 5
    assert cut.new_end == base_unit + 5
    out = tmp_path / "out"
    assert run_mqtool("recover", "--out", out, store_dir).returncode == 1
    queue = out / "consumequeue" / "TopicTest" / "0"
    assert not (queue / last.name).exists()
    kept = (queue / middle.name).read_bytes()
    assert [CQ_UNIT.unpack_from(kept, 20 * i)[0] for i in range(5)] == [u[0] for u in units[:5]]
    assert kept[100:] == bytes(len(kept) - 100)
