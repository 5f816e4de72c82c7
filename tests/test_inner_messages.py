"""Inner batches opened (issue 17): ``dump``, ``export``, ``salvage`` and ``query`` give one record
per inner message, compared with what the client sent (write.json ``inner`` lists) on both 5.3.3
BatchCQ stores; the broker's queryMessage finds none of them; torn or miscounted batches are
notes, never tracebacks."""
from __future__ import annotations

import base64
import json
import shutil
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import SHARED_STORES, write_log
from mqtool import query as q
from mqtool.scan import Scanner
from mqtool.store import Store

BATCHCQ_STORES = ["v5-batchcq-clean", "v5-batchcq-crash"]


def ref_of(name: str) -> Path:
    ref = SHARED_STORES / name
    if not (ref / "write.json.gz").is_file():
        pytest.skip(f"../shared/rocketmq-stores/{name} is absent")
    return ref


def sent_batches(ref: Path) -> dict[int, dict]:
    """The inner-batch sends the broker acknowledged, by the CommitLog offset it answered."""
    return {m["wroteOffset"]: m for m in write_log(ref)["messages"]
            if m.get("kind") == "innerBatch" and m.get("status") == "PUT_OK"}


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def crc(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


def assert_inner_messages_are_the_sent_ones(ref: Path, records: list[dict]) -> None:
    """Every inner message of every acknowledged batch, once, in order, with its own fields."""
    sent = sent_batches(ref)
    assert sent
    by_batch: dict[int, list[dict]] = {}
    for r in records:
        if "inner_batch" in r:
            by_batch.setdefault(r["inner_batch"]["commitlog_offset"], []).append(r)
    assert set(by_batch) == set(sent)
    for offset, send in sent.items():
        got = by_batch[offset]
        assert [r["inner_batch"]["position"] for r in got] == list(range(send["innerNum"]))
        for r, inner in zip(got, send["inner"]):
            assert r["record_type"] == "commitlog/message"
            assert r["commitlog_offset"] == offset
            assert (r["topic"], r["queue_id"]) == (send["topic"], send["queueId"])
            assert r["queue_offset"] == send["queueOffset"] + inner["j"]
            assert (r["tags"], r["keys"], r["uniq_key"]) == \
                (inner["tags"], inner["keys"], inner["uniqKey"])
            body = base64.b64decode(r["body"])
            assert (len(body), crc(body)) == (inner["bodyLen"], inner["bodyCRC"])
            assert r["body_length"] == inner["bodyLen"]
            assert r["properties"].get("UNIQ_KEY") == inner["uniqKey"]
            assert "INNER_NUM" not in r["properties"]
            assert r["inner_batch"]["uniq_key"] == send["batchUniqKey"]
            assert r["inner_batch"]["count"] == send["innerNum"]
            assert "problem" not in r["inner_batch"]


@pytest.mark.parametrize("name", BATCHCQ_STORES)
def test_dump_opens_inner_batches(name, mqtool):
    ref = ref_of(name)
    proc = mqtool("dump", ref / "store", "--json", "--messages-only")
    assert proc.returncode == 0, proc.stderr
    records = jsonl(proc.stdout)
    assert_inner_messages_are_the_sent_ones(ref, records)
    # every message the clients sent, one record each; --no-unwrap shows what is stored
    assert len(records) == write_log(ref)["logicalMessages"]
    outer = jsonl(mqtool("dump", ref / "store", "--json", "--messages-only", "--no-unwrap",
                         "--body", "none").stdout)
    sent = sent_batches(ref)
    stored = [r for r in outer if r["commitlog_offset"] in sent]
    assert len(stored) == len(sent)
    assert all(r["sys_flag"] & 0xC0 == 0xC0 and "inner_batch" not in r for r in stored)
    assert len(outer) == len(records) - sum(s["innerNum"] - 1 for s in sent.values())


def test_dump_filters_select_inner_messages(mqtool):
    ref = ref_of("v5-batchcq-clean")
    send = next(iter(sent_batches(ref).values()))
    inner = next(i for i in send["inner"] if i["keys"])
    key = inner["keys"].split(" ")[0]
    by_uniq = jsonl(mqtool("dump", ref / "store", "--json", "--uniq-key", inner["uniqKey"],
                           "--body", "none").stdout)
    assert [(r["uniq_key"], r["inner_batch"]["position"]) for r in by_uniq] == \
        [(inner["uniqKey"], inner["j"])]
    by_key = jsonl(mqtool("dump", ref / "store", "--json", "--key", key, "--topic",
                          send["topic"], "--body", "none").stdout)
    assert by_key and all(key in r["keys"].split(" ") for r in by_key)
    # the batch's own UNIQ_KEY selects the whole batch
    whole = jsonl(mqtool("dump", ref / "store", "--json", "--uniq-key", send["batchUniqKey"],
                         "--body", "none").stdout)
    assert [r["inner_batch"]["position"] for r in whole] == list(range(send["innerNum"]))


@pytest.mark.parametrize("name", BATCHCQ_STORES)
def test_export_and_salvage_replay_inner_messages(name, mqtool, tmp_path):
    ref = ref_of(name)
    proc = mqtool("export", ref / "store")
    assert proc.returncode == 0, proc.stderr
    exported = jsonl(proc.stdout)
    assert_inner_messages_are_the_sent_ones(ref, exported)
    assert len(exported) == write_log(ref)["logicalMessages"]
    inner = [r for r in exported if "inner_batch" in r]
    assert {(r["kind"], r["real_topic"] == r["topic"]) for r in inner} == {("normal", True)}
    out = tmp_path / "salvage.jsonl"
    proc = mqtool("salvage", ref / "store", "--out", out, "--map", tmp_path / "map.json")
    assert proc.returncode == 0, proc.stderr
    salvaged = jsonl(out.read_text(encoding="utf-8"))
    assert_inner_messages_are_the_sent_ones(ref, salvaged)
    assert len(salvaged) == len(exported)
    kept = jsonl(mqtool("export", ref / "store", "--no-unwrap", "--body", "none").stdout)
    assert len(kept) == len(exported) - sum(s["innerNum"] - 1
                                            for s in sent_batches(ref).values())


@pytest.mark.parametrize("name", BATCHCQ_STORES)
def test_query_finds_inner_messages_the_broker_cannot(name):
    """For the broker's "inner batch" queries (recover.json, answered on recovered/): the
    broker-compatible answer is the broker's (nothing for an inner key or UNIQ_KEY, the record
    for the batch's UNIQ_KEY), and mqtool's own query finds exactly the inner messages that
    carry the key (write.json), saying why the broker does not."""
    ref = ref_of(name)
    recover = json.loads(__import__("gzip").open(ref / "recover.json.gz").read())
    store = Store(ref / "recovered")
    end = recover["afterRecovery"]["maxPhyOffset"]
    sent = sent_batches(ref)
    entries = [e for e in recover["queryMessage"] if e["kind"].startswith("inner batch")]
    assert {e["kind"] for e in entries} == {"inner batch: batch UNIQ_KEY",
                                           "inner batch: key of an inner message",
                                           "inner batch: UNIQ_KEY of an inner message"}
    for entry in entries:
        assert q.broker_query_message(store, entry["topic"], entry["key"],
                                      max_offset=end) == entry["offsets"], entry
    checked = 0
    for entry in entries[::5]:
        key, kind = entry["key"], entry["kind"]
        uniq = "UNIQ_KEY" in kind
        result = (q.query_uniq_key(store, key, entry["topic"]) if uniq
                  else q.query_key(store, key, entry["topic"]))
        expected = sorted((offset, i["j"]) for offset, s in sent.items()
                          if s["topic"] == entry["topic"] for i in s["inner"]
                          if (i["uniqKey"] == key if uniq
                              else key in (i["keys"] or "").split(" ")))
        got = sorted((f.record.offset, f.inner_position) for f in result.found
                     if f.inner_position is not None)
        assert got == expected, entry
        outer = [f.record.offset for f in result.found if f.inner_position is None]
        assert outer == entry["offsets"], entry
        if kind != "inner batch: batch UNIQ_KEY":
            assert entry["offsets"] == [] and got
            reasons = {r["reason"]: r for r in q.explain(store, result)["reasons"]}
            assert reasons["inner-batch-message"]["offsets"] == sorted({o for o, _ in got})
            checked += 1
    assert checked > 200


def test_query_cli_inner_messages(mqtool):
    ref = ref_of("v5-batchcq-crash")
    send = next(iter(sent_batches(ref).values()))
    inner = send["inner"][1]
    proc = mqtool("query", ref / "store", "--uniq-key", inner["uniqKey"], "--explain", "--json")
    assert proc.returncode == 0, proc.stderr
    message, summary, explanation = jsonl(proc.stdout)
    assert (message["uniq_key"], message["queue_offset"], message["found_by"]) == \
        (inner["uniqKey"], send["queueOffset"] + 1, "inner-batch")
    assert message["inner_batch"]["commitlog_offset"] == send["wroteOffset"]
    assert crc(base64.b64decode(message["body"])) == inner["bodyCRC"]
    assert summary["inner_messages"] == [[send["wroteOffset"], 1]]
    assert explanation["broker_finds_all"] is False
    assert [r["reason"] for r in explanation["reasons"]] == ["inner-batch-message"]
    proc = mqtool("query", ref / "store", "--uniq-key", inner["uniqKey"], "--topic",
                  send["topic"], "--broker-compatible", "--json")
    assert proc.returncode == 1
    [summary] = jsonl(proc.stdout)
    assert summary["offsets"] == []


def _record_at(root: Path, offset: int):
    return next(r for r in Scanner(Store(root).commitlog, check_crc=False).messages(offset)
                if r.offset == offset)


def test_torn_and_miscounted_inner_batches_are_notes(tmp_path, mqtool):
    """INNER_NUM rewritten to disagree with the body: the inner messages with a problem note.
    A torn body (an inner total size that runs past the batch): the stored record, with
    inner_batch_error. dump, export, salvage and query never trace back."""
    ref = ref_of("v5-batchcq-clean")
    root = tmp_path / "store"
    shutil.copytree(ref / "store", root)
    for path in root.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    sent = sorted(sent_batches(ref).values(), key=lambda s: s["wroteOffset"])
    miscounted = next(s for s in sent if 3 <= s["innerNum"] <= 9)
    torn = next(s for s in sent if s is not miscounted)
    segment = root / "commitlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    record = _record_at(root, miscounted["wroteOffset"])
    raw = bytes(record.properties_raw)
    props_at = record.end - len(raw)   # the properties are the record's last field
    at = raw.index(b"INNER_NUM\x01") + len(b"INNER_NUM\x01")
    stated = str(miscounted["innerNum"]).encode()
    wrong = str(miscounted["innerNum"] - 1).encode()
    assert len(wrong) == len(stated)
    data[props_at + at:props_at + at + len(stated)] = wrong
    record = _record_at(root, torn["wroteOffset"])
    data[record.body_position:record.body_position + 4] = struct.pack(">i", 1 << 30)
    segment.write_bytes(bytes(data))

    records = jsonl(mqtool("dump", root, "--json", "--messages-only", "--body", "none").stdout)
    counted = [r for r in records if r["commitlog_offset"] == miscounted["wroteOffset"]]
    assert len(counted) == miscounted["innerNum"]
    assert all("INNER_NUM says" in r["inner_batch"]["problem"] for r in counted)
    [kept] = [r for r in records if r["commitlog_offset"] == torn["wroteOffset"]]
    assert "torn inner batch" in kept["inner_batch_error"] and "inner_batch" not in kept
    exported = jsonl(mqtool("export", root, "--body", "none").stdout)
    assert len([r for r in exported if r["commitlog_offset"] == miscounted["wroteOffset"]]) == \
        miscounted["innerNum"]
    out = tmp_path / "s.jsonl"
    proc = mqtool("salvage", root, "--out", out, "--include-damaged", "--map",
                  tmp_path / "m.json")
    assert proc.returncode == 0, proc.stderr
    salvaged = jsonl(out.read_text(encoding="utf-8"))
    [kept] = [r for r in salvaged if r["commitlog_offset"] == torn["wroteOffset"]]
    assert kept["damage"] == "body-crc" and "torn inner batch" in kept["inner_batch_error"]
    proc = mqtool("query", root, "--key", torn["inner"][0]["keys"] or "hotkey-0", "--json")
    assert proc.returncode in (0, 1)
    proc = mqtool("verify", root, "--json")
    assert proc.returncode == 1
    inner = {f["commitlog_offset"]: f for f in json.loads(proc.stdout)["findings"]
             if f["code"] == "CL_INNER_BATCH"}
    assert set(inner) == {miscounted["wroteOffset"], torn["wroteOffset"]}
    assert "INNER_NUM says" in inner[miscounted["wroteOffset"]]["message"]
    assert "torn inner batch" in inner[torn["wroteOffset"]]["message"]
    assert inner[torn["wroteOffset"]]["file"] == "commitlog/00000000000000000000"
    assert inner[torn["wroteOffset"]]["offset"] == torn["wroteOffset"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.dictionaries(st.sampled_from(["INNER_NUM", "INNER_BASE"]),
                                                st.text(max_size=4)))
def test_opening_any_bytes_gives_messages_or_a_problem(body, props):
    """Whatever the body and INNER_NUM/INNER_BASE hold: inner messages or a one-line problem,
    never an exception."""
    from mqtool.innerbatch import open_inner_batch
    opened = open_inner_batch(100, 7, props, body)
    assert opened.messages or opened.problem
    assert opened.problem is None or "\n" not in opened.problem
    assert [m.queue_offset - opened.base for m in opened.messages] == \
        list(range(len(opened.messages)))
