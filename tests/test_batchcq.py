"""5.x BatchConsumeQueues: the forge writes them through the one writer; checks find damage."""
from __future__ import annotations

import json
import struct

import pytest

from mqtool.batchcq import check_batch_consume_queues
from mqtool.forge import ForgeOptions, make_store
from mqtool.formats import codecs
from mqtool.scan import Scanner
from mqtool.store import Store


def unit_position(rec) -> tuple[int, int]:
    """(msgBaseOffset, batchSize) the broker gives a record's unit: an inner batch (sysFlag
    0x80) starts at its INNER_BASE and holds INNER_NUM messages, any other record is one."""
    if rec.sys_flag & 0x80:
        props = rec.properties
        return int(props["INNER_BASE"]), int(props["INNER_NUM"])
    return rec.queue_offset, 1


@pytest.fixture
def batch_store(tmp_path):
    root = tmp_path / "store"
    make_store(root, ForgeOptions(messages=500, seed=4, broker_version=5,
                                  batch_cq_topics=("OrderTopic",)))
    return root


def test_batch_topic_dispatches_to_batchconsumequeue_only(batch_store, mqtool):
    store = Store(batch_store)
    assert {q.topic for q in store.batch_consume_queues} == {"OrderTopic"}
    assert "OrderTopic" not in {q.topic for q in store.consume_queues}
    expected = {}
    for rec in Scanner(store.commitlog).messages():
        if rec.topic == "OrderTopic" and rec.sys_flag & 0xC in (0, 0x8):
            props = rec.properties
            expected.setdefault(rec.queue_id, []).append(
                (rec.offset, rec.total_size,
                 codecs.tags_code(rec.topic, props, rec.store_timestamp), rec.store_timestamp,
                 *unit_position(rec), -1, 0))
    # the forge sends inner batches to a BatchCQ topic as well as single messages
    assert {u[5] > 1 for units in expected.values() for u in units} == {True, False}
    for queue_id, units in expected.items():
        path = batch_store / "batchconsumequeue" / "OrderTopic" / str(queue_id) / f"{0:020d}"
        data = path.read_bytes()
        assert len(data) == 300 * 46
        written = [struct.unpack_from(">qiqqqhii", data, 46 * i) for i in range(len(units))]
        assert written == units
        assert data[46 * len(units):46 * (len(units) + 1)] == bytes(46)
        proc = mqtool("dump", "--json", path)
        rows = [json.loads(line) for line in proc.stdout.splitlines()]
        valid = [r for r in rows if r["record_type"] == "batchconsumequeue/unit"
                 and r["status"] == "valid"]
        assert [r["msg_base_offset"] for r in valid] == [u[4] for u in units]
    assert check_batch_consume_queues(store) == []


def test_checks_name_the_damaged_units(batch_store):
    path = batch_store / "batchconsumequeue" / "OrderTopic" / "1" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[8:12] = struct.pack(">i", 17)                   # unit 0: wrong size
    data[46 + 28:46 + 36] = struct.pack(">q", 99)        # unit 1: msgBaseOffset off the sequence
    data[92:100] = struct.pack(">q", 5)                  # unit 2: points into a record
    path.write_bytes(bytes(data))
    found = sorted((f["code"], f["offset"]) for f in check_batch_consume_queues(Store(batch_store)))
    assert found == [("BCQ_DANGLING", 92), ("BCQ_GAP", 46), ("BCQ_GAP", 92),
                     ("BCQ_MISMATCH", 0), ("BCQ_MISMATCH", 46)]


def test_batch_topics_need_a_5x_store(tmp_path):
    with pytest.raises(Exception, match="broker-version 5"):
        make_store(tmp_path / "x", ForgeOptions(messages=10, batch_cq_topics=("OrderTopic",)))


def test_verify_reports_batch_queue_damage(batch_store, mqtool):
    proc = mqtool("verify", "--json", batch_store)
    assert proc.returncode == 0, proc.stdout
    path = batch_store / "batchconsumequeue" / "OrderTopic" / "1" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[8:12] = struct.pack(">i", 17)
    path.write_bytes(bytes(data))
    proc = mqtool("verify", "--json", batch_store)
    assert proc.returncode == 1
    found = [(f["code"], f["file"], f["offset"]) for f in json.loads(proc.stdout)["findings"]
             if f["code"].startswith("BCQ_")]
    assert found == [("BCQ_MISMATCH", "batchconsumequeue/OrderTopic/1/00000000000000000000", 0)]


@pytest.mark.parametrize("engine", ["batches", "records"])
def test_verify_reports_records_without_a_batch_unit(batch_store, engine):
    """Record -> unit: erased trailing units and a deleted queue directory leave records of the
    batch topic unreferenced; verify names them (the expectation comes from the scanner)."""
    from mqtool.verify import verify_store
    store = Store(batch_store)
    records = {}
    for rec in Scanner(store.commitlog).messages():
        if rec.topic == "OrderTopic" and rec.sys_flag & 0xC in (0, 0x8):
            records.setdefault(rec.queue_id, []).append(rec.offset)
    queue1 = batch_store / "batchconsumequeue" / "OrderTopic" / "1" / f"{0:020d}"
    data = bytearray(queue1.read_bytes())
    kept = len(records[1]) - 3
    data[46 * kept:46 * len(records[1])] = bytes(46 * 3)
    queue1.write_bytes(bytes(data))
    for path in (batch_store / "batchconsumequeue" / "OrderTopic" / "2").iterdir():
        path.unlink()
    (batch_store / "batchconsumequeue" / "OrderTopic" / "2").rmdir()

    report = verify_store(Store(batch_store), engine=engine)
    missing = sorted((f.queue_id, f.commitlog_offset, f.count)
                     for f in report.findings if f.code == "BCQ_MISSING")
    assert missing == sorted([(1, records[1][kept], 3), (2, records[2][0], len(records[2]))])
    assert not [f for f in report.findings if f.code == "CQ_MISSING"]


def _expected_batch_units(store: Store, below: int) -> dict[int, list[tuple]]:
    """The units the broker's dispatch writes for OrderTopic's records below ``below``, read off
    the records by the scanner (not by the writer under test)."""
    expected: dict[int, list[tuple]] = {}
    for rec in Scanner(store.commitlog).messages():
        if rec.offset < below and rec.topic == "OrderTopic" and rec.sys_flag & 0xC in (0, 0x8):
            expected.setdefault(rec.queue_id, []).append(
                (rec.offset, rec.total_size,
                 codecs.tags_code(rec.topic, rec.properties, rec.store_timestamp),
                 rec.store_timestamp, *unit_position(rec), -1, 0))
    return expected


def _batch_units(root, queue_id: int) -> list[tuple]:
    units = []
    directory = root / "batchconsumequeue" / "OrderTopic" / str(queue_id)
    for path in sorted(directory.iterdir(), key=lambda p: int(p.name)):
        data = path.read_bytes()
        for pos in range(0, len(data) - len(data) % 46, 46):
            unit = struct.unpack_from(">qiqqqhii", data, pos)
            if unit[1] <= 0:
                return units
            units.append(unit)
    return units


@pytest.mark.parametrize("how", ["crash", "bit-flip"])
def test_recover_keeps_batch_topics_in_their_batch_queues(tmp_path, how):
    """A crashed store's batch topic is re-dispatched into its BatchConsumeQueues (never into
    consumequeue/); after a cut, units pointing past the recovered end are gone."""
    from mqtool.repair import run_repair
    from mqtool.verify import verify_store
    root = tmp_path / "store"
    make_store(root, ForgeOptions(messages=1500, seed=2, broker_version=5, crash=how == "crash",
                                  batch_cq_topics=("OrderTopic",),
                                  commitlog_file_size=1 << 20))
    if how == "bit-flip":
        from mqtool.forge import damage_store
        last = Store(root).commitlog.segments[-1]
        damage_store(root, "bit-flip", 0, file=f"commitlog/{last.name}")
    else:
        # the crash left the batch queues behind the CommitLog: recovery dispatches the rest
        missing = [f for f in verify_store(Store(root)).findings if f.code == "BCQ_MISSING"]
        assert missing and {f.severity for f in missing} == {"warning"}
    result = run_repair("recover", root)
    po = result.plan.recovery.process_offset
    assert not (root / "consumequeue" / "OrderTopic").exists()
    store = Store(root)
    for queue_id, units in _expected_batch_units(store, po).items():
        assert _batch_units(root, queue_id) == units, queue_id
    errors = [f for f in verify_store(store).findings if f.severity == "error"]
    assert errors == []


def test_rebuild_queues_and_truncate_handle_batch_queues(tmp_path):
    from mqtool.repair import run_repair
    root = tmp_path / "store"
    make_store(root, ForgeOptions(messages=1500, seed=2, broker_version=5,
                                  batch_cq_topics=("OrderTopic",),
                                  commitlog_file_size=1 << 20))
    queue1 = root / "batchconsumequeue" / "OrderTopic" / "1" / f"{0:020d}"
    queue1.write_bytes(bytes(len(queue1.read_bytes())))
    result = run_repair("rebuild-queues", root)
    assert not (root / "consumequeue" / "OrderTopic").exists()
    expected = _expected_batch_units(Store(root), result.plan.recovery.process_offset)
    for queue_id, units in expected.items():
        assert _batch_units(root, queue_id) == units, queue_id

    # cut at the start of the 40th OrderTopic record of queue 2: its units from there go
    cut = expected[2][40][0]
    run_repair("truncate", root, to=cut)
    assert not (root / "consumequeue" / "OrderTopic").exists()
    for queue_id, units in _expected_batch_units(Store(root), cut).items():
        assert _batch_units(root, queue_id) == units, queue_id
    assert len(_batch_units(root, 2)) == 40


def test_forge_inner_batches_are_whole_and_counted(tmp_path):
    """Every inner batch the forge writes parses with the one declaration into INNER_NUM
    messages with their own UNIQ_KEYs, and the summary's queue offsets count inner messages."""
    from mqtool.formats import innerbatch
    root = tmp_path / "store"
    summary = make_store(root, ForgeOptions(messages=300, seed=9, broker_version=5,
                                            batch_cq_topics=("OrderTopic",)))
    store = Store(root)
    next_offset: dict[int, int] = {}
    inner_batches = 0
    for rec in Scanner(store.commitlog).messages():
        if rec.topic != "OrderTopic" or rec.sys_flag & 0xC not in (0, 0x8):
            continue
        base, size = unit_position(rec)
        assert base == rec.queue_offset == next_offset.get(rec.queue_id, 0)
        next_offset[rec.queue_id] = base + size
        if rec.sys_flag & 0x80:
            raw = (root / "commitlog" / f"{0:020d}").read_bytes()
            inner = innerbatch.parse_inner_batch(
                raw[rec.body_position:rec.body_position + rec.body_length])
            assert len(inner) == size >= 2
            assert len({m.uniq_key for m in inner} | {rec.properties["UNIQ_KEY"]}) == size + 1
            inner_batches += 1
    assert inner_batches > 0
    assert summary["queue_offsets"]["OrderTopic"] == {str(q): n for q, n in
                                                      sorted(next_offset.items())}
