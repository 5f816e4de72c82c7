"""Reading DLedger-mode stores, checked against what the real 4.9.8 broker (DLedger 0.3.1.2) wrote
and decoded: `dump --json` equals the broker's dump.json message for message (with each entry's
header), the scan of each data file ends where the broker's did, `info` and the passport name the
layout and the ledger, `verify` finds nothing on the clean store and the one damaged body the
broker never checks on the damaged one. The scanner's batch path, resynchronisation and offset
ranges work on DLedger data as on a plain CommitLog."""
from __future__ import annotations

import gzip
import json
import shutil

import pytest

from conftest import DLEDGER_STORES, SHARED_STORES, sparse_copytree
from mqtool import codec
from mqtool.formats import dledger as dl_fmt
from mqtool.scan import (BlankRecord, CorruptRegion, MessageRecord, RecordBatch, Scanner,
                         UnwrittenTail, expand_batches, message_at, scan_segment,
                         scan_segment_batches)
from mqtool.store import DLEDGER_LAYOUT, Store, identify_file
from test_dump_conformance import FIELDS

ENTRY_FIELDS = {"magic": "magic", "size": "size", "index": "index", "term": "term", "pos": "pos",
                "channel": "channel", "chainCrc": "chain_crc", "bodyCrc": "body_crc",
                "bodySize": "body_size"}
_DUMPS: dict[str, dict] = {}
_RUNS: dict[str, list[dict]] = {}


def broker_dump(name: str) -> dict:
    if name not in _DUMPS:
        with gzip.open(SHARED_STORES / name / "dump.json.gz", "rt", encoding="utf-8") as fh:
            _DUMPS[name] = json.load(fh)
    return _DUMPS[name]


def cli_dump(name: str, store, mqtool) -> list[dict]:
    if name not in _RUNS:
        proc = mqtool("dump", store, "--json", "--body", "base64", "--no-decompress")
        assert proc.returncode == 0, proc.stderr
        _RUNS[name] = [json.loads(line) for line in proc.stdout.splitlines()]
    return _RUNS[name]


@pytest.mark.parametrize("name", DLEDGER_STORES)
def test_dump_equals_the_broker_decode(name, dledger_stores, mqtool):
    broker = broker_dump(name)
    ours = [r for r in cli_dump(name, dledger_stores[name], mqtool)
            if r["record_type"] == "commitlog/message"]
    assert len(ours) == broker["messageCount"] == len(broker["messages"]) == 2000
    mismatches = []
    for expected, got in zip(broker["messages"], ours):
        assert got["file"] == expected["file"] == expected["dledger"]["entryFile"]
        for broker_key, our_key in FIELDS.items():
            if broker_key in expected and expected[broker_key] != got[our_key]:
                mismatches.append((expected["commitLogOffset"], broker_key,
                                   expected[broker_key], got[our_key]))
        for broker_key, our_key in ENTRY_FIELDS.items():
            if expected["dledger"][broker_key] != got["dledger"][our_key]:
                mismatches.append((expected["commitLogOffset"], broker_key,
                                   expected["dledger"][broker_key], got["dledger"][our_key]))
        assert got["commitlog_offset"] == got["dledger"]["pos"] + dl_fmt.ENTRY_HEADER_SIZE
        assert got["body_stored_length"] == expected["bodyLength"]
    assert not mismatches, mismatches[:10]


@pytest.mark.parametrize("name", DLEDGER_STORES)
def test_each_data_file_scan_ends_where_the_brokers_did(name, dledger_stores, mqtool):
    records = cli_dump(name, dledger_stores[name], mqtool)
    ends = {r["file"]: r for r in records if r["record_type"] != "commitlog/message"}
    for scan in broker_dump(name)["fileScan"]:
        got = sum(1 for r in records
                  if r["record_type"] == "commitlog/message" and r["file"] == scan["name"])
        assert got == scan["messages"]
        kind, _, rest = scan["end"].partition("@")
        ours = ends[scan["name"]]
        assert ours["file_offset"] == int(rest.split()[0]) == scan["scanEndPos"]
        if kind == "blank":
            assert ours["record_type"] == "commitlog/blank"
            assert f"size={ours['total_size']}" in scan["end"]
            assert ours["magic_code"] == dl_fmt.BLANK_MAGIC
        else:
            assert kind == "zeros" and ours["record_type"] == "commitlog/unwritten"


def test_info_and_passport_name_the_layout_and_the_ledger(dledger_stores, mqtool):
    expected = {"dledger-clean": (1999, 1999, 0), "dledger-crash": (1981, 1982, 18),
                "dledger-clean-damaged": (1999, 1999, 0)}
    for name, (committed, end_index, lag) in expected.items():
        proc = mqtool("info", "--json", dledger_stores[name])
        assert proc.returncode == 0, proc.stderr
        info = json.loads(proc.stdout)
        passport = info["passport"]
        assert passport["layout"] == DLEDGER_LAYOUT
        section = passport["dledger"]
        assert section["directory"] == "dledger-n0" and section["self_id"] == "n0"
        assert section["ledger"]["first"]["index"] == 0
        assert section["ledger"]["last"]["index"] == 1999
        assert section["ledger"]["entries"] == 2000
        assert section["checkpoint"] == {"source": "checkpoint", "committed_index": committed,
                                         "end_index": end_index}
        assert section["current_term"] == 0 and section["vote_leader"] == "n0"
        assert section["checkpoint_lag"] == lag
        assert section["data_file_size"] == 1048576
        assert section["index_file_size"] == dl_fmt.INDEX_FILE_SIZE
        assert passport["inconsistencies"] == []
        assert passport["claims"][0]["claim"] == "DLedger mode"
        commitlog = info["commitlog"]
        assert commitlog["messages"] == 2000
        assert commitlog["directory"] == "dledger-n0/data"
        assert commitlog["physical_offset_mismatches"] == 0
        if name == "dledger-clean":   # every ConsumeQueue unit has its record, and back
            assert info["topics"] and all(
                t["commitlog"]["messages"] == t["consume_queue"]["units"]
                and t["consume_queue"]["units_past_commitlog_end"] == 0 for t in info["topics"])
    proc = mqtool("info", dledger_stores["dledger-crash"])
    assert "DLedger mode: dledger-n0/: entries 0..1,999, term 0" in proc.stdout
    assert "committedIndex 1,981 (18 behind the data)" in proc.stdout


def test_verify_finds_nothing_on_the_clean_store(dledger_stores, mqtool):
    proc = mqtool("verify", "--json", dledger_stores["dledger-clean"])
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [f for f in report["findings"] if f["severity"] == "error"] == []
    assert report["passport"]["layout"] == DLEDGER_LAYOUT


def test_verify_reports_the_body_the_broker_never_checks(dledger_stores, mqtool):
    damage = json.loads((SHARED_STORES / "dledger-clean-damaged" / "damage.json").read_text())
    proc = mqtool("verify", "--json", dledger_stores["dledger-clean-damaged"])
    report = json.loads(proc.stdout)
    crc = [f for f in report["findings"] if f["code"] == "CL_CRC_MISMATCH"]
    assert len(crc) == 1
    assert str(damage["message"]["commitLogOffset"]) in crc[0]["message"]


def test_single_data_file_dump_and_message_at(dledger_stores, mqtool):
    store = dledger_stores["dledger-clean"]
    data_file = store / "dledger-n0" / "data" / "00000000000001048576"
    assert identify_file(data_file) == "commitlog"
    proc = mqtool("dump", "--json", data_file)
    assert proc.returncode == 0, proc.stderr
    messages = [json.loads(line) for line in proc.stdout.splitlines()]
    messages = [m for m in messages if m["record_type"] == "commitlog/message"]
    assert len(messages) == 483
    commitlog = Store(store).commitlog
    record = message_at(commitlog, messages[5]["commitlog_offset"])
    assert record.offset == messages[5]["commitlog_offset"] and record.offset_ok
    proc = mqtool("dump", store / "dledger-n0" / "nonsense")
    assert proc.returncode == 2 and proc.stderr.startswith("mqtool: error:")


@pytest.mark.parametrize("name", DLEDGER_STORES)
def test_dump_of_the_dledger_index_and_text_files(name, dledger_stores, mqtool):
    state = broker_dump(name)["fileState"]["dledger"]
    folder = dledger_stores[name] / "dledger-n0"
    proc = mqtool("dump", "--json", folder / "index" / "00000000000000000000")
    assert proc.returncode == 0, proc.stderr
    units = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [[u["unit"], u["magic"], u["pos"], u["size"], u["index"], u["term"]] for u in units] \
        == state["indexUnits"]
    for file, key in (("checkpoint", "checkpoint"), ("currterm", "currterm")):
        proc = mqtool("dump", "--json", folder / file)
        assert proc.returncode == 0, proc.stderr
        (record,) = [json.loads(line) for line in proc.stdout.splitlines()]
        assert record["record_type"] == "dledger/text"
        assert record["text"] == state[f"{key}File"]["text"] and record["values"] == state[key]


def test_the_batch_path_yields_what_the_reference_path_yields(dledger_stores):
    for name in DLEDGER_STORES:
        for seg in Store(dledger_stores[name]).commitlog.segments:
            assert seg.layout == DLEDGER_LAYOUT
            reference = list(scan_segment(seg))
            batched = list(expand_batches(scan_segment_batches(seg)))
            assert batched == reference
            assert any(type(e) is MessageRecord for e in reference)


def test_offset_ranges_are_record_offsets(dledger_stores):
    commitlog = Store(dledger_stores["dledger-clean"]).commitlog
    messages = list(Scanner(commitlog).messages())
    start, end = messages[10].offset, messages[20].offset
    assert [m.offset for m in Scanner(commitlog).messages(start, end)] == \
        [m.offset for m in messages[10:20]]
    seg = commitlog.segments[0]
    for events in (scan_segment(seg, start, end),
                   expand_batches(scan_segment_batches(seg, start, end))):
        assert [e.offset for e in events if type(e) is MessageRecord] == \
            [m.offset for m in messages[10:20]]


def test_a_broken_entry_header_ends_the_file_or_is_skipped_with_resync(dledger_stores, tmp_path):
    source = dledger_stores["dledger-clean"] / "dledger-n0"
    folder = tmp_path / "store" / "dledger-n0"
    (folder / "data").mkdir(parents=True)
    shutil.copy(source / "data" / "00000000000000000000", folder / "data")
    store = Store(tmp_path / "store" / "dledger-n0" / "data")
    seg = store.commitlog.segments[0]
    clean = [e for e in scan_segment(seg) if type(e) is MessageRecord]
    victim = clean[100]
    entry_pos = victim.offset - dl_fmt.ENTRY_HEADER_SIZE
    with open(seg.path, "r+b") as fh:       # the entry's pos field no longer says where it is
        fh.seek(entry_pos + dl_fmt.POS_FIELD_OFFSET)
        fh.write((entry_pos + 1).to_bytes(8, "big"))
    strict = list(scan_segment(seg))
    assert [e.offset for e in strict if type(e) is MessageRecord] == \
        [r.offset for r in clean[:100]]
    bad = strict[-1]
    assert type(bad) is CorruptRegion and bad.offset == entry_pos
    assert bad.code == "DL_ENTRY_POS" and "DLedger entry 100" in bad.detail
    resynced = list(scan_segment(seg, resync=True))
    kinds = [type(e) for e in resynced]
    assert kinds.count(CorruptRegion) == 1 and kinds[-1] is BlankRecord
    assert [e.offset for e in resynced if type(e) is MessageRecord] == \
        [r.offset for r in clean[:100] + clean[101:]]
    batched = list(expand_batches(scan_segment_batches(seg, resync=True)))
    assert batched == resynced


def test_codecs_agree_with_the_declarations():
    header = bytes(range(48))
    parsed = dl_fmt.entry_header.parse(header)
    assert codec.DLEDGER_ENTRY_HEADER.unpack(header) == \
        tuple(parsed[sc.name] for sc in dl_fmt.entry_header.subcons)
    unit = bytes(range(100, 132))
    parsed = dl_fmt.index_unit.parse(unit)
    assert codec.DLEDGER_INDEX_UNIT.unpack(unit) == \
        tuple(parsed[sc.name] for sc in dl_fmt.index_unit.subcons)
    blank = dl_fmt.end_of_file_blank.build({"bytes_left": 100})
    assert codec.DLEDGER_BLANK.unpack(blank) == (-1, 100)
    assert codec.DLEDGER_ENTRY_HEADER_DTYPE.itemsize == dl_fmt.ENTRY_HEADER_SIZE


def test_scan_events_of_a_pure_dledger_store_start_at_48(dledger_stores):
    commitlog = Store(dledger_stores["dledger-clean"]).commitlog
    events = list(Scanner(commitlog).scan())
    assert type(events[0]) is MessageRecord and events[0].offset == 48
    assert sum(type(e) is BlankRecord for e in events) == 4
    assert type(events[-1]) is UnwrittenTail
    assert all(isinstance(e, (MessageRecord, BlankRecord, UnwrittenTail)) for e in events)
    assert not any(type(e) is RecordBatch for e in events)


# --- query ---------------------------------------------------------------------------------------

def _recover_json(name: str) -> dict:
    with gzip.open(SHARED_STORES / name / "recover.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.mark.parametrize("name", DLEDGER_STORES)
def test_broker_query_message_on_the_recovered_store_equals_the_brokers(name, unpack_shared):
    """The broker's queryMessage answers after its DLedger recovery, read off the store that
    recovery left (the IndexFile a crash deletes stays deleted: key lookups lose that tail)."""
    from mqtool import query as q

    store = Store(unpack_shared(name, "recovered.tar.gz"))   # skips without ../shared
    recover = _recover_json(name)
    assert store.layout == DLEDGER_LAYOUT
    end = recover["afterRecovery"]["maxPhyOffset"]
    wrong = []
    for entry in recover["queryMessage"]:
        got = q.broker_query_message(store, entry["topic"], entry["key"], max_offset=end)
        if got != entry["offsets"]:
            wrong.append((entry["kind"], entry["topic"], entry["key"], got, entry["offsets"]))
    assert wrong == [], wrong[:3]


@pytest.mark.parametrize("name", DLEDGER_STORES)
def test_key_and_uniq_key_queries_find_every_carrier(name, dledger_stores):
    from mqtool import query as q

    recover = _recover_json(name)
    messages = broker_dump(name)["messages"]
    store = Store(dledger_stores[name])
    entries = recover["queryMessage"]
    sample = [e for e in entries if e["kind"] in ("hot key", "absent key")] + entries[::40]
    for entry in sample:
        uniq = "uniq" in entry["kind"].lower()
        result = (q.query_uniq_key if uniq else q.query_key)(store, entry["key"], entry["topic"])
        expected = sorted(m["commitLogOffset"] for m in messages
                          if m["topic"] == entry["topic"] and m["sysFlag"] & 0xC != 0xC
                          and ((m.get("uniqKey") == entry["key"]) if uniq
                               else entry["key"] in (m.get("keys") or "").split(" ")))
        assert result.offsets == expected, (entry, result.notes)


def test_msg_id_and_queue_offset_lookups(dledger_stores, mqtool):
    message = broker_dump("dledger-clean")["messages"][700]
    store = dledger_stores["dledger-clean"]
    for args in (("--msg-id", message["msgId"]),
                 ("--topic", message["topic"], "--queue", str(message["queueId"]), "--offset",
                  str(message["queueOffset"]))):
        proc = mqtool("query", "--json", store, *args)
        assert proc.returncode == 0, proc.stderr
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        found = [r for r in lines if r["record_type"] == "commitlog/message"]
        assert [r["commitlog_offset"] for r in found] == [message["commitLogOffset"]]
        assert found[0]["uniq_key"] == message["uniqKey"]


def test_diff_salvage_and_export_read_dledger_entries(dledger_stores, mqtool, tmp_path):
    damage = json.loads((SHARED_STORES / "dledger-clean-damaged" / "damage.json").read_text())
    damaged_offset = damage["message"]["commitLogOffset"]
    clean, damaged = dledger_stores["dledger-clean"], dledger_stores["dledger-clean-damaged"]
    proc = mqtool("diff", "--json", clean, damaged)
    assert proc.returncode == 1, proc.stderr
    assert f"first divergent offset {damaged_offset}" in mqtool("diff", clean, damaged).stdout
    out = tmp_path / "salvaged.jsonl"
    proc = mqtool("salvage", damaged, "--out", out, "--map", tmp_path / "map.json")
    assert proc.returncode in (0, 1), proc.stderr
    salvage_map = json.loads((tmp_path / "map.json").read_text())
    assert salvage_map["messages_intact"] == 1999 and salvage_map["messages_damaged"] == 1
    offsets = [json.loads(line)["commitlog_offset"] for line in out.read_text().splitlines()]
    assert damaged_offset not in offsets and len(offsets) == 1999
    out = tmp_path / "exported.jsonl"
    proc = mqtool("export", clean, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert len(out.read_text().splitlines()) == 2000


# --- bad input -----------------------------------------------------------------------------------

def _poke(path, at: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(data)


DATA = "dledger-n0/data/"
BAD_INPUT = {
    "torn-last-entry": (lambda r: (r / DATA / "00000000000004194304").open("r+b").truncate(150001),
                        "DL_ENTRY_TRUNCATED"),
    "entry-size-past-everything": (lambda r: _poke(r / DATA / "00000000000003145728", 4,
                                                   (0x7FFFFFFF).to_bytes(4, "big")),
                                   "DL_ENTRY_SIZE"),
    "garbled-checkpoint": (lambda r: (r / "dledger-n0/checkpoint").write_bytes(b"\xff\xfe=\n"),
                           "DL_CHECKPOINT"),
    "missing-index": (lambda r: shutil.rmtree(r / "dledger-n0/index"), "DL_INDEX_UNIT"),
    "garbled-currterm": (lambda r: (r / "dledger-n0/currterm").write_text("currTerm=x\n"),
                         "DL_CHECKPOINT"),
    "all-zero-last-file": (lambda r: (r / DATA / "00000000000004194304").write_bytes(
        bytes(1 << 20)), "RECOVERY_TRUNCATES"),
    "no-data-files": (lambda r: [p.unlink() for p in (r / DATA).iterdir()], "CQ_DANGLING"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_dledger_input_gives_findings_not_tracebacks(case, dledger_stores, tmp_path, mqtool):
    root = tmp_path / "store"
    sparse_copytree(dledger_stores["dledger-clean"], root)
    damage, expected_code = BAD_INPUT[case]
    damage(root)
    for command in ("info", "dump"):
        proc = mqtool(command, "--json", root)
        assert proc.returncode == 0, (command, proc.stderr)
    proc = mqtool("verify", "--json", root)
    findings = json.loads(proc.stdout)["findings"]
    assert proc.returncode == (1 if any(f["severity"] == "error" for f in findings) else 0)
    assert expected_code in {f["code"] for f in findings}


def test_two_dledger_folders_are_one_clear_error(dledger_stores, tmp_path, mqtool):
    root = tmp_path / "store"
    sparse_copytree(dledger_stores["dledger-clean"], root)
    sparse_copytree(root / "dledger-n0", root / "dledger-n1")
    proc = mqtool("info", root)
    assert proc.returncode == 2
    assert proc.stderr.startswith("mqtool: error:") and len(proc.stderr.splitlines()) == 1
    assert "dledger-n0, dledger-n1" in proc.stderr
    assert mqtool("info", root / "dledger-n1" / "data").returncode == 0


@pytest.mark.parametrize("name", DLEDGER_STORES)
def test_broker_compatible_answers_on_the_store_before_recovery(name, dledger_stores, mqtool):
    """Predicted from the store as the broker left it: after a crash the IndexFile the abnormal
    start deletes is not rebuilt in DLedger mode, so its keys are not answered."""
    from mqtool import query as q
    from mqtool.recovery import predict_recovery

    recover = _recover_json(name)
    store = Store(dledger_stores[name])
    end = predict_recovery(store).process_offset
    assert end == recover["afterRecovery"]["maxPhyOffset"]
    wrong = [e for e in recover["queryMessage"]
             if q.broker_query_message(store, e["topic"], e["key"], max_offset=end)
             != e["offsets"]]
    assert wrong == []
    entry = next(e for e in recover["queryMessage"] if e["kind"] == "hot key")
    proc = mqtool("query", "--json", "--broker-compatible", "--key", entry["key"], "--topic",
                  entry["topic"], dledger_stores[name])
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert summary["offsets"] == entry["offsets"]


@pytest.mark.parametrize("name", ["dledger-clean", "dledger-crash"])
def test_spark_byte_range_splits_read_every_entry_exactly_once(name, dledger_stores):
    """The Spark audit's split reading (no Spark needed): small byte ranges over DLedger data
    files, each resynchronised on an entry header, together yield every record exactly once."""
    from mqtool.spark.plan import make_splits, resolve_input
    from mqtool.spark.splits import split_events

    store = dledger_stores[name]
    broker = resolve_input(str(store))
    assert [f.name for f in broker.files] == \
        [s.name for s in Store(store).commitlog.segments]
    splits = make_splits([broker], split_size=100_000)
    assert len(splits) > len(broker.files) * 5
    reference = [m.offset for m in Scanner(Store(store).commitlog).messages()]
    one_by_one, batched = [], []
    for split in splits:
        one_by_one += [e.offset for e in split_events(split) if type(e) is MessageRecord]
        for event in split_events(split, batches=True):
            if type(event) is RecordBatch:
                batched += event.offsets.tolist()
    assert one_by_one == batched == reference


def test_verify_workers_rebuild_the_dledger_layout(dledger_stores, mqtool):
    """verify's worker processes rebuild the CommitLog from its directory: a DLedger data
    directory must come back as DLedger segments."""
    store = dledger_stores["dledger-clean-damaged"]
    one = json.loads(mqtool("verify", "--json", store).stdout)["findings"]
    two = json.loads(mqtool("verify", "--json", "--workers", "2", store).stdout)["findings"]
    assert one == two and [f["code"] for f in two] == ["CL_CRC_MISMATCH"]


def test_a_damaged_entry_magic_hides_nothing_from_dump_and_salvage(dledger_stores, tmp_path,
                                                                    mqtool):
    """One entry's magic byte flipped, its size and the message inside intact: the broker's
    DLedger recovery ends the log there (verify still predicts that), but dump and salvage read
    on and list every message the broker's decoder reads from the files, the one behind the
    damaged header flagged. Where the entry lies comes from the broker's dump.json."""
    broker = broker_dump("dledger-clean")["messages"]
    victim = broker[1000]
    entry = victim["dledger"]
    store = sparse_copytree(dledger_stores["dledger-clean"], tmp_path / "store")
    with open(store / entry["entryFile"], "r+b") as fh:
        fh.seek(entry["entryFilePos"] + 3)          # the low byte of the magic (1)
        low = fh.read(1)[0]
        fh.seek(entry["entryFilePos"] + 3)
        fh.write(bytes([low ^ 0x04]))
    expected = [m["commitLogOffset"] for m in broker]

    proc = mqtool("dump", "--json", "--body", "none", store)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    messages = [r for r in records if r["record_type"] == "commitlog/message"]
    assert [m["commitlog_offset"] for m in messages] == expected
    flagged = [m for m in messages if "dledger_entry_damage" in m]
    assert [m["commitlog_offset"] for m in flagged] == [victim["commitLogOffset"]]
    assert flagged[0]["dledger_entry_damage"]["code"] == "DL_ENTRY_MAGIC"
    assert flagged[0]["body_crc_ok"] and flagged[0]["offset_ok"]
    (corrupt,) = [r for r in records if r["record_type"] == "commitlog/corrupt"]
    assert (corrupt["commitlog_offset"], corrupt["length"], corrupt["code"]) == \
        (entry["entryOffset"], 48, "DL_ENTRY_MAGIC")

    out = tmp_path / "salvaged.jsonl"
    proc = mqtool("salvage", "--out", out, "--body", "none", store)
    assert proc.returncode == 0, proc.stderr
    salvaged = [json.loads(line) for line in out.read_text().splitlines()]
    assert [m["commitlog_offset"] for m in salvaged] == expected
    assert [m["commitlog_offset"] for m in salvaged if "dledger_entry_damage" in m] == \
        [victim["commitLogOffset"]]
    report = json.loads(proc.stdout)
    assert report["truncation"]["process_offset"] == entry["entryOffset"]
    assert [(h["start"], h["end"]) for h in report["holes"]] == \
        [(entry["entryOffset"], entry["entryOffset"] + 48)]

    # the broker's recovery is unchanged: it ends the log at the damaged entry
    proc = mqtool("verify", "--json", store)
    assert proc.returncode == 1, proc.stderr
    found = json.loads(proc.stdout)
    assert [f["code"] for f in found["findings"] if f["code"].startswith("DL_")] == \
        ["DL_ENTRY_MAGIC"]
    assert found["recovery"]["process_offset"] == entry["entryOffset"]
