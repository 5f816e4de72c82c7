"""RocksDB-backed 5.x stores, read without writing into them: the RocksDB ConsumeQueue
(``consumequeue/`` is the database) and the RocksDB consumer offsets (``config/consumerOffsets/``),
checked against what the real 5.3.3 broker and its RocksDB wrote and answered
(``../shared/rocketmq-stores/rocks-*``: rocksdb-cq.json, recover.json, offsets-loaded.json).

Every database is read through a shadow folder (copies of its small files, links to its SSTs):
the store's bytes, modification times and directory listing stay as they were. Damaged
databases (a CURRENT naming a missing MANIFEST, a torn SST, keys that do not decode, values of
the wrong length) give findings or one line, never a traceback.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_mqtool, shared_json
from test_layout_refusal import file_states

pytest.importorskip("rocksdict")

from mqtool.consumers import consumer_report  # noqa: E402
from mqtool.formats import rocksdb_cq as rfmt  # noqa: E402
from mqtool.rocksdb_cq import load_rocksdb_cq  # noqa: E402
from mqtool.rocksdb_offsets import load_rocksdb_offsets  # noqa: E402
from mqtool.store import Store  # noqa: E402

CQ_STORES = ("rocks-cq-crash", "rocks-cq-restart-crash")



@pytest.fixture(scope="module")
def stores(unpack_shared, tmp_path_factory) -> dict[tuple[str, str], Path]:
    """(store name, part) -> a private copy of store/ or recovered/ (reloaded/ for offsets)."""
    base = tmp_path_factory.mktemp("rocks")
    out = {}
    for name, parts in (("rocks-cq-crash", ("store", "recovered")),
                        ("rocks-cq-restart-crash", ("store", "recovered")),
                        ("rocks-consumer-offsets", ("store", "reloaded"))):
        for part in parts:
            source = unpack_shared(name, f"{part}.tar.gz")
            dest = base / name / part
            shutil.copytree(source, dest, symlinks=True)
            out[name, part] = dest
    return out


def units_of(table) -> list[tuple]:
    return sorted((q.topic, q.queue_id, *u.to_list()) for q in table.queues.values()
                  for u in q.units)


# --- what the database holds ---------------------------------------------------------------------

@pytest.mark.parametrize("name", CQ_STORES)
def test_every_unit_and_entry_equals_the_brokers_database(name, stores):
    listing = shared_json(name, "rocksdb-cq.json.gz")
    for part in ("store", "recovered"):
        table = load_rocksdb_cq(Store(stores[name, part]))
        entries = listing[part]["entries"]
        expected = sorted((e["topic"], e["queueId"], e["cqOffset"], e["phyOffset"], e["size"],
                           e["tagsCode"], e["storeTime"]) for e in entries["default"])
        assert units_of(table) == expected
        maxima = {(e["topic"], e["queueId"]): (e["phyOffset"], e["cqOffset"])
                  for e in entries["offset"] if e["kind"] == "max" and "cqOffset" in e}
        assert {k: q.max_entry for k, q in table.queues.items() if q.max_entry} == maxima
        checkpoint = [e["maxPhyOffset"] for e in entries["offset"]
                      if e["topic"] == rfmt.CHECKPOINT_TOPIC]
        assert table.checkpoint == (checkpoint[0] if checkpoint else None)
        assert table.problems == [] and table.stale_count == 0


@pytest.mark.parametrize("name", CQ_STORES)
def test_served_queues_equal_the_brokers_rocksdb_cq_answers(name, stores):
    """recover.json consumeQueues: the broker's own RocksDB CQ API on the recovered store."""
    answers = shared_json(name, "recover.json.gz")["consumeQueues"]
    table = load_rocksdb_cq(Store(stores[name, "recovered"]))
    for topic, queues in answers.items():
        for qid, answer in queues.items():
            queue = table.queue(topic, int(qid))
            assert (queue.min_offset, queue.max_offset) == (answer["minOffset"],
                                                            answer["maxOffset"])
            assert [u.to_list() for u in queue.served] == answer["units"]


def test_dump_info_and_query_on_the_recovered_store(stores):
    name = "rocks-cq-restart-crash"
    root = stores[name, "recovered"]
    answers = shared_json(name, "recover.json.gz")["consumeQueues"]
    proc = run_mqtool("dump", "--json", root / "consumequeue")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    units = [r for r in records if r["record_type"] == "rocksdb-cq/unit"]
    assert len(units) == 2946 and {r["status"] for r in units} == {"served"}
    assert [r["max_commitlog_offset"] for r in records
            if r["record_type"] == "rocksdb-cq/checkpoint"] == [3978105]

    proc = run_mqtool("info", "--json", root)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    seen = {(row["topic"], row["queue_id"]): row["consume_queue"] for row in info["topics"]}
    for topic, queues in answers.items():
        for qid, answer in queues.items():
            cq = seen[topic, int(qid)]
            assert (cq["min_offset"], cq["max_offset"], cq["units"]) == (
                answer["minOffset"], answer["maxOffset"], len(answer["units"]))
    assert info["consume_queues"]["rocksdb"]["checkpoint"] == 3978105

    for topic, qid, pick in (("TopicTest", "1", 5), ("OrderTopic", "3", -1)):
        unit = answers[topic][qid]["units"][pick]
        proc = run_mqtool("query", root, "--topic", topic, "--queue", qid, "--offset", unit[0],
                          "--json")
        assert proc.returncode == 0, proc.stderr
        found = json.loads(proc.stdout.splitlines()[0])
        assert (found["commitlog_offset"], found["total_size"]) == (unit[1], unit[2])
    end = answers["TopicTest"]["1"]["maxOffset"]
    proc = run_mqtool("query", root, "--topic", "TopicTest", "--queue", "1", "--offset", end)
    assert proc.returncode != 0 and len(proc.stderr.splitlines()) == 1
    assert f"serves 0..{end - 1}" in proc.stderr


# --- consumer offsets ----------------------------------------------------------------------------

def _loaded() -> dict[str, dict[int, int]]:
    loaded = shared_json("rocks-consumer-offsets", "offsets-loaded.json")["loaded"]
    return {key: {int(q): v for q, v in queues.items()} for key, queues in loaded.items()}


@pytest.mark.parametrize("part", ["store", "reloaded"])
def test_rocksdb_consumer_offsets_load_as_the_broker_loads_them(part, stores):
    root = stores["rocks-consumer-offsets", part]
    loaded = load_rocksdb_offsets(root)
    assert loaded.table == _loaded()
    assert (loaded.kv_counter, loaded.json_counter, loaded.merged_json) == (3, 2, False)
    report = consumer_report(Store(root), None)
    assert report.offsets_source == "consumerOffsets/"
    rows = {(f"{r.topic}@{r.group}", r.queue_id): r.committed_offset for r in report.rows}
    assert rows == {(key, q): v for key, queues in _loaded().items() for q, v in queues.items()}


def test_a_newer_legacy_json_is_merged_over_rocksdb(stores, tmp_path):
    """RocksDBConsumerOffsetManager.merge: consumerOffset.json wins, whole topic@group entries,
    when its dataVersion counter is higher than the database's."""
    root = tmp_path / "store"
    shutil.copytree(stores["rocks-consumer-offsets", "store"], root)
    path = root / "config" / "consumerOffset.json"
    path.write_text(path.read_text().replace('"counter":2', '"counter":7'))
    loaded = load_rocksdb_offsets(root)
    assert loaded.merged_json and (loaded.kv_counter, loaded.json_counter) == (3, 7)
    expected = _loaded()
    expected.update({"OrderTopic@GroupB": {0: 82, 1: 559, 2: 448, 3: 19},
                     "OrderTopic@GroupA": {0: 838, 1: 192, 2: 576, 3: 734},
                     "TopicTest@GroupA": {0: 294, 1: 566, 2: 544, 3: 289},
                     "TopicTest@GroupB": {0: 208, 1: 89, 2: 918, 3: 34}})
    assert loaded.table == expected


def test_consumer_lag_against_a_rocksdb_consume_queue(stores, tmp_path):
    """A group's lag on the recovered RocksDB store: messages and bytes of the served units
    from its offset, the oldest one's store time (as recover.json lists them)."""
    root = tmp_path / "store"
    shutil.copytree(stores["rocks-cq-restart-crash", "recovered"], root)
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "consumerOffset.json").write_text(
        '{"offsetTable":{"TopicTest@G":{0:200,1:202},"OrderTopic@G":{2:10}}}')
    units = shared_json("rocks-cq-restart-crash", "recover.json.gz")["consumeQueues"]
    report = consumer_report(Store(root), None)
    for row in report.rows:
        served = units[row.topic][str(row.queue_id)]["units"]
        rest = [u for u in served if u[0] >= row.committed_offset]
        assert (row.max_offset, row.lag_messages, row.lag_bytes) == (
            len(served), len(rest), sum(u[2] for u in rest))
        assert row.oldest_unconsumed_store_time == (rest[0][4] if rest else None)


# --- the store is never written ------------------------------------------------------------------

@pytest.mark.parametrize("key", [("rocks-cq-restart-crash", "store"),
                                 ("rocks-consumer-offsets", "store")], ids="/".join)
def test_read_commands_leave_the_store_as_it_was(key, stores):
    root = stores[key]
    digests = file_states(root, digest=True)
    stats = file_states(root, digest=False)
    commands = [("info", "--json", root), ("consumers", "--json", root)]
    if key[0] != "rocks-consumer-offsets":
        commands += [("dump", "--json", root / "consumequeue"), ("verify", "--quick", root),
                     ("query", root, "--topic", "TopicTest", "--queue", "0", "--offset", "3")]
    for argv in commands:
        proc = run_mqtool(*argv)
        assert proc.returncode in (0, 1), (argv, proc.stderr)
        assert file_states(root, digest=False) == stats, argv
    assert file_states(root, digest=True) == digests
    assert not list(root.rglob("rocksdict-config.json"))


# --- stale units and damaged databases -----------------------------------------------------------

def forge(folder: Path, puts=(), deletes=()) -> None:
    """Write keys into a COPY of a RocksDB database (never a store under test)."""
    from rocksdict import Options, Rdict
    names = Rdict.list_cf(str(folder), Options(raw_mode=True))
    db = Rdict(str(folder), Options(raw_mode=True),
               column_families={n: Options(raw_mode=True) for n in names if n != "default"})
    try:
        for family, key, value in puts:
            db.get_column_family(family)[key] = value
        for family, key in deletes:
            del db.get_column_family(family)[key]
        db.flush()
    finally:
        db.close()
    (folder / "rocksdict-config.json").unlink(missing_ok=True)


def unit_key(topic: str, queue_id: int, queue_offset: int) -> bytes:
    raw = topic.encode()
    return (len(raw).to_bytes(4, "big") + b"\x01" + raw + b"\x01" + queue_id.to_bytes(4, "big")
            + b"\x01" + queue_offset.to_bytes(8, "big"))


def unit_value(phy: int, size: int, tags: int = 0, time: int = 0) -> bytes:
    return (phy.to_bytes(8, "big") + size.to_bytes(4, "big") + tags.to_bytes(8, "big")
            + time.to_bytes(8, "big"))


@pytest.fixture(scope="module")
def forged(stores, tmp_path_factory) -> Path:
    """recovered/ of rocks-cq-restart-crash with a stale unit past TopicTest 1's max entry (as
    a truncation leaves one), a key that does not decode and a unit value of 20 bytes."""
    root = tmp_path_factory.mktemp("forged") / "store"
    shutil.copytree(stores["rocks-cq-restart-crash", "recovered"], root)
    forge(root / "consumequeue", puts=[
        ("default", unit_key("TopicTest", 1, 203), unit_value(3_000_000, 400, 7, 1)),
        ("default", b"\x00\x00\x00\x09\x02TopicTest", unit_value(1, 1)),
        ("default", unit_key("OrderTopic", 9, 0), unit_value(0, 876)[:20]),
    ])
    return root


def test_stale_units_are_shown_not_served(forged):
    table = load_rocksdb_cq(Store(forged))
    queue = table.queue("TopicTest", 1)
    assert queue.max_offset == 203 and [u.queue_offset for u in queue.stale] == [203]
    assert len(table.problems) == 2
    proc = run_mqtool("query", forged, "--topic", "TopicTest", "--queue", "1", "--offset", "203")
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1   # not found
    assert "a stale unit past the queue's max entry (202)" in proc.stderr
    proc = run_mqtool("dump", "--json", forged / "consumequeue")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    stale = [r for r in records if r.get("status") == "stale"]
    assert [(r["topic"], r["queue_id"], r["queue_offset"]) for r in stale] == [
        ("TopicTest", 1, 203)]
    problems = [r["detail"] for r in records if r["record_type"] == "rocksdb-cq/problem"]
    assert len(problems) == 2 and any("unit value of 20 bytes" in p for p in problems)


def _damaged(stores, tmp_path, how: str) -> Path:
    root = tmp_path / "store"
    shutil.copytree(stores["rocks-cq-restart-crash", "store"], root)
    db = root / "consumequeue"
    if how == "missing-manifest":
        (db / "CURRENT").write_text("MANIFEST-000099\n")
    elif how == "torn-sst":
        sst = max(db.glob("*.sst"), key=lambda p: p.stat().st_size)
        sst.write_bytes(sst.read_bytes()[: sst.stat().st_size // 2])
    elif how == "flipped-sst":
        sst = max(db.glob("*.sst"), key=lambda p: p.stat().st_size)
        data = bytearray(sst.read_bytes())
        data[200] ^= 0xFF
        sst.write_bytes(bytes(data))
    return root


@pytest.mark.parametrize("how", ["missing-manifest", "torn-sst", "flipped-sst"])
def test_a_damaged_database_gives_one_line_and_stays_untouched(how, stores, tmp_path):
    root = _damaged(stores, tmp_path, how)
    before = file_states(root, digest=True)
    for argv in (("dump", root / "consumequeue"), ("info", root),
                 ("query", root, "--topic", "TopicTest", "--queue", "0", "--offset", "0")):
        proc = run_mqtool(*argv)
        assert proc.returncode == 2, (argv, proc.stdout[-300:], proc.stderr)
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("mqtool: error: ") and \
            "RocksDB cannot" in lines[0], (argv, proc.stderr)
    assert file_states(root, digest=True) == before


# --- verify: every unit against its record, and the broker's recovery predicted ------------------

@pytest.mark.parametrize("name", CQ_STORES)
def test_the_predicted_recovery_is_the_brokers(name, stores):
    """Start file (the one holding the CQ checkpoint), processOffset, and every unit the start
    leaves in RocksDB equal the real broker's recovery (recover.json, recovered/)."""
    from mqtool.recovery import predict_recovery
    from mqtool.rocksdb_recovery import predict_rocksdb_units
    store = Store(stores[name, "store"])
    plan = predict_recovery(store)
    after = predict_rocksdb_units(store, plan)
    answers = shared_json(name, "recover.json.gz")
    expected = {(topic, int(qid)): [tuple(u[:4]) for u in q["units"]]
                for topic, queues in answers["consumeQueues"].items()
                for qid, q in queues.items()}
    assert after.queues == expected
    assert after.stale == {}
    recovered = load_rocksdb_cq(Store(stores[name, "recovered"]))
    assert plan.process_offset == answers["afterRecovery"]["maxPhyOffset"] == recovered.checkpoint
    start = {"rocks-cq-crash": "00000000000000000000",
             "rocks-cq-restart-crash": "00000000000001048576"}[name]   # README: the broker's
    assert (plan.start_file, plan.redispatch_from) == (start, int(start))


@pytest.mark.parametrize("name", CQ_STORES)
def test_verify_checks_every_unit_and_reports_the_start(name, stores):
    for part in ("store", "recovered"):
        proc = run_mqtool("verify", "--json", stores[name, part])
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        codes = {f["code"] for f in report["findings"]}
        assert not codes & {"CQ_MISSING", "CQ_MISMATCH", "CQ_DANGLING"}, codes
        rocks = report["recovery"]["rocksdb"]
        units = len(shared_json(name, "rocksdb-cq.json.gz")["recovered"]["entries"]["default"])
        assert (rocks["units_after_start"], rocks["stale_units_after_start"]) == (units, 0)


def test_verify_reports_a_forged_database(forged):
    proc = run_mqtool("verify", "--json", forged)
    assert proc.returncode == 1, proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    undecodable = [f for f in findings if f["code"] == "CQ_MISMATCH" and "cannot read" in
                   f["message"]]
    assert len(undecodable) == 2
    rocks = json.loads(proc.stdout)["recovery"]["rocksdb"]
    assert rocks["stale_units_now"] == 1


# --- rebuild-queues --out: the RocksDB queues as file ConsumeQueues --------------------------------

def test_rebuild_queues_exports_file_consume_queues(stores, tmp_path):
    """The units the next start leaves, as file ConsumeQueues in a separate folder: read back
    they are the broker's recovered units, and with the broker-recovered CommitLog they make a
    file-CQ store verify finds consistent. The store is only read."""
    name = "rocks-cq-restart-crash"
    source = stores[name, "store"]
    before = file_states(source, digest=True)
    out = tmp_path / "export"
    proc = run_mqtool("rebuild-queues", source, "--out", out, "--cq-units", 300)
    assert proc.returncode == 0, proc.stderr
    assert file_states(source, digest=True) == before
    # built under a hidden sibling and renamed whole: nothing else is left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
    from mqtool.inspect import iter_consume_queue_file
    answers = shared_json(name, "recover.json.gz")["consumeQueues"]
    for topic, queues in answers.items():
        for qid, answer in queues.items():
            files = sorted((out / topic / qid).iterdir())
            units = [[r["queue_offset"], r["commitlog_offset"], r["size"], r["tags_code"]]
                     for f in files for r in iter_consume_queue_file(f)
                     if r["record_type"] == "consumequeue/unit" and r["status"] == "valid"]
            assert units == [u[:4] for u in answer["units"]], (topic, qid)
    store = tmp_path / "file-store"
    shutil.copytree(stores[name, "recovered"], store)
    shutil.rmtree(store / "consumequeue")
    shutil.copytree(out, store / "consumequeue")
    proc = run_mqtool("verify", "--json", store)
    report = json.loads(proc.stdout)
    codes = {f["code"] for f in report["findings"] if f["severity"] == "error"}
    assert not {c for c in codes if c.startswith("CQ_")}, codes


# --- recover: the CommitLog and checkpoint as the broker leaves them, RocksDB left to it ---------

@pytest.mark.parametrize("name", CQ_STORES)
def test_recover_cuts_the_commitlog_and_leaves_rocksdb_to_the_broker(name, stores, tmp_path):
    """The CommitLog files and the checkpoint's fields become the broker's (recovered/); the
    RocksDB folder is not touched; the abort file stays, so the broker's next start re-dispatches
    into RocksDB exactly what its real recovery did (predicted on the result); undo puts every
    byte back."""
    from mqtool.recovery import predict_recovery
    from mqtool.rocksdb_recovery import predict_rocksdb_units
    root = tmp_path / "store"
    shutil.copytree(stores[name, "store"], root)
    original = file_states(root, digest=True)
    rocks_before = file_states(root / "consumequeue", digest=False)
    backup = tmp_path / "backup"
    proc = run_mqtool("recover", root, "--backup-dir", backup)
    assert proc.returncode == 0, proc.stderr
    assert "is left for the broker's next start" in proc.stdout + proc.stderr
    assert file_states(root / "consumequeue", digest=False) == rocks_before
    recovered = stores[name, "recovered"]
    assert sorted(p.name for p in (root / "commitlog").iterdir()) == sorted(
        p.name for p in (recovered / "commitlog").iterdir())
    for path in (recovered / "commitlog").iterdir():
        assert (root / "commitlog" / path.name).read_bytes() == path.read_bytes()
    assert (root / "checkpoint").read_bytes()[:40] == (recovered / "checkpoint").read_bytes()[:40]
    assert (root / "abort").is_file()
    store = Store(root)
    plan = predict_recovery(store)
    after = predict_rocksdb_units(store, plan)
    answers = shared_json(name, "recover.json.gz")["consumeQueues"]
    assert after.queues == {(t, int(q)): [tuple(u[:4]) for u in a["units"]]
                            for t, queues in answers.items() for q, a in queues.items()}
    proc = run_mqtool("undo", backup)
    assert proc.returncode == 0, proc.stderr
    assert file_states(root, digest=True) == original
