"""The broker's DLedger-mode recovery, predicted (mqtool.dledger through predict_recovery).

On the three reference stores the prediction must equal what the real 4.9.8 broker with DLedger
0.3.1.2 did (recover.json: maxPhyOffset, ledger begin/end index, data files left, ConsumeQueue
ends, IndexFiles left running). Damaged copies check each rule of DLedger's recovery walk: a bad
entry header ends the log, later data files go, an end too far back makes the broker exit, a bad
first entry of the start file moves the start back, a disagreeing index unit does not end the
log, and no CRC is ever looked at."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import DLEDGER_STORES, SHARED_STORES, sparse_copytree
from mqtool.dledger import ledger_extent, walk_ledger
from mqtool.formats import dledger as dl_fmt
from mqtool.recovery import predict_recovery
from mqtool.store import Store


def _json(name: str, file: str) -> dict:
    with gzip.open(SHARED_STORES / name / file, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.mark.parametrize("name", DLEDGER_STORES)
def test_prediction_equals_what_the_broker_did(name, dledger_stores):
    recover = _json(name, "recover.json.gz")
    store = Store(dledger_stores[name])
    plan = predict_recovery(store)
    assert plan.process_offset == recover["afterRecovery"]["maxPhyOffset"]
    assert plan.process_offset == recover["dledger"]["afterLoad"]["dataMaxWrotePosition"]
    assert plan.mode == ("abnormal" if recover["before"]["abortFileExists"] else "normal")
    kept = [f["name"] for f in recover["after"]["dledger"]["dataFiles"]]
    assert plan.commitlog_files_kept == kept and plan.commitlog_files_deleted == []
    assert plan.index_files_kept == sorted(recover["runningIndexFiles"])
    assert plan.refuses_to_start == [] and plan.messages_lost == 0
    for topic, queues in recover["consumeQueues"].items():
        for queue_id, queue in queues.items():
            end = plan.queue_end_after_recovery(topic, int(queue_id))
            # a queue without files on disk: the broker answers 0 for it
            assert (0 if end is None else end) == queue["maxOffset"], (topic, queue_id)
    walk = walk_ledger(store.dledger)
    after_load = recover["dledger"]["afterLoad"]
    assert walk.last_index == after_load["ledgerEndIndex"]
    assert walk.last_term == after_load["ledgerEndTerm"]
    assert (walk.last_index + 1) * dl_fmt.INDEX_UNIT_SIZE == after_load["indexMaxWrotePosition"]
    assert ledger_extent(store.dledger)["first"]["index"] == after_load["ledgerBeginIndex"]


def test_the_crash_loses_the_newer_index_file_for_good(dledger_stores):
    plan = predict_recovery(Store(dledger_stores["dledger-crash"]))
    assert plan.index_files_deleted == ["20261124234339309"]
    assert plan.redispatch_from == plan.process_offset   # nothing re-dispatched: never rebuilt
    assert any("not rebuilt" in note for note in plan.notes)


def test_verify_predicts_no_truncation_where_the_broker_made_none(dledger_stores, mqtool):
    for name in ("dledger-clean-damaged", "dledger-crash"):
        report = json.loads(mqtool("verify", "--json", dledger_stores[name]).stdout)
        codes = {f["code"] for f in report["findings"]}
        assert "RECOVERY_TRUNCATES" not in codes
        assert report["recovery"]["process_offset"] == \
            _json(name, "recover.json.gz")["afterRecovery"]["maxPhyOffset"]


# --- the rules, on damaged copies ----------------------------------------------------------------

@pytest.fixture
def clean_copy(dledger_stores, tmp_path) -> Path:
    dest = tmp_path / "store"
    sparse_copytree(dledger_stores["dledger-clean"], dest)
    return dest


def entries(name: str = "dledger-clean") -> list[dict]:
    return [m["dledger"] for m in _json(name, "dump.json.gz")["messages"]]


def poke(store: Path, entry: dict, field_offset: int, value: bytes) -> None:
    with open(store / entry["entryFile"], "r+b") as fh:
        fh.seek(entry["entryFilePos"] + field_offset)
        fh.write(value)


def in_file(all_entries: list[dict], file_base: int) -> list[dict]:
    return [e for e in all_entries if int(e["entryFile"][-20:]) == file_base]


def test_a_bad_entry_in_the_last_file_ends_the_log_there(clean_copy):
    victim = in_file(entries(), 4194304)[10]
    poke(clean_copy, victim, 0, (7).to_bytes(4, "big"))             # magic
    plan = predict_recovery(Store(clean_copy))
    assert plan.process_offset == victim["pos"]
    assert plan.refuses_to_start == [] and plan.commitlog_files_deleted == []
    assert plan.messages_lost == len(in_file(entries(), 4194304)) - 10 - 1
    assert "magic 7" in plan.stop_reason


def test_a_bad_entry_one_file_back_deletes_the_last_file(clean_copy):
    victim = in_file(entries(), 3145728)[-5]
    poke(clean_copy, victim, 8, (victim["index"] + 2).to_bytes(8, "big"))   # index
    plan = predict_recovery(Store(clean_copy))
    assert plan.process_offset == victim["pos"]
    assert plan.commitlog_files_deleted == ["00000000000004194304"]
    assert plan.cut_file == "00000000000003145728" and plan.refuses_to_start == []
    assert plan.cq_units_truncated > 0 and plan.messages_lost > 90


def test_an_end_too_far_back_makes_the_broker_exit(clean_copy):
    victim = in_file(entries(), 2097152)[100]
    poke(clean_copy, victim, dl_fmt.POS_FIELD_OFFSET, (1).to_bytes(8, "big"))  # pos
    plan = predict_recovery(Store(clean_copy))
    assert plan.process_offset == victim["pos"]
    assert len(plan.refuses_to_start) == 1 and "processOffset is too small" in \
        plan.refuses_to_start[0]


def test_damage_before_the_start_file_is_never_seen(clean_copy):
    victim = in_file(entries(), 1048576)[100]
    poke(clean_copy, victim, 0, (9).to_bytes(4, "big"))
    plan = predict_recovery(Store(clean_copy))
    assert plan.process_offset == 4400875 and plan.start_file == "00000000000002097152"


def test_a_bad_first_entry_moves_the_start_back(clean_copy):
    first = in_file(entries(), 2097152)[0]
    poke(clean_copy, first, 0, (5).to_bytes(4, "big"))
    plan = predict_recovery(Store(clean_copy))
    assert plan.start_file == "00000000000001048576"
    assert plan.process_offset == first["pos"] == 2097152
    assert plan.refuses_to_start        # 2 MiB before the last file's start


def test_a_disagreeing_index_unit_does_not_end_the_log(clean_copy):
    victim = entries()[1990]
    with open(clean_copy / "dledger-n0" / "index" / "00000000000000000000", "r+b") as fh:
        fh.seek(victim["index"] * dl_fmt.INDEX_UNIT_SIZE + 4)
        fh.write((123).to_bytes(8, "big"))                            # the unit's pos
    store = Store(clean_copy)
    walk = walk_ledger(store.dledger)
    assert walk.index_rewritten_from == victim["index"] and walk.last_index == 1999
    plan = predict_recovery(store)
    assert plan.process_offset == 4400875
    assert any("rewrites it" in note for note in plan.notes)


def test_no_crc_is_looked_at(clean_copy):
    victim = in_file(entries(), 4194304)[3]
    poke(clean_copy, victim, dl_fmt.ENTRY_HEADER_SIZE + 200, b"\xff\xff")   # record body
    poke(clean_copy, victim, 40, (12345).to_bytes(4, "big"))                # entry bodyCrc
    assert predict_recovery(Store(clean_copy)).process_offset == 4400875


# --- verify's DLedger findings -------------------------------------------------------------------

def dl_findings(store: Path) -> dict[str, list]:
    from mqtool.dledger import check_dledger

    found: dict[str, list] = {}
    for f in check_dledger(Store(store)):
        found.setdefault(f["code"], []).append(f)
    return found


def test_the_reference_stores_have_no_dledger_findings(dledger_stores):
    for name in DLEDGER_STORES:
        assert dl_findings(dledger_stores[name]) == {}, name


def test_index_sequence_term_order_and_index_units(clean_copy):
    all_entries = entries()
    skipped, older = all_entries[500], all_entries[1200]
    poke(clean_copy, skipped, 8, (skipped["index"] + 5).to_bytes(8, "big"))
    poke(clean_copy, older, 16, (0).to_bytes(8, "big"))
    for e in all_entries[1201:]:
        poke(clean_copy, e, 16, (1).to_bytes(8, "big"))   # term 1 from here, 0 at 1200
    found = dl_findings(clean_copy)
    # the forged index breaks the sequence twice (into and out of it) and its unit no longer fits
    assert [f["commitlog_offset"] for f in found["DL_INDEX_SEQUENCE"]] == \
        [skipped["pos"] + 48, all_entries[501]["pos"] + 48]
    assert "DL_TERM_ORDER" not in found          # 0 then 1 is an election, not a regression
    units = found["DL_INDEX_UNIT"]
    assert units[0]["commitlog_offset"] == skipped["pos"] + 48
    assert units[-1]["count"] == 1999 - 1201 + 1 + 1 - 20   # every term-1 entry, and the forged one
    poke(clean_copy, all_entries[1500], 16, (0).to_bytes(8, "big"))
    assert [f["commitlog_offset"] for f in dl_findings(clean_copy)["DL_TERM_ORDER"]] == \
        [all_entries[1500]["pos"] + 48]


def test_checkpoint_findings(clean_copy, mqtool):
    folder = clean_copy / "dledger-n0"
    (folder / "checkpoint").write_text("committedIndex=5000\nendIndex=5000\n")
    (folder / "currterm").write_text("garbage\n")
    messages = [f["message"] for f in dl_findings(clean_copy)["DL_CHECKPOINT"]]
    assert any("committedIndex 5000 is past the last entry 1999" in m for m in messages)
    assert any("currTerm" in m for m in messages)
    report = json.loads(mqtool("verify", "--json", clean_copy).stdout)
    assert {f["code"] for f in report["findings"]} == {"DL_CHECKPOINT"}
