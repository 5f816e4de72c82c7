"""``mqtool transactions`` and the transaction read paths, against v5-txn-crash: the store the
real 5.3.3 transactional classes wrote, with ``transactions.json`` (every half entry and
transaction with its fate by the broker's own check() with transactionCheckMax 15 and 3) and
``fate-max15.json`` / ``fate-max3.json`` (the check runs themselves). Bad input is forged on
copies: an op body that is not a list of numbers, a half message without REAL_TOPIC, a
consumerOffset.json whose transaction group is missing or torn."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SHARED_STORES
from mqtool.formats import codecs
from mqtool.formats import transaction as tx_fmt
from mqtool.scan import Scanner
from mqtool.store import Store
from mqtool.transactions import check_transactions, transaction_report

STORE = "v5-txn-crash"
TRUTH = SHARED_STORES / STORE

# transactions.json's words -> mqtool's stable values
FATE = {"pending": "checked again", "committed": "committed", "rolled back": "rolled back",
        "discarded": "discarded"}
ENDED = {None: "open", "committed": "committed", "rolled back": "rolled back"}


@pytest.fixture(scope="module")
def truth() -> dict:
    path = TRUTH / "transactions.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def txn_store(unpack_shared) -> Path:
    return unpack_shared(STORE)


@pytest.fixture(scope="module")
def reports(txn_store) -> dict:
    store = Store(txn_store)
    return {n: transaction_report(store, check_max=n) for n in (15, 3)}


# --- the broker's own answers --------------------------------------------------------------------

@pytest.mark.parametrize("check_max,field", [(15, "fate"), (3, "fateWithCheckMax3")])
def test_transactions_equal_the_brokers(reports, truth, check_max, field):
    mine = {t["uniq_key"]: t for t in reports[check_max]["transactions"]}
    assert len(mine) == len(truth["transactions"]) == 200
    for t in truth["transactions"]:
        m = mine[t["uniqKey"]]
        assert m["transaction_id"] == t["transactionId"]
        assert m["producer_group"] == t["producerGroup"]
        assert (m["real_topic"], m["real_queue_id"]) == (t["realTopic"], t["realQueueId"])
        assert [(c["half_queue_offset"], c["commitlog_offset"], c["check_times"] or 0)
                for c in m["half_copies"]] == [(c["halfQueueOffset"], c["commitLogOffset"],
                                                c["checkTimes"]) for c in t["halfCopies"]]
        commit = t["commitRecord"]
        assert (None if m["commit_record"] is None else
                (m["commit_record"]["commitlog_offset"], m["commit_record"]["queue_offset"])) == \
            (None if commit is None else (commit["commitLogOffset"], commit["queueOffset"]))
        assert m["ended_in_store"] == ENDED[t["endedInStore"]], t["uniqKey"]
        assert m["next_check"] == FATE[t[field]], t["uniqKey"]
        assert (m["note"] is None) == (t["note"] is None), t["uniqKey"]
    counts = {FATE[k]: v for k, v in truth["summary"][field].items()}
    assert reports[check_max]["summary"]["next_check"] == dict(sorted(counts.items()))


@pytest.mark.parametrize("check_max,field", [(15, "fateDefaultCheckMax15"), (3, "fateCheckMax3")])
def test_half_entries_equal_the_brokers(reports, truth, check_max, field):
    mine = {e["half_queue_offset"]: e for e in reports[check_max]["half_entries"]}
    assert len(mine) == len(truth["halfEntries"]) == 483
    for h in truth["halfEntries"]:
        m = mine[h["halfQueueOffset"]]
        assert (m["commitlog_offset"], m["real_topic"], m["real_queue_id"], m["producer_group"],
                m["uniq_key"], m["keys"]) == (h["commitLogOffset"], h["realTopic"],
                                              h["realQueueId"], h["producerGroup"], h["uniqKey"],
                                              h["keys"])
        assert m["covered_by_op_messages"] == h["coveredByOpMessages"]
        assert m["commit_record"] == (h["commitRecord"] or {}).get("commitLogOffset")
        fate = h[field]
        if fate.startswith("checked before the crash"):
            assert m["next_check"] == "checked before the crash"
            assert m["put_back_as"] == int(fate.rsplit(" ", 1)[1])
        elif fate.startswith("removed by op"):
            assert m["next_check"] == "removed by op"
        elif fate.startswith("pending"):
            assert m["next_check"] == "put back"
        else:
            assert fate.startswith("discarded") and m["next_check"] == "discarded"


@pytest.mark.parametrize("check_max", [15, 3])
def test_the_check_round_equals_the_brokers_run(reports, check_max):
    path = TRUTH / f"fate-max{check_max}.json"
    run = json.loads(path.read_text())
    (mine,) = reports[check_max]["check_rounds"]
    assert (mine["half_offset"], mine["op_offset"]) == (run["halfCheckOffsetAtStart"],
                                                        run["opCheckOffsetAtStart"])
    assert (mine["half_offset_after"], mine["op_offset_after"]) == (run["halfCheckOffsetAfter"],
                                                                    run["opCheckOffsetAfter"])
    assert mine["checked_with_producer"] == len(run["resolvedHalf"])
    assert mine["discarded"] == len(run["discarded"])


def test_op_messages_and_progress(reports, truth):
    r = reports[15]
    assert [(o["op_queue_offset"], o["commitlog_offset"], o["tags"], o["half_offsets"])
            for o in r["op_messages"]] == [(o["opQueueOffset"], o["commitLogOffset"], o["tags"],
                                            o["halfOffsets"]) for o in truth["opMessages"]]
    assert r["check_progress"]["half_offsets"] == {"0": truth["checkProgressAtCrash"]
                                                   ["halfQueueOffset"]}
    assert r["check_progress"]["op_offsets"] == {"0": truth["checkProgressAtCrash"]
                                                 ["opQueueOffset"]}
    assert r["recovery"]["process_offset"] == truth["recoveredMaxPhyOffset"]
    assert r["problems"] == [] and r["commit_records_without_half"] == []
    assert r["op_offsets_without_half"] == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64) | st.text(alphabet="0123456789,+- x", max_size=40).map(str.encode))
def test_op_body_decoder_takes_any_bytes(body):
    offsets, bad = tx_fmt.decode_op_body(body)
    assert all(isinstance(o, int) for o in offsets) and all(isinstance(b, str) for b in bad)
    text = body.decode("utf-8", errors="replace")
    assert len(offsets) + len(bad) == len(tx_fmt.split_items(text)) if body else True


def test_op_body_codec():
    assert tx_fmt.decode_op_body(b"9,5,3,") == ([9, 5, 3], [])
    assert tx_fmt.decode_op_body(b"1,,x, 2,+4,") == ([1, 4], ["", "x", " 2"])
    assert tx_fmt.decode_op_body(b"") == ([], [])
    assert tx_fmt.decode_op_body(b"\xff1,") == ([], ["\ufffd1"])
    assert tx_fmt.encode_op_body([64, 54]) == b"64,54,"


# --- the command line ---------------------------------------------------------------------------

def test_cli_json_table_and_group(txn_store, reports, truth, mqtool):
    out = mqtool("transactions", "--json", "--check-max", "3", txn_store)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["summary"] == reports[3]["summary"]
    table = mqtool("transactions", "--group", "TxnProducerGroupB", txn_store)
    assert table.returncode == 0, table.stderr
    expected = [t["uniqKey"] for t in truth["transactions"]
                if t["producerGroup"] == "TxnProducerGroupB"]
    listed = [line.split()[0] for line in table.stdout.splitlines()
              if line.startswith("FD0000")]
    assert listed == expected and expected
    group_fates = sum(1 for t in truth["transactions"]
                      if t["producerGroup"] == "TxnProducerGroupB" and t["fate"] == "pending")
    assert f"{group_fates} checked again" in " ".join(table.stderr.split())
    bad = mqtool("transactions", "--check-max", "0", txn_store)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_export_open_transactions(txn_store, truth, mqtool, tmp_path):
    out = tmp_path / "open.jsonl"
    run = mqtool("export", "--open-transactions", "--body", "none", "--out", out, txn_store)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    newest = {t["uniqKey"]: t["halfCopies"][-1]["commitLogOffset"]
              for t in truth["transactions"] if t["endedInStore"] is None}
    assert len(lines) == len(newest) == 82
    assert {m["uniq_key"]: m["commitlog_offset"] for m in lines} == newest
    assert all(m["kind"] == "transaction-half" and m["open_transaction"]["next_check"]
               in ("checked again", "discarded") for m in lines)


def test_dump_decodes_op_bodies_and_half_messages(txn_store, truth, mqtool):
    out = mqtool("dump", "--json", "--body", "none", "--topic", tx_fmt.TRANS_OP_HALF_TOPIC,
                 txn_store / "commitlog")
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    ops = [r for r in rows if r.get("topic") == tx_fmt.TRANS_OP_HALF_TOPIC]
    assert [r["system"]["half_offsets"] for r in ops] == [o["halfOffsets"]
                                                          for o in truth["opMessages"]]
    half = mqtool("dump", "--json", "--body", "none", "--topic", tx_fmt.TRANS_HALF_TOPIC,
                  txn_store / "commitlog")
    rows = [json.loads(line) for line in half.stdout.splitlines() if '"transaction-half"' in line]
    assert len(rows) == 483
    first = truth["halfEntries"][0]
    assert rows[0]["system"]["real_topic"] == first["realTopic"]
    assert rows[0]["system"]["producer_group"] == first["producerGroup"]


def test_query_uniq_key_explains_half_copies_and_commit(txn_store, truth, mqtool):
    t = next(t for t in truth["transactions"] if t["commitRecord"] and len(t["halfCopies"]) > 2)
    out = mqtool("query", "--json", "--explain", "--body", "none", "--uniq-key", t["uniqKey"],
                 txn_store)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    explanation = next(r for r in rows if r.get("record_type") == "query/explanation")
    txn = explanation["transaction"]
    assert [c["commitlog_offset"] for c in txn["half_copies"]] == \
        [c["commitLogOffset"] for c in t["halfCopies"]]
    assert [c["commitlog_offset"] for c in txn["commit_records"]] == \
        [t["commitRecord"]["commitLogOffset"]]
    assert txn["broker_returns_for_real_topic"] == [t["commitRecord"]["commitLogOffset"]]
    assert txn["broker_returns_for_half_topic"] == [c["commitLogOffset"] for c in t["halfCopies"]]
    never = next(t for t in truth["transactions"] if t["commitRecord"] is None)
    out = mqtool("query", "--json", "--explain", "--body", "none", "--uniq-key", never["uniqKey"],
                 txn_store)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    txn = next(r for r in rows if r.get("record_type") == "query/explanation")["transaction"]
    assert txn["commit_records"] == [] and txn["broker_returns_for_real_topic"] == []
    assert txn["real_topic"] == never["realTopic"]


# --- forged copies: bad input and truncation ------------------------------------------------------

def _copy(txn_store: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "store"
    shutil.copytree(txn_store, dest)
    return dest


def _records(root: Path, topic: str):
    store = Store(root)
    return store, [r for r in Scanner(store.commitlog, check_crc=False).messages()
                   if r.topic == topic]


def _write(store: Store, offset: int, data: bytes) -> None:
    seg = store.commitlog.segment_for(offset)
    with open(seg.path, "r+b") as fh:
        fh.seek(offset - seg.base_offset)
        fh.write(data)


def test_op_body_that_is_no_list_of_numbers(txn_store, tmp_path, mqtool):
    root = _copy(txn_store, tmp_path)
    store, ops = _records(root, tx_fmt.TRANS_OP_HALF_TOPIC)
    op = ops[0]
    body = store.commitlog.read(op.body_position, op.body_length)
    forged = b"x,y" + body[3:]              # "9,5,..." -> "x,y,..." (same length)
    _write(store, op.body_position, forged)
    _write(store, op.offset + 8, struct.pack(">i", codecs.body_crc(forged)))
    report = transaction_report(Store(root))
    assert report["op_messages"][0]["bad_items"] == ["x", "y"]
    assert any("no number" in p for p in report["problems"])
    codes = [f["code"] for f in check_transactions(Store(root))]
    assert codes == ["TXN_OP_BODY"]
    verify = mqtool("verify", "--json", root)
    assert "TXN_OP_BODY" in json.loads(verify.stdout)["summary"]["by_code"]


def test_half_message_without_real_topic(txn_store, tmp_path, mqtool):
    root = _copy(txn_store, tmp_path)
    store, halves = _records(root, tx_fmt.TRANS_HALF_TOPIC)
    half = halves[0]
    raw = store.commitlog.read(half.offset, half.total_size)
    at = raw.rindex(b"REAL_TOPIC\x01")
    _write(store, half.offset + at, b"REAL_TOPIX\x01")     # properties: no CRC covers them
    report = transaction_report(Store(root))
    entry = report["half_entries"][0]
    assert entry["real_topic"] is None
    assert any("no REAL_TOPIC" in p for p in report["problems"])
    found = check_transactions(Store(root))
    assert [(f["code"], f["commitlog_offset"]) for f in found] == \
        [("TXN_HALF_NO_REAL_TOPIC", half.offset)]
    out = mqtool("transactions", root)
    assert out.returncode == 1


def _offsets_file(root: Path) -> Path:
    return root / "config" / "consumerOffset.json"


def test_consumer_offsets_without_the_transaction_group(txn_store, truth, tmp_path, mqtool):
    root = _copy(txn_store, tmp_path)
    _offsets_file(root).write_text('{"offsetTable":{"TopicTest@G":{0:1}}}')
    report = transaction_report(Store(root))
    (run,) = report["check_rounds"]
    # the broker's fetchConsumeOffset falls back to the queues' minimum: every op message is
    # read, every half entry they do not cover is checked again
    uncovered = sum(1 for h in truth["halfEntries"] if not h["coveredByOpMessages"])
    assert (run["half_offset"], run["op_offset"]) == (0, 0)
    assert run["checked_with_producer"] == uncovered == 365
    assert run["op_offset_after"] == 2
    assert any("minimum" in n for n in report["check_progress"]["notes"])


def test_torn_consumer_offsets(txn_store, tmp_path, mqtool):
    root = _copy(txn_store, tmp_path)
    path = _offsets_file(root)
    whole = path.read_bytes()
    path.write_bytes(whole[:len(whole) // 2])
    alone = transaction_report(Store(root))
    assert alone["check_rounds"][0]["half_offset"] == 0        # empty table: the minimum
    path.with_name(path.name + ".bak").write_bytes(whole)
    with_bak = transaction_report(Store(root))
    assert with_bak["check_rounds"][0]["half_offset"] == 362    # the broker loads the .bak
    assert with_bak["check_progress"]["source"] == "consumerOffset.json.bak"
    path.with_name(path.name + ".bak").write_bytes(whole[:10])
    refused = transaction_report(Store(root))
    assert refused["check_progress"]["broker_refuses_to_start"]
    assert {t["next_check"] for t in refused["transactions"]} == {"broker refuses to start"}
    out = mqtool("transactions", root)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    # a torn entry: the group's half offset is no number
    path.write_text(whole.decode().replace("{0:362", '{0:"x"'))
    path.with_name(path.name + ".bak").unlink()
    torn = transaction_report(Store(root))
    assert torn["check_rounds"][0]["half_offset"] == 0
    assert any("not a whole number" in n for n in torn["check_progress"]["notes"])


def test_recovery_truncating_the_newest_copies(txn_store, truth, tmp_path, mqtool):
    """A byte of op message 1's body CRC flipped: the abnormal recovery checks CRCs and cuts the
    CommitLog there, taking op message 1 and every half copy from 362 on; transactions whose
    newest copy was among them are lost (their older copies lie below the check offset)."""
    root = _copy(txn_store, tmp_path)
    store, ops = _records(root, tx_fmt.TRANS_OP_HALF_TOPIC)
    op = ops[1]
    crc = store.commitlog.read(op.offset + 8, 1)        # its stored body CRC: body unchanged
    _write(store, op.offset + 8, bytes([crc[0] ^ 0x01]))
    report = transaction_report(Store(root))
    assert report["recovery"]["process_offset"] == op.offset
    lost = {t["uniq_key"] for t in report["transactions"] if t["next_check"] == "lost"}
    expected = {t["uniqKey"] for t in truth["transactions"]
                if t["halfCopies"][-1]["halfQueueOffset"] >= 362}
    assert lost == expected and len(lost) == 121
    assert report["op_messages"][1]["truncated_by_recovery"] is True
    ended_by_op1 = {t["uniqKey"] for t in truth["transactions"]
                    if any(1 in h["coveredByOpMessages"] for h in truth["halfEntries"]
                           if h["uniqKey"] == t["uniqKey"])}
    assert ended_by_op1 == {t["uniq_key"] for t in report["transactions"]
                            if "op message 1 truncated" in t["recovery"]}
    assert mqtool("transactions", root).returncode == 1


def test_verify_is_quiet_on_the_broker_written_store(txn_store):
    assert check_transactions(Store(txn_store)) == []


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200) | st.sampled_from([
    b'{"offsetTable":{"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS":{0:-5}}}',
    b'{"offsetTable":{"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS":[1,2]}}',
    b'{"offsetTable":{"RMQ_SYS_TRANS_OP_HALF_TOPIC@CID_RMQ_SYS_TRANS":{0:99999999999}}}',
    b'{"offsetTable":null}', b"null", b"   "]))
def test_any_consumer_offsets_gives_an_answer(txn_store, tmp_path_factory, offsets_json):
    root = tmp_path_factory.mktemp("txn-fuzz") / "store"
    shutil.copytree(txn_store, root)
    _offsets_file(root).write_bytes(offsets_json)
    report = transaction_report(Store(root))
    assert len(report["transactions"]) == 200
    (run,) = report["check_rounds"]
    assert run["skipped"] or run["half_offset_after"] >= run["half_offset"]


def test_op_offsets_and_commit_records_pointing_at_no_half_message(txn_store, tmp_path, mqtool):
    root = _copy(txn_store, tmp_path)
    store, ops = _records(root, tx_fmt.TRANS_OP_HALF_TOPIC)
    op = ops[0]
    body = store.commitlog.read(op.body_position, op.body_length)
    assert body.startswith(b"9,5,3,")
    forged = b"999," + body[4:]             # "9,5,3,..." -> "999,3,...": no half entry 999
    _write(store, op.body_position, forged)
    _write(store, op.offset + 8, struct.pack(">i", codecs.body_crc(forged)))
    commit = next(r for r in Scanner(store.commitlog, check_crc=False).messages()
                  if r.sys_flag & 0xC == 0x8)
    raw = store.commitlog.read(commit.offset, commit.total_size)
    at = raw.index(struct.pack(">q", commit.prepared_transaction_offset), 48)
    _write(store, commit.offset + at, struct.pack(">q", 123))   # no CRC covers this field
    found = {(f["code"], f["commitlog_offset"]) for f in check_transactions(Store(root))}
    assert found == {("TXN_OP_DANGLING", op.offset), ("TXN_COMMIT_ORPHAN", commit.offset)}
    report = transaction_report(Store(root))
    assert report["op_offsets_without_half"] == [
        {"op_queue_offset": 0, "commitlog_offset": op.offset, "half_offsets": [999]}]
    assert [c["commitlog_offset"] for c in report["commit_records_without_half"]] == \
        [commit.offset]
    verify = mqtool("verify", "--json", root)
    by_code = json.loads(verify.stdout)["summary"]["by_code"]
    assert by_code.get("TXN_OP_DANGLING") == 1 and by_code.get("TXN_COMMIT_ORPHAN") == 1


def test_a_check_long_after_the_crash_skips_old_half_messages(reports, truth, txn_store):
    """--at: the broker's check discards (needSkip) half messages born more than
    fileReservedTime (72 h) before it runs: every transaction still checked becomes discarded."""
    newest = max(e["store_timestamp"] for e in reports[15]["half_entries"])
    late = transaction_report(Store(txn_store), at_ms=newest + 73 * 3600 * 1000)
    soon = transaction_report(Store(txn_store), at_ms=newest + 71 * 3600 * 1000)
    assert soon["summary"]["next_check"] == reports[15]["summary"]["next_check"]
    fates = {t["uniq_key"]: t["next_check"] for t in late["transactions"]}
    for t in truth["transactions"]:
        expected = "discarded" if t["fate"] == "pending" else FATE[t["fate"]]
        assert fates[t["uniqKey"]] == expected
