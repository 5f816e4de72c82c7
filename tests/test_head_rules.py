"""The 5.3.4+ family (RocketMQ's store code after 5.3.3) against the stores that code wrote and
recovered (``head-*``, shipped as tarballs), and 5.3.3's recovery of the same stores against the
5.3.2+ rules.

Expectations come from the brokers' own files: recover.json.gz / recovered/ (the newest code),
recover-5.3.3.json.gz / recovered-5.3.3/ (5.3.3), damage.json, dump.json.gz."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import shared_json
from mqtool.inspect import store_info
from mqtool.passport import store_passport
from mqtool.recovery import VERSION_532, VERSION_534, predict_recovery
from mqtool.repair import run_repair
from mqtool.store import Store
from mqtool.verify import verify_store
from test_recovery_prediction import assert_prediction_equals_broker
from test_repair_conformance import assert_keep_stale_identical, assert_recover_equals_broker

FIRSTREC = "head-clean-damaged-firstrec"
BATCHCQ_TIMER = "head-batchcq-timer-crash"
HEAD_STORES = (FIRSTREC, BATCHCQ_TIMER)
# (family, the broker's recover.json, the recovered/ tarball)
RECOVERIES = {VERSION_534: ("recover.json.gz", "recovered.tar.gz"),
              VERSION_532: ("recover-5.3.3.json.gz", "recovered-5.3.3.tar.gz")}



def _options(recover: dict, version: str) -> dict:
    config = recover.get("storeConfig") or {}
    return dict(broker_version=version, check_crc=recover.get("checkCRCOnRecover", True),
                force_verify_prop_crc=config.get("forceVerifyPropCRC", False),
                message_index_safe=config.get("messageIndexSafe", False))


@pytest.fixture(scope="module")
def head_store(unpack_shared):
    """name -> the unpacked store/ of a head-* store (read-only: copy before changing)."""
    return lambda name: unpack_shared(name, "store.tar.gz")


@pytest.mark.parametrize("version", sorted(RECOVERIES))
@pytest.mark.parametrize("name", HEAD_STORES)
def test_prediction_equals_each_brokers_recovery(head_store, name, version):
    recover = shared_json(name, RECOVERIES[version][0])
    options = _options(recover, version)
    assert_prediction_equals_broker(head_store(name), recover, options, True)
    # verify's prediction (fed by its own scan's file verdicts) says the same
    assert options.pop("check_crc")     # verify always checks CRCs (but with --quick)
    plan = verify_store(Store(head_store(name)), workers=1, **options).recovery
    assert plan.broker_version == version
    assert plan.process_offset == recover["afterRecovery"]["maxPhyOffset"]
    assert plan.commitlog_files_kept == [f["name"] for f in recover["after"]["commitlogFiles"]]
    assert plan.confirm_offset == \
        recover["afterRecovery"]["checkpointInMemory"]["confirmPhyOffset"]
    # after 5.3.3 the ConsumeQueues are truncated whether or not they reach processOffset
    if version == VERSION_534:
        assert plan.cq_truncate_called


@pytest.mark.parametrize("version", sorted(RECOVERIES))
@pytest.mark.parametrize("name", HEAD_STORES)
def test_recover_equals_each_brokers_recovery(head_store, unpack_shared, tmp_path, name,
                                              version):
    recover_file, recovered_tar = RECOVERIES[version]
    recover = shared_json(name, recover_file)
    broker = unpack_shared(name, recovered_tar)
    options = _options(recover, version)
    store = assert_recover_equals_broker(head_store(name), recover, broker, options,
                                         tmp_path / "plain")
    assert_keep_stale_identical(head_store(name), recover, broker, options, tmp_path / "stale")
    again = run_repair("recover", store, **options).plan.recovery
    if name == FIRSTREC and version == VERSION_532:
        # 5.3.3 cut the queues back below the last file, so its next start begins one file
        # earlier and meets the older damage the newest code found at once
        assert again.process_offset == 2_599_700
    else:
        assert again.process_offset == recover["afterRecovery"]["maxPhyOffset"]
        assert not again.truncates


def test_firstrec_start_file_and_truncation_per_family(head_store):
    """The damaged first record of the last data file: the newest code starts one file earlier
    and meets the older damage there; 5.3.3 starts in the last file and cuts at its start."""
    damage = shared_json(FIRSTREC, "damage.json")
    store = Store(head_store(FIRSTREC))
    newest = predict_recovery(store, broker_version=VERSION_534)
    assert newest.start_file == "00000000000002097152"
    assert "00000000000003145728" in newest.start_reason
    assert newest.process_offset == 2_599_700
    assert newest.stop_reason == "body-crc"
    assert newest.commitlog_files_deleted == ["00000000000003145728"]
    older = predict_recovery(store, broker_version=VERSION_532)
    assert older.start_file == "00000000000003145728"
    assert older.process_offset == 3_145_728
    assert older.commitlog_files_deleted == []
    records = {f["name"]: f
               for f in shared_json(FIRSTREC, "recover.json.gz")["after"]["commitlogFiles"]}
    assert sorted(records) == newest.commitlog_files_kept
    # 406 more records are lost under the newest rules (README)
    dump = shared_json(FIRSTREC, "dump.json.gz")["messages"]
    kept = {v: sum(1 for m in dump if m["commitLogOffset"] < p.process_offset)
            for v, p in ((VERSION_534, newest), (VERSION_532, older))}
    assert kept == {VERSION_534: 1_973, VERSION_532: 2_379}
    assert damage  # the store's own account of the two damaged records exists


def test_checking_the_first_record_needs_the_crc_check(head_store):
    """Without checkCRCOnRecover the damaged first record decodes: the newest code starts in
    the last file as 5.3.3 does."""
    plan = predict_recovery(Store(head_store(FIRSTREC)), broker_version=VERSION_534,
                            check_crc=False)
    assert plan.start_file == "00000000000003145728"


def _own_property_batch_records(name: str) -> int:
    """From the broker's own decode (dump.json): producer messages (with a UNIQ_KEY) lacking the
    CLUSTER every send gets, outside inner batches and the broker's own topics."""
    return sum(1 for m in shared_json(name, "dump.json.gz")["messages"]
               if "UNIQ_KEY" in (m["properties"] or {}) and "CLUSTER" not in m["properties"]
               and not m["sysFlag"] & 0x80
               and not m["topic"].startswith(("rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC")))


def test_passport_tells_the_newest_classic_batches_apart(head_store, shared_stores):
    """head-batchcq-timer-crash holds classic batches whose messages carry their own UNIQ_KEY
    and no CLUSTER: evidence for 5.3.4+, which info's passport and verify's automatic rules
    follow. 5.3.3's classic batches (v5-batchcq-clean) are no such evidence."""
    expected = _own_property_batch_records(BATCHCQ_TIMER)
    assert expected == 100      # the README's 28 classic batches on TopicTest: 100 records
    store = Store(head_store(BATCHCQ_TIMER))
    info = store_info(store)
    assert info["commitlog"]["own_property_batch_records"] == expected
    passport = info["passport"]
    assert passport["recovery_rules"] == VERSION_534
    assert any(c["claim"] == VERSION_534 and f"{expected:,}" in c["evidence"]
               for c in passport["claims"])
    for engine in ("batches", "records"):
        report = verify_store(store, workers=1, engine=engine)
        assert report.summary["own_property_batch_records"] == expected
        assert report.recovery.broker_version == VERSION_534
    older = Store(shared_stores / "v5-batchcq-clean" / "store")
    assert _own_property_batch_records("v5-batchcq-clean") == 0
    assert store_info(older)["passport"]["recovery_rules"] == VERSION_532
    assert verify_store(older, workers=1).recovery.broker_version == VERSION_532
    # without records to go on (no scan), the passport cannot tell 5.3.4+ from 5.3.2+
    assert store_passport(store)["recovery_rules"] == VERSION_532


def test_broker_version_option_accepts_the_new_family(head_store, mqtool, tmp_path):
    proc = mqtool("verify", head_store(FIRSTREC), "--broker-version", VERSION_534, "--json")
    doc = json.loads(proc.stdout)
    assert doc["recovery"]["broker_version"] == VERSION_534
    assert doc["recovery"]["process_offset"] == 2_599_700
    bad = mqtool("verify", head_store(FIRSTREC), "--broker-version", "5.3.5")
    assert bad.returncode == 2 and VERSION_534 in bad.stderr


# --- classic batches both ways, fixture make, config files --------------------------------------

def _names(raw: bytes) -> list[bytes]:
    """Property names of a stored property string, in order, repeats kept (split by hand)."""
    return [pair.split(b"\x01", 1)[0] for pair in raw.split(b"\x02") if pair]


@pytest.fixture(scope="module")
def made_both_ways(tmp_path_factory):
    """The same forged mix (seed, classic batches, a consumer group) as 5.3.3 and as 5.3.4+."""
    from mqtool import forge
    out = {}
    for version in ("5", VERSION_534):
        major, newest = forge.parse_forge_version(version)
        root = tmp_path_factory.mktemp("made") / "store"
        summary = forge.make_store(root, forge.ForgeOptions(
            messages=400, seed=7, broker_version=major, newest=newest,
            classic_batch_ratio=0.3, consumer_groups=(("GroupA", 3),)))
        out[version] = (root, summary)
    return out


def _stored_properties(root: Path) -> list[bytes]:
    from mqtool.scan import Scanner
    return [rec.properties_raw for rec in Scanner(Store(root).commitlog).messages()]


def test_fixture_make_lays_classic_batches_out_both_ways(made_both_ways):
    (old_root, old), (new_root, new) = made_both_ways["5"], made_both_ways[VERSION_534]
    assert old["classic_batch_records"] == new["classic_batch_records"] > 20
    assert old["messages"] == new["messages"] == 400
    old_props, new_props = _stored_properties(old_root), _stored_properties(new_root)
    # 5.3.3: every message of a classic batch carries the batch's map after its own (a second
    # UNIQ_KEY, WAIT, and the CLUSTER no message of the batch has itself)
    twice = [p for p in old_props if _names(p).count(b"UNIQ_KEY") == 2]
    assert len(twice) == old["classic_batch_records"]
    assert all(_names(p)[-3:] in ([b"UNIQ_KEY", b"CLUSTER", b"WAIT"],
                                  [b"CLUSTER", b"UNIQ_KEY", b"WAIT"],
                                  [b"CLUSTER", b"WAIT", b"UNIQ_KEY"],
                                  [b"UNIQ_KEY", b"WAIT", b"CLUSTER"],
                                  [b"WAIT", b"CLUSTER", b"UNIQ_KEY"],
                                  [b"WAIT", b"UNIQ_KEY", b"CLUSTER"]) for p in twice)
    assert all(b"CLUSTER" in _names(p) for p in old_props)
    # 5.3.4+: the same messages with their own properties only
    own = [p for p in new_props if b"CLUSTER" not in _names(p)]
    assert len(own) == new["classic_batch_records"]
    assert all(_names(p).count(b"UNIQ_KEY") == 1 for p in new_props)
    assert sum(map(len, old_props)) > sum(map(len, new_props))
    # both stores are consistent (queues and index built from what each record decodes to)
    for root in (old_root, new_root):
        report = verify_store(Store(root), workers=1)
        assert report.summary["errors"] == 0, report.summary["by_code"]
    # the records name the family
    assert store_info(Store(new_root))["passport"]["recovery_rules"] == VERSION_534
    assert store_info(Store(old_root))["passport"]["recovery_rules"] == VERSION_532


def test_fixture_make_cli_accepts_the_new_family(mqtool, tmp_path):
    proc = mqtool("fixture", "make", tmp_path / "s", "-n", "50", "--broker-version", VERSION_534,
                  "--classic-batch-ratio", "0.5")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["classic_batch_layout"].endswith("(5.3.4+)")
    bad = mqtool("fixture", "make", tmp_path / "t", "-n", "5", "--broker-version", "6")
    assert bad.returncode == 2 and "5.3.4+" in bad.stderr


def _torn_consumer_offsets(root: Path, tmp_path: Path) -> Path:
    """A copy of ``root`` whose consumerOffset.json a crash mid-persist left torn (the .bak, the
    previous version, is whole)."""
    import shutil
    copy = tmp_path / "torn"
    shutil.copytree(root, copy)
    main = copy / "config" / "consumerOffset.json"
    assert (copy / "config" / "consumerOffset.json.bak").is_file()
    main.write_bytes(main.read_bytes()[:len(main.read_bytes()) // 2])
    return copy


def test_newest_family_deletes_a_torn_config_file_on_load(made_both_ways, tmp_path):
    from mqtool.config import read_store_configs
    from mqtool.consumers import consumer_report
    root = _torn_consumer_offsets(made_both_ways[VERSION_534][0], tmp_path)
    store = Store(root)
    for version, deletes in ((VERSION_534, True), (VERSION_532, False)):
        plan = predict_recovery(store, broker_version=version)
        report = consumer_report(store, plan)
        load = report.to_dict()["configs"]["files"]["consumerOffset.json"]
        loads = read_store_configs(root, family=version).loads["consumerOffset.json"]
        assert loads.outcome == "bak" and loads.used == "consumerOffset.json.bak"
        assert loads.deletes_main is deletes
        assert ("deletes consumerOffset.json" in loads.reason) is deletes
        assert load["deletes_main"] is deletes
        # either way the offsets come from the .bak
        assert {r.group for r in report.rows} == {"GroupA"}
    # info follows the family its passport names (5.3.4+ here: the records show it)
    entry = store_info(store)["config"]["consumerOffset.json"]
    assert entry["source"] == "consumerOffset.json.bak" and entry["deleted_on_load"] is True
    assert "deletes consumerOffset.json" in entry["reason"]
