"""BatchConsumeQueues against the real 5.3.3 broker (v5-batchcq-clean / v5-batchcq-crash):
the units mqtool reads and derives equal the broker's ``batchConsumeQueues`` and raw files,
``recover`` / ``rebuild-queues`` write the broker's bytes, ``verify`` names damaged units of a real
store, and ``query --queue --offset`` answers a queue offset inside a batch as getMessage does.
Tests on ../shared skip cleanly when it is absent."""
from __future__ import annotations

import gzip
import json
import shutil
import struct
from pathlib import Path

import pytest

from conftest import SHARED_STORES
from mqtool.formats import codecs
from mqtool.scan import Scanner
from mqtool.store import Store

BATCHCQ_STORES = ["v5-batchcq-clean", "v5-batchcq-crash"]
UNIT = struct.Struct(">qiqqqhii")   # the 46-byte unit, written from the Java field list


def ref_of(name: str) -> Path:
    ref = SHARED_STORES / name
    if not (ref / "recover.json.gz").is_file():
        pytest.skip(f"../shared/rocketmq-stores/{name} is absent")
    return ref


def recover_json(ref: Path) -> dict:
    with gzip.open(ref / "recover.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


def disk_units(root: Path, topic: str, queue_id: int) -> list[tuple]:
    """Every written unit of a BatchConsumeQueue, read with struct (not with mqtool)."""
    units = []
    directory = root / "batchconsumequeue" / topic / str(queue_id)
    for path in sorted(directory.iterdir(), key=lambda p: int(p.name)):
        data = path.read_bytes()
        for pos in range(0, len(data) - len(data) % UNIT.size, UNIT.size):
            unit = UNIT.unpack_from(data, pos)
            if unit[1] <= 0:
                break
            units.append(unit)
    return units


def bcq_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted((root / "batchconsumequeue").rglob("*")) if p.is_file()}


@pytest.fixture
def copy_of(tmp_path):
    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(ref_of(name) / "store", dest)
        return dest
    return copy


@pytest.mark.parametrize("name", BATCHCQ_STORES)
def test_units_equal_the_brokers_batch_consume_queues(name, mqtool):
    """The units on disk as ``dump`` reads them equal the broker's raw files, and the units the
    dispatch rule derives from each CommitLog record (INNER_BASE/INNER_NUM, tagsCode, store
    time) equal the broker's iterator view ``batchConsumeQueues``."""
    ref = ref_of(name)
    recover = recover_json(ref)
    broker = recover["batchConsumeQueues"]
    raw_files = recover["batchConsumeQueueRawFiles"]
    assert broker and set(broker) == set(raw_files)
    for topic, queues in raw_files.items():
        for queue_id, files in queues.items():
            for f in files:
                path = ref / "recovered" / "batchconsumequeue" / topic / queue_id / f["name"]
                proc = mqtool("dump", "--json", path)
                assert proc.returncode == 0, proc.stderr
                rows = [json.loads(line) for line in proc.stdout.splitlines()]
                valid = [r for r in rows if r["record_type"] == "batchconsumequeue/unit"
                         and r["status"] == "valid"]
                assert [[r["commitlog_offset"], r["size"], r["tags_code"], r["store_timestamp"],
                         r["msg_base_offset"], r["batch_size"], r["compacted_offset"],
                         r["reserved"]] for r in valid] == f["rawUnits"]
    derived: dict[tuple[str, int], list[list[int]]] = {}
    po = recover["afterRecovery"]["maxPhyOffset"]
    for rec in Scanner(Store(ref / "store").commitlog).messages(end=po):
        if rec.topic in broker and rec.sys_flag & 0xC in (0, 0x8):
            props = rec.properties
            base, batch = codecs.batch_position(props, rec.queue_offset)
            derived.setdefault((rec.topic, rec.queue_id), []).append(
                [base, rec.offset, rec.total_size,
                 codecs.tags_code(rec.topic, props, rec.store_timestamp), batch, -1])
    for topic, queues in broker.items():
        for queue_id, q in queues.items():
            assert derived[(topic, int(queue_id))] == q["units"], (topic, queue_id)
            last = q["units"][-1]
            assert q["maxOffset"] == last[0] + last[4] == \
                recover["afterRecovery"]["batchTopicQueueTable"][f"{topic}-{queue_id}"]


@pytest.mark.parametrize("name", BATCHCQ_STORES)
def test_rebuild_queues_writes_the_brokers_bytes(name, copy_of):
    """Every unit zeroed (the file sizes kept: they are the store's geometry): rebuild-queues
    writes every BatchConsumeQueue file of recovered/ byte for byte."""
    from mqtool.repair import run_repair
    root = copy_of(name)
    for path in (root / "batchconsumequeue").rglob("*"):
        if path.is_file():
            path.write_bytes(bytes(path.stat().st_size))
    run_repair("rebuild-queues", root, broker_version="5.3.2+")
    assert not (root / "consumequeue" / "BatchTopic").exists()
    assert bcq_files(root) == bcq_files(ref_of(name) / "recovered")


@pytest.mark.parametrize("name", BATCHCQ_STORES)
def test_recover_redispatches_batch_units_byte_for_byte(name, copy_of, mqtool):
    """Units from the recovery's re-dispatch point on erased (on the crash store that is every
    unit: abnormal recovery dispatches from the start; on the clean store the point lies past
    the last BatchTopic record, so nothing is erased): ``mqtool recover`` writes them again and
    every BatchConsumeQueue file equals the broker's recovered/ bytes."""
    from mqtool.recovery import predict_recovery
    ref = ref_of(name)
    root = copy_of(name)
    plan = predict_recovery(Store(root), broker_version="5.3.2+")
    redispatch = (plan.redispatch_from if plan.redispatch_from is not None
                  else plan.process_offset)
    erased = 0
    for path in (root / "batchconsumequeue").rglob("*"):
        if not path.is_file():
            continue
        data = bytearray(path.read_bytes())
        for pos in range(0, len(data) - len(data) % UNIT.size, UNIT.size):
            unit = UNIT.unpack_from(data, pos)
            if unit[1] > 0 and unit[0] >= redispatch:
                data[pos:pos + UNIT.size] = bytes(UNIT.size)
                erased += 1
        path.write_bytes(bytes(data))
    assert (erased > 0) == (name == "v5-batchcq-crash")
    proc = mqtool("recover", root, "--broker-version", "5.3.2+")
    assert proc.returncode == 0, proc.stderr
    assert bcq_files(root) == bcq_files(ref / "recovered")


@pytest.mark.parametrize("name", BATCHCQ_STORES)
def test_verify_names_damaged_units_of_a_real_store(name, copy_of, mqtool):
    root = copy_of(name)
    proc = mqtool("verify", "--json", root)
    assert not [f for f in json.loads(proc.stdout)["findings"]
                if f["code"].startswith("BCQ_") and f["severity"] == "error"
                or f["code"] == "CL_INNER_BATCH"]
    path = root / "batchconsumequeue" / "BatchTopic" / "1" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    units = [UNIT.unpack_from(data, i * UNIT.size) for i in range(4)]
    data[8:12] = struct.pack(">i", units[0][1] + 1)                       # unit 0: size
    data[UNIT.size + 28:UNIT.size + 36] = struct.pack(">q", units[1][4] + 1000)  # unit 1: base
    data[3 * UNIT.size:3 * UNIT.size + 8] = struct.pack(">q", units[3][0] + 5)  # into a record
    path.write_bytes(bytes(data))
    proc = mqtool("verify", "--json", root)
    assert proc.returncode == 1, proc.stderr
    found = sorted((f["code"], f["offset"]) for f in json.loads(proc.stdout)["findings"]
                   if f["code"].startswith("BCQ_")
                   and f["file"] == "batchconsumequeue/BatchTopic/1/00000000000000000000")
    assert found == [("BCQ_DANGLING", 3 * UNIT.size), ("BCQ_GAP", UNIT.size),
                     ("BCQ_GAP", 2 * UNIT.size), ("BCQ_MISMATCH", 0),
                     ("BCQ_MISMATCH", UNIT.size)]


@pytest.mark.parametrize("name", BATCHCQ_STORES)
def test_queue_offset_inside_a_batch_resolves_as_getmessage(name):
    """The broker's getMessage scan of each queue (recover.json ``getMessageScan``): each call
    returned whole batch records and continued at msgBaseOffset + batchSize. Every queue offset
    from a record's stored offset up to the next one resolves to that record."""
    from mqtool.query import NotFound, query_queue_offset
    ref = ref_of(name)
    recover = recover_json(ref)
    store = Store(ref / "recovered")
    for topic, queues in recover["batchConsumeQueues"].items():
        for queue_id, q in queues.items():
            scan = recover["getMessageScan"][topic][queue_id]
            starts = scan["storedQueueOffsets"] + [q["maxOffset"]]
            assert len(scan["commitLogOffsets"]) == scan["messagesReturned"] == len(q["units"])
            for i, phy in enumerate(scan["commitLogOffsets"]):
                for offset in range(starts[i], starts[i + 1]):
                    result = query_queue_offset(store, topic, int(queue_id), offset)
                    [found] = result.found
                    assert found.record.offset == phy, (topic, queue_id, offset)
                    assert result.details["unit"]["next_offset"] == starts[i + 1]
            with pytest.raises(NotFound):
                query_queue_offset(store, topic, int(queue_id), q["maxOffset"])


def test_query_cli_on_a_batch_queue(mqtool):
    ref = ref_of("v5-batchcq-crash")
    recover = recover_json(ref)
    unit = next(u for u in recover["batchConsumeQueues"]["BatchTopic"]["0"]["units"] if u[4] > 2)
    inside = unit[0] + 2
    proc = mqtool("query", ref / "store", "--topic", "BatchTopic", "--queue", "0", "--offset",
                  inside, "--json", "--body", "none")
    assert proc.returncode == 0, proc.stderr
    message, summary = [json.loads(line) for line in proc.stdout.splitlines()]
    assert message["commitlog_offset"] == unit[1] and message["queue_offset"] == unit[0]
    assert message["sys_flag"] & 0xC0 == 0xC0 and message["found_by"] == "batch-consume-queue"
    assert summary["unit"]["msg_base_offset"] == unit[0]
    assert summary["unit"]["batch_size"] == unit[4]
    assert any("inside the batch" in n for n in summary["notes"])
    for args, text in ((["--queue", "9", "--offset", "1"], "has no queue 9 (queues: 0, 1, 2, 3)"),
                       (["--queue", "0", "--time", "1795564802075"], "lookup by time is not")):
        proc = mqtool("query", ref / "store", "--topic", "BatchTopic", *args)
        assert proc.returncode == 2 and text in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1
