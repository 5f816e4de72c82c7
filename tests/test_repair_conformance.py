"""mqtool recover / rebuild-* against what the real brokers did on every reference store.

For each store the broker's own results are the expectation: the ``recovered/`` directory it
left after starting on a copy of ``store/`` (files and bytes), and ``recover.json.gz`` (its
ConsumeQueue units, checkpoint and queryMessage answers). The fixture copy of clean-small has no
``recovered/`` directory: there the units and queryMessage answers of recover.json are used.
Tests on ../shared skip cleanly when it is absent."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from conftest import FIXTURE_STORE, reference_dirs
from mqtool.repair import query_index, query_message_offsets, run_repair
from mqtool.store import Store
from test_repair import load_json, queue_units, snapshot

REFERENCE = reference_dirs()
IDS = [("fixture:" if d == FIXTURE_STORE else "") + d.name for d in REFERENCE]
# 5.3.3's shutdown backs up the compaction position checkpoint it persists; mqtool writes that
# bookkeeping only along with a real recovery, so on a store with nothing to do it is the one
# file the broker has and mqtool does not
V5_CLEAN_START_ONLY = "compaction/position-checkpoint.bak"
# Two 5.3.3 runs of the same commit persisted this empty checkpoint in two JSON spellings (the
# source's fastjson form {"empty":true,"queueOffsetMap":{}} with tabs in v5-crash, a two-space form
# without "empty" in v5-batchcq-crash), and nothing in store/ says which a run will use: the bytes
# are not predictable, the content is, so it is compared as JSON
POSITION_CHECKPOINT = "compaction/position-checkpoint"


def _position_offsets(root: Path) -> dict:
    return json.loads((root / POSITION_CHECKPOINT).read_bytes())["queueOffsetMap"]


def _recovered_as_slave(recover: dict) -> bool:
    """The head-* timer stores were recovered by a SLAVE (so that no timer fired): a slave's
    dispatch also moves physicMsgTimestamp to each dispatched record's store time, which a
    master's recovery (what mqtool does) leaves alone."""
    return (recover.get("storeConfig") or {}).get("brokerRole") == "SLAVE"


def _options(ref: Path) -> dict:
    recover = load_json(ref / "recover.json.gz")
    config = recover.get("storeConfig") or {}
    v5 = load_json(ref / "geometry.json")["rocketmqVersion"].startswith("5")
    return dict(broker_version="5.3.2+" if v5 else "4.9",
                check_crc=recover.get("checkCRCOnRecover", True),
                force_verify_prop_crc=config.get("forceVerifyPropCRC", False),
                message_index_safe=config.get("messageIndexSafe", False))


def _recover_copy(ref: Path, tmp_path: Path, **extra) -> tuple[Path, object]:
    store = tmp_path / "store"
    shutil.copytree(ref / "store", store)
    result = run_repair("recover", store, **_options(ref), **extra)
    return store, result


def _broker_units(recover: dict) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    """(commitLogOffset, size, tagsCode) of every unit the broker's queues hold after recovery."""
    out = {}
    for topic, queues in recover["consumeQueues"].items():
        for queue_id, q in queues.items():
            units = sorted(q["units"])
            assert [u[0] for u in units] == list(range(q["minOffset"], q["maxOffset"]))
            out[(topic, int(queue_id))] = [tuple(u[1:]) for u in units]
    return out




@pytest.mark.parametrize("ref", REFERENCE, ids=IDS)
def test_recover_equals_broker(ref, tmp_path):
    recovered = ref / "recovered"
    store = assert_recover_equals_broker(ref / "store", load_json(ref / "recover.json.gz"),
                                         recovered if recovered.is_dir() else None,
                                         _options(ref), tmp_path)
    again = run_repair("recover", store, **_options(ref))
    assert again.status == "nothing to do"


def assert_recover_equals_broker(source: Path, recover: dict, broker: Path | None,
                                 options: dict, tmp_path: Path) -> Path:
    """``mqtool recover`` on a copy of ``source`` leaves what the broker's recovery did:
    ``recover`` is its recover.json, ``broker`` the recovered/ folder it left (None: absent).
    Returns the recovered copy."""
    po = recover["afterRecovery"]["maxPhyOffset"]
    store = tmp_path / "store"
    shutil.copytree(source, store)
    result = run_repair("recover", store, **options)
    assert result.plan.recovery.process_offset == po
    # CommitLog: the files the broker kept, bytes equal up to processOffset, erased after it
    kept = [f["name"] for f in recover["after"]["commitlogFiles"]]
    assert sorted(p.name for p in (store / "commitlog").iterdir()) == kept
    for name in kept:
        ours = (store / "commitlog" / name).read_bytes()
        original = (source / "commitlog" / name).read_bytes()
        cut = max(0, min(len(original), po - int(name)))
        assert ours[:cut] == original[:cut], name
        assert not any(ours[cut:]), name
    # ConsumeQueues: every unit the broker's queues hold, nothing valid after them
    expected = _broker_units(recover)
    for (topic, queue_id), units in expected.items():
        assert queue_units(store, topic, queue_id) == units, (topic, queue_id)
    # up to each queue's end the files are the broker's own bytes
    if broker is not None:
        for path in (broker / "consumequeue").rglob("*"):
            if path.is_file():
                rel = path.relative_to(broker)
                ours = store / rel
                assert ours.exists(), rel
                n = 20 * len(queue_units(store, rel.parts[1], int(rel.parts[2])))
                assert ours.read_bytes()[:n] == path.read_bytes()[:n], rel
    # index lookups: the broker's queryMessage answers
    st = Store(store)
    for q in recover["queryMessage"]:
        assert query_index(st, q["topic"], q["key"]) == q["offsets"], (q["topic"], q["key"])
    # checkpoint written as the broker writes it at shutdown, except that timestamps later than
    # the newest message kept (the broker keeps those of dropped messages) are lowered to it
    ours = struct.unpack_from(">qqqqq", (store / "checkpoint").read_bytes())
    cp = recover["after"]["checkpoint"]
    newest = [m["storeTimestamp"] for m in recover["commitlogMessages"] if m["offset"] < po][-1]
    want = [min(cp[k], newest) for k in ("physicMsgTimestamp", "logicsMsgTimestamp",
                                         "indexMsgTimestamp")]
    if _recovered_as_slave(recover):
        ours, want = ours[1:], want[1:]
    assert list(ours[:len(want)]) == want
    ours = struct.unpack_from(">qqqqq", (store / "checkpoint").read_bytes())
    if broker is not None:
        theirs = struct.unpack_from(">qqqqq", (broker / "checkpoint").read_bytes())
        assert ours[3:] == theirs[3:]
    assert not (store / "abort").exists()
    return store


@pytest.mark.parametrize("ref", [r for r in REFERENCE if (r / "recovered").is_dir()],
                         ids=[i for r, i in zip(REFERENCE, IDS) if (r / "recovered").is_dir()])
def test_recover_keep_stale_is_byte_identical(ref, tmp_path):
    assert_keep_stale_identical(ref / "store", load_json(ref / "recover.json.gz"),
                                ref / "recovered", _options(ref), tmp_path)


def assert_keep_stale_identical(source: Path, recover: dict, broker: Path, options: dict,
                                tmp_path: Path) -> None:
    """With --keep-stale every file is the broker's, byte for byte (IndexFiles the broker
    re-created carry its wall-clock names, so they are compared in name order)."""
    store = tmp_path / "store"
    shutil.copytree(source, store)
    result = run_repair("recover", store, keep_stale=True, **options)
    ours, theirs = snapshot(store), snapshot(broker)
    if result.status == "nothing to do":
        theirs.pop(V5_CLEAN_START_ONLY, None)
    ours_index = [v for k, v in sorted(ours.items()) if k.startswith("index/")]
    theirs_index = [v for k, v in sorted(theirs.items()) if k.startswith("index/")]
    assert ours_index == theirs_index
    ours = {k: v for k, v in ours.items() if not k.startswith("index/")}
    theirs = {k: v for k, v in theirs.items() if not k.startswith("index/")}
    assert ours.keys() == theirs.keys()
    if POSITION_CHECKPOINT in ours:
        assert _position_offsets(store) == _position_offsets(broker)
        del ours[POSITION_CHECKPOINT], theirs[POSITION_CHECKPOINT]
    differ = [k for k in ours if ours[k] != theirs[k]]
    if _recovered_as_slave(recover) and "checkpoint" in differ:
        # all but the physicMsgTimestamp a slave's dispatch sets
        assert (store / "checkpoint").read_bytes()[8:] == (broker / "checkpoint").read_bytes()[8:]
        differ.remove("checkpoint")
    assert differ == []
    st = Store(store)
    po = recover["afterRecovery"]["maxPhyOffset"]
    for q in recover["queryMessage"]:
        assert query_message_offsets(st, q["topic"], q["key"], po) == q["offsets"]


def test_crash_lost_small_delay_units_keep_the_tags_hash(shared_stores, tmp_path):
    """4.9 recovers before loading the schedule service: SCHEDULE_TOPIC_XXXX units rebuilt by
    abnormal recovery carry the TAGS hash, not the delivery time - as the broker's files do."""
    ref = shared_stores / "crash-lost-small"
    store, _ = _recover_copy(ref, tmp_path)
    broker = ref / "recovered" / "consumequeue" / "SCHEDULE_TOPIC_XXXX"
    hashed = 0
    for path in broker.rglob("*"):
        if path.is_file():
            rel = path.relative_to(ref / "recovered")
            assert (store / rel).read_bytes() == path.read_bytes()
            data = path.read_bytes()
            hashed += sum(1 for p in range(0, len(data), 20)
                          if struct.unpack_from(">q", data, p + 12)[0] < 10 ** 12
                          and struct.unpack_from(">i", data, p + 8)[0] > 0)
    assert hashed > 0


@pytest.mark.parametrize("name", ["clean-small", "clean-multi", "delay-delivered-small",
                                  "v6-unicode-small", "v5-clean", "v5-propcrc-clean"])
def test_rebuild_queues_equals_broker_files(shared_stores, tmp_path, name):
    ref = shared_stores / name
    store = tmp_path / "store"
    shutil.copytree(ref / "store", store)
    shutil.rmtree(store / "consumequeue")
    result = run_repair("rebuild-queues", store, cq_units=300,
                        broker_version=_options(ref)["broker_version"])
    assert result.status == "repaired"
    broker = ref / "recovered" / "consumequeue"
    ours = {p.relative_to(store / "consumequeue"): p for p in (store / "consumequeue").rglob("*")
            if p.is_file()}
    theirs = {p.relative_to(broker): p for p in broker.rglob("*") if p.is_file()}
    assert ours.keys() == theirs.keys()
    for rel, path in ours.items():
        assert path.read_bytes() == theirs[rel].read_bytes(), rel


@pytest.mark.parametrize("name", ["clean-multi", "crash-small", "v5-clean", "v6-unicode-small"])
def test_rebuild_index_lookups_equal_broker(shared_stores, tmp_path, name):
    ref = shared_stores / name
    store = tmp_path / "store"
    shutil.copytree(ref / "store", store)
    shutil.rmtree(store / "index")
    result = run_repair("rebuild-index", store, slots=1000, entries=4000,
                        broker_version=_options(ref)["broker_version"])
    assert result.status == "repaired"
    st = Store(store)
    recover = load_json(ref / "recover.json.gz")
    po = recover["afterRecovery"]["maxPhyOffset"]
    # crash-small: the broker's answers count the boundary message indexed twice by its
    # abnormal recovery; a fresh build indexes it once
    for q in recover["queryMessage"]:
        got = query_message_offsets(st, q["topic"], q["key"], po)
        if name == "crash-small":
            assert sorted(set(got)) == sorted(set(q["offsets"])), (q["topic"], q["key"])
        else:
            assert got == q["offsets"], (q["topic"], q["key"])


def test_fixture_recover_json_units(store_copy):
    """The fixture's clean-small: recover changes nothing and the queues hold exactly the units
    of the broker's recover.json."""
    recover = load_json(FIXTURE_STORE / "recover.json.gz")
    result = run_repair("recover", store_copy, broker_version="4.9")
    assert result.status == "nothing to do"
    for (topic, queue_id), units in _broker_units(recover).items():
        assert queue_units(store_copy, topic, queue_id) == units
