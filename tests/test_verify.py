"""mqtool verify on broker-written stores and on copies of the fixture store damaged here.

Every expected location is computed from the broker's dump.json/recover.json/damage.json or from
the raw bytes with struct, never from verify's own output."""
from __future__ import annotations

import gzip
import hashlib
import json
import random
import shutil
import stat
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import FIXTURE_STORE
from mqtool.formats import codecs
from mqtool.store import Store
from mqtool.verify import CODES, _KeyHashes, verify_store
from mqtool.writer import Message, StoreWriter

SLOTS, ENTRIES = 1000, 4000          # fixtures/.../geometry.json: maxHashSlotNum, maxIndexNum
ENTRY = struct.Struct(">iqii")
CQ_UNIT = struct.Struct(">qiq")
CLEAN = ["clean-small", "clean-multi", "v6-unicode-small", "delay-delivered-small", "v5-clean",
         "v5-crash", "v5-propcrc-clean"]
CRASH = ["crash-small", "crash-lost-small"]


def _json(path: Path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


MESSAGES = _json(FIXTURE_STORE / "dump.json.gz")["messages"]


def _keys(report, severity=None):
    return {f.key for f in report.findings if severity is None or f.severity == severity}


def _errors(report):
    return _keys(report, "error")


def _message(predicate):
    return next(m for m in MESSAGES if predicate(m))


def _patch(path: Path, position: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[position:position + len(data)] = data
    path.write_bytes(bytes(raw))


def _index_files(store_dir: Path) -> list[Path]:
    return sorted((store_dir / "index").iterdir())


def _entry_position(number: int) -> int:
    return 40 + 4 * SLOTS + 20 * number


def _cl(message) -> str:
    return f"commitlog/{message['file']}"


# --- broker-written stores ---------------------------------------------------------------------------

def test_fixture_store_is_clean(fixture_store):
    report = verify_store(Store(fixture_store))
    assert report.summary["errors"] == 0 and report.summary["warnings"] == 0
    assert report.summary["messages_scanned"] == len(MESSAGES)
    assert report.recovery.process_offset == _json(
        FIXTURE_STORE / "recover.json.gz")["afterRecovery"]["maxPhyOffset"]


@pytest.mark.parametrize("name", CLEAN)
def test_clean_broker_stores_have_no_error(shared_stores, name):
    report = verify_store(Store(shared_stores / name / "store"))
    assert report.summary["errors"] == 0, [f.to_dict() for f in report.findings]
    expected_warnings = {"ABORT_PRESENT"} if name == "v5-crash" else set()
    assert set(report.summary["by_code"]) == expected_warnings


@pytest.mark.parametrize("name", CRASH)
def test_crash_stores_report_only_what_recovery_rebuilds(shared_stores, name):
    ref = shared_stores / name
    report = verify_store(Store(ref / "store"))
    assert report.summary["errors"] == 0, [f.to_dict() for f in report.findings if f.severity == "error"]
    assert report.recovery.messages_lost == 0
    # the records the broker's CQ does not reference yet, counted from the raw files
    referenced = set()
    for path in (ref / "store" / "consumequeue").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for pos in range(0, len(data), 20):
                offset, size, _ = CQ_UNIT.unpack_from(data, pos)
                if offset < 0 or size <= 0:
                    break
                referenced.add(offset)
    unreferenced = [m for m in _json(ref / "dump.json.gz")["messages"]
                    if m["sysFlag"] & 0xC in (0, 8) and m["commitLogOffset"] not in referenced]
    missing = [f for f in report.findings if f.code == "CQ_MISSING"]
    assert all(f.severity == "warning" for f in missing)
    assert sum(f.count for f in missing) == len(unreferenced)


def test_broker_recovered_store_keeps_tag_hash_in_delay_queue(shared_stores):
    """After 4.9's abnormal recovery (crash-lost-small/recovered) the re-dispatched units of
    SCHEDULE_TOPIC_XXXX carry the TAGS hash instead of the delivery time: a broker quirk, reported
    as a warning on exactly those units."""
    ref = shared_stores / "crash-lost-small"
    report = verify_store(Store(ref / "recovered"))
    assert report.summary["errors"] == 0, [f.to_dict() for f in report.findings if f.severity == "error"]
    units = _json(ref / "recover.json.gz")["consumeQueues"]["SCHEDULE_TOPIC_XXXX"]
    hashed = {("CQ_MISMATCH", f"consumequeue/SCHEDULE_TOPIC_XXXX/{queue}/00000000000000000000",
               queue_offset * 20)
              for queue, data in units.items()
              for queue_offset, _, _, tags_code in data["units"] if tags_code < 10 ** 12}
    assert hashed and _keys(report, "warning") == hashed


def test_clean_small_damaged_names_the_record(shared_stores):
    ref = shared_stores / "clean-small-damaged"
    damage = _json(ref / "damage.json")
    report = verify_store(Store(ref / "store"))
    where = (f"commitlog/{damage['file']}", damage["message"]["commitLogOffset"] - int(damage["file"]))
    assert where == ("commitlog/00000000000002097152", 2_421_554 - 2_097_152)
    assert _errors(report) == {("CL_CRC_MISMATCH", *where), ("RECOVERY_TRUNCATES", *where)}
    truncates = next(f for f in report.findings if f.code == "RECOVERY_TRUNCATES")
    assert truncates.commitlog_offset == 2_421_554
    assert truncates.details["messages"] == 1 + damage["messagesInFileAfterDamaged"]


def test_v5_damaged(shared_stores):
    ref = shared_stores / "v5-damaged"
    damage = _json(ref / "damage.json")
    report = verify_store(Store(ref / "store"))
    where = (f"commitlog/{damage['file']}", damage["message"]["commitLogOffset"] - int(damage["file"]))
    assert _errors(report) == {("CL_CRC_MISMATCH", *where), ("RECOVERY_TRUNCATES", *where)}


def test_prop_crc_damage_is_named(shared_stores):
    ref = shared_stores / "v5-propcrc-damaged"
    damage = _json(ref / "damage.json")
    offset = damage["message"]["commitLogOffset"]
    where = (f"commitlog/{damage['file']}", offset - int(damage["file"]))
    report = verify_store(Store(ref / "store"))
    assert ("CL_PROP_CRC_MISMATCH", *where) in _errors(report)
    # the byte was flipped in UNIQ_KEY: the index entry of the old key now matches nothing
    assert {f.code for f in report.findings if f.severity == "error"} <= {
        "CL_PROP_CRC_MISMATCH", "IDX_HASH_MISMATCH", "IDX_MISSING_KEY"}
    assert report.recovery.messages_lost == 0  # unseen by the broker's defaults
    forced = verify_store(Store(ref / "store"), force_verify_prop_crc=True)
    assert ("RECOVERY_TRUNCATES", *where) in _errors(forced)


# --- damage made here, at positions from dump.json --------------------------------------------------

def _middle_message(file="00000000000001048576", topic="TopicTest"):
    candidates = [m for m in MESSAGES if m["file"] == file and m["topic"] == topic
                  and m["sysFlag"] & 0xC == 0 and m["bodyLength"] > 0]
    return candidates[len(candidates) // 2]


def test_offset_field_mismatch(store_copy):
    m = _middle_message()
    _patch(store_copy / _cl(m), m["filePos"] + 28, struct.pack(">q", m["commitLogOffset"] + 4096))
    report = verify_store(Store(store_copy))
    assert _errors(report) == {("CL_OFFSET_MISMATCH", _cl(m), m["filePos"])}


def test_bad_magic_truncates(store_copy):
    m = _middle_message()
    _patch(store_copy / _cl(m), m["filePos"] + 4, b"\x12\x34\x56\x78")
    report = verify_store(Store(store_copy))
    where = (_cl(m), m["filePos"])
    assert ("CL_BAD_MAGIC", *where) in _errors(report)
    assert ("RECOVERY_TRUNCATES", *where) in _errors(report)
    later = sum(1 for x in MESSAGES if x["commitLogOffset"] >= m["commitLogOffset"])
    assert report.recovery.messages_lost == later - 1  # the damaged record no longer decodes


def test_length_mismatch(store_copy):
    m = _middle_message()
    _patch(store_copy / _cl(m), m["filePos"], struct.pack(">i", m["storeSize"] + 1))
    report = verify_store(Store(store_copy))
    assert ("CL_LENGTH_MISMATCH", _cl(m), m["filePos"]) in _errors(report)


def test_body_crc_and_quick(store_copy):
    m = _middle_message()
    body = m["filePos"] + 88  # IPv4 hosts: 84 fixed bytes, then the 4-byte body length
    old = (store_copy / _cl(m)).read_bytes()[body]
    _patch(store_copy / _cl(m), body, bytes([old ^ 0xFF]))
    report = verify_store(Store(store_copy))
    where = (_cl(m), m["filePos"])
    assert {("CL_CRC_MISMATCH", *where), ("RECOVERY_TRUNCATES", *where)} <= _errors(report)
    quick = verify_store(Store(store_copy), quick=True)
    assert not any(f.code == "CL_CRC_MISMATCH" for f in quick.findings)
    assert not quick.recovery.crc_verified


def _cq_path(store_dir: Path, m) -> Path:
    return store_dir / "consumequeue" / m["topic"] / str(m["queueId"]) / "00000000000000000000"


def test_cq_unit_size_mismatch(store_copy):
    m = _middle_message()
    path = _cq_path(store_copy, m)
    pos = m["queueOffset"] * 20
    assert CQ_UNIT.unpack_from(path.read_bytes(), pos)[0] == m["commitLogOffset"]
    _patch(path, pos + 8, struct.pack(">i", m["storeSize"] + 10))
    report = verify_store(Store(store_copy))
    rel = path.relative_to(store_copy).as_posix()
    assert _errors(report) == {("CQ_MISMATCH", rel, pos)}


def test_cq_unit_dangling(store_copy):
    m = _middle_message()
    path = _cq_path(store_copy, m)
    pos = m["queueOffset"] * 20
    _patch(path, pos, struct.pack(">q", m["commitLogOffset"] + 1))
    report = verify_store(Store(store_copy))
    rel = path.relative_to(store_copy).as_posix()
    errors = _errors(report)
    assert ("CQ_DANGLING", rel, pos) in errors
    # the record lost its unit, and the queue has later units: a hole recovery never fills
    assert ("CQ_MISSING", _cl(m), m["filePos"]) in errors


def test_cq_missing_tail_unit(store_copy):
    queue = [x for x in MESSAGES if x["topic"] == "TopicTest" and x["queueId"] == 1
             and x["sysFlag"] & 0xC in (0, 8)]
    last = max(queue, key=lambda x: x["queueOffset"])
    path = _cq_path(store_copy, last)
    _patch(path, last["queueOffset"] * 20, bytes(20))
    report = verify_store(Store(store_copy))
    missing = [f for f in report.findings if f.code == "CQ_MISSING"]
    assert [f.key for f in missing] == [("CQ_MISSING", _cl(last), last["filePos"])]
    # other queues reach past it, so 4.9's reput starts after it: never rebuilt
    assert missing[0].severity == "error"


def test_queue_offset_gap(store_copy):
    m = _middle_message()
    _patch(store_copy / _cl(m), m["filePos"] + 20, struct.pack(">q", m["queueOffset"] + 50))
    report = verify_store(Store(store_copy))
    errors = _errors(report)
    assert ("CQ_QUEUE_GAP", _cl(m), m["filePos"]) in errors
    assert ("CQ_MISMATCH", _cq_path(store_copy, m).relative_to(store_copy).as_posix(),
            m["queueOffset"] * 20) in errors


def test_cq_file_size(store_copy):
    path = _cq_path(store_copy, _middle_message())
    with open(path, "ab") as fh:
        fh.write(b"\x01" * 7)
    report = verify_store(Store(store_copy))
    rel = path.relative_to(store_copy).as_posix()
    assert any(f.code == "CQ_FILE_SIZE" and f.file == rel for f in report.findings)
    assert report.recovery.refuses_to_start


def _entries(path: Path):
    data = path.read_bytes()
    count = struct.unpack_from(">i", data, 36)[0]
    return data, [ENTRY.unpack_from(data, _entry_position(n)) for n in range(count)]


def test_index_entry_past_the_end(store_copy):
    path = _index_files(store_copy)[0]
    _, entries = _entries(path)
    number = len(entries) // 2
    _patch(path, _entry_position(number) + 4, struct.pack(">q", 10 ** 12))
    report = verify_store(Store(store_copy))
    assert ("IDX_DANGLING", f"index/{path.name}", _entry_position(number)) in _errors(report)


def test_index_hash_mismatch(store_copy):
    path = _index_files(store_copy)[1]
    _, entries = _entries(path)
    number = len(entries) // 2
    key_hash = entries[number][0]
    _patch(path, _entry_position(number), struct.pack(">i", key_hash ^ 0x10))
    report = verify_store(Store(store_copy))
    errors = _errors(report)
    assert ("IDX_HASH_MISMATCH", f"index/{path.name}", _entry_position(number)) in errors


def test_index_missing_key_through_slot(store_copy):
    path = _index_files(store_copy)[0]
    data, entries = _entries(path)
    # a slot whose chain is a single entry (prev_index 0): emptying the slot hides that entry
    for slot in range(SLOTS):
        head = struct.unpack_from(">i", data, 40 + 4 * slot)[0]
        if head > 0 and entries[head][3] == 0:
            break
    _patch(path, 40 + 4 * slot, b"\x00\x00\x00\x00")
    report = verify_store(Store(store_copy))
    rel = f"index/{path.name}"
    assert ("IDX_MISSING_KEY", rel, _entry_position(head)) in _errors(report)
    assert ("IDX_HEADER", rel, 32) in _keys(report)  # hashSlotCount no longer matches


def test_index_header_end_offset(store_copy):
    path = _index_files(store_copy)[0]
    _, entries = _entries(path)
    _patch(path, 24, struct.pack(">q", entries[-1][1] + 1))
    report = verify_store(Store(store_copy))
    assert ("IDX_HEADER", f"index/{path.name}", 24) in _errors(report)


def test_checkpoint_ahead(store_copy):
    newest = max(m["storeTimestamp"] for m in MESSAGES)
    _patch(store_copy / "checkpoint", 0, struct.pack(">q", newest + 60_000))
    report = verify_store(Store(store_copy))
    assert ("CKPT_AHEAD", "checkpoint", 0) in _keys(report, "warning")
    assert report.summary["errors"] == 0


def test_abort_and_missing_checkpoint(store_copy):
    (store_copy / "abort").write_bytes(b"")
    (store_copy / "checkpoint").unlink()
    report = verify_store(Store(store_copy))
    keys = _keys(report, "warning")
    assert ("ABORT_PRESENT", "abort", 0) in keys and ("CKPT_MISSING", "checkpoint", 0) in keys
    assert report.recovery.mode == "abnormal"


def test_stale_record_past_the_write_end(store_copy):
    """A plausible record in the zero tail of the last file, which no ConsumeQueue references,
    is stale data (left by an earlier truncation), not data recovery would lose."""
    recover = _json(FIXTURE_STORE / "recover.json.gz")
    end = recover["afterRecovery"]["maxPhyOffset"]
    last = "00000000000002097152"
    m = _message(lambda x: x["file"] == last and x["sysFlag"] & 0xC == 0)
    path = store_copy / "commitlog" / last
    data = path.read_bytes()
    record = bytearray(data[m["filePos"]:m["filePos"] + m["storeSize"]])
    at = end - int(last) + 4096
    assert not any(data[end - int(last):at + len(record)])
    record[28:36] = struct.pack(">q", int(last) + at)
    _patch(path, at, bytes(record))
    report = verify_store(Store(store_copy))
    assert report.summary["errors"] == 0, [f.to_dict() for f in report.findings]
    assert _keys(report, "warning") == {("CL_STALE_DATA", f"commitlog/{last}", at)}
    assert report.recovery.process_offset == end and report.recovery.messages_lost == 1


def test_workers_give_the_same_findings(store_copy):
    m = _middle_message()
    _patch(store_copy / _cl(m), m["filePos"] + 28, struct.pack(">q", 1))
    serial = verify_store(Store(store_copy), workers=1)
    parallel = verify_store(Store(store_copy), workers=2)
    assert [f.to_dict() for f in serial.findings] == [f.to_dict() for f in parallel.findings]
    assert serial.recovery.to_dict() == parallel.recovery.to_dict()


def test_fast_hash_equals_codec():
    rng = random.Random(7)
    alphabet = "abcXYZ019#%_- é键😀\x01"
    samples = ["", "abc", "polygenelubricants", "TopicTest#OrderID001", "x" * 2000]
    samples += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300))) for _ in range(300)]
    samples += ["".join(chr(rng.randint(32, 126)) for _ in range(rng.randint(1, 200))) for _ in range(300)]
    for text in samples:
        assert codecs.java_string_hash_fast(text) == codecs.java_string_hash(text), text
    hashes = _KeyHashes()
    for topic in ("TopicTest", "%RETRY%GroupA", "LongTopic_" + "k" * 117, "tópico"):
        for key in samples[:200]:
            assert hashes.key_hash(topic, key) == codecs.index_key_hash(
                codecs.index_key(topic, key)), (topic, key)


def test_codes_are_documented():
    for code, (severity, meaning) in CODES.items():
        assert code.isupper() and severity in ("error", "warning", "info") and meaning


# --- the command line ---------------------------------------------------------------------------------

def test_cli_exit_codes_and_json(mqtool, store_copy, tmp_path):
    ok = mqtool("verify", store_copy)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(f"store: {store_copy}")
    assert "What the broker would do on next start" in ok.stdout
    m = _middle_message()
    _patch(store_copy / _cl(m), m["filePos"] + 4, b"\x00\x00\x00\x01")
    bad = mqtool("verify", "--json", store_copy)
    assert bad.returncode == 1, bad.stderr
    document = json.loads(bad.stdout)
    assert set(document) == {"store", "geometry", "findings", "summary", "recovery", "passport"}
    assert {"errors", "warnings", "by_code"} <= set(document["summary"])
    assert document["summary"]["by_code"]["CL_BAD_MAGIC"] == 1
    assert document["recovery"]["process_offset"] == m["commitLogOffset"]
    for finding in document["findings"]:
        assert {"code", "severity", "file", "offset", "message"} <= set(finding)
    assert {"code": "CL_BAD_MAGIC", "file": _cl(m), "offset": m["filePos"]}.items() <= next(
        f for f in document["findings"] if f["code"] == "CL_BAD_MAGIC").items()
    text = mqtool("verify", store_copy)
    assert text.returncode == 1 and "CL_BAD_MAGIC" in text.stdout and "RECOVERY_TRUNCATES" in text.stdout


def test_cli_expect_round_trip(mqtool, store_copy, tmp_path):
    m = _middle_message()
    _patch(store_copy / _cl(m), m["filePos"] + 28, struct.pack(">q", 7))
    _patch(store_copy / "checkpoint", 0, struct.pack(">q", 4_000_000_000_000))
    expected = tmp_path / "expected.json"
    run = mqtool("verify", "--json", store_copy)
    expected.write_text(run.stdout)
    assert len(json.loads(run.stdout)["findings"]) == 2
    same = mqtool("verify", "--expect", expected, store_copy)
    assert same.returncode == 0, same.stdout + same.stderr
    document = json.loads(run.stdout)
    removed = document["findings"].pop(0)
    as_list = tmp_path / "fewer.json"
    as_list.write_text(json.dumps(document["findings"]))
    differ = mqtool("verify", "--expect", as_list, store_copy)
    assert differ.returncode == 1
    assert f"unexpected: {removed['code']} {removed['file']}:{removed['offset']}" in differ.stdout
    extra = tmp_path / "more.json"
    extra.write_text(json.dumps(json.loads(run.stdout)["findings"]
                                + [{"code": "CL_GAP", "file": "commitlog/x", "offset": 3}]))
    more = mqtool("verify", "--expect", extra, store_copy)
    assert more.returncode == 1 and "missing: CL_GAP commitlog/x:3" in more.stdout


@pytest.mark.parametrize("make", ["missing", "file", "random-commitlog", "bad-expect",
                                  "bad-version"])
def test_cli_bad_input(mqtool, tmp_path, make):
    if make == "missing":
        proc = mqtool("verify", tmp_path / "nope")
        assert proc.returncode == 2
    elif make == "file":
        target = tmp_path / "plain.txt"
        target.write_text("hello")
        proc = mqtool("verify", target)
        assert proc.returncode == 2
    elif make == "random-commitlog":
        commitlog = tmp_path / "store" / "commitlog"
        commitlog.mkdir(parents=True)
        (commitlog / "00000000000000000000").write_bytes(random.Random(1).randbytes(65536))
        proc = mqtool("verify", "--json", tmp_path / "store")
        assert proc.returncode == 1
        codes = {f["code"] for f in json.loads(proc.stdout)["findings"]}
        assert "CL_BAD_MAGIC" in codes or "CL_LENGTH_MISMATCH" in codes or "CL_TRUNCATED" in codes
        return
    elif make == "bad-expect":
        bad = tmp_path / "expect.json"
        bad.write_text("{not json")
        proc = mqtool("verify", "--expect", bad, FIXTURE_STORE / "store")
        assert proc.returncode == 2
    else:
        proc = mqtool("verify", "--broker-version", "3.2", FIXTURE_STORE / "store")
        assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mqtool: error:"), proc.stderr
    assert proc.stdout == ""


def _snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                            p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_read_only_store_is_not_modified(mqtool, store_copy):
    before = _snapshot(store_copy)
    paths = [store_copy, *store_copy.rglob("*")]
    for p in paths:
        mode = p.stat().st_mode
        p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        proc = mqtool("verify", "--json", store_copy)
        assert proc.returncode == 0, proc.stderr
    finally:
        for p in paths:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    assert _snapshot(store_copy) == before


# --- the batch engine against the record-at-a-time reference ---------------------------------------
# verify_store(engine="records") walks the CommitLog one MessageRecord at a time with the merge
# cursors written first; the default engine checks runs of records with numpy. Every report -
# findings (and their order under the listing caps), summary, recovery plan - must be identical.

def _same_reports(root: Path, **kw) -> None:
    for quick in (False, True):
        fast = verify_store(Store(root), quick=quick, **kw).to_dict()
        reference = verify_store(Store(root), quick=quick, engine="records", **kw).to_dict()
        assert fast == reference, (root, quick)


@pytest.mark.parametrize("name", CLEAN + CRASH + ["clean-small-damaged", "v5-damaged",
                                                  "v5-propcrc-damaged"])
def test_engines_agree_on_broker_stores(shared_stores, name):
    for kind in ("store", "recovered"):
        if (shared_stores / name / kind).is_dir():
            _same_reports(shared_stores / name / kind)
    if name.startswith("v5-propcrc"):
        _same_reports(shared_stores / name / "store", force_verify_prop_crc=True)


def _cq_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "consumequeue").rglob("*") if p.is_file())


def _damage_raw(root: Path, rng: random.Random) -> None:
    """One of the faults the cross-checks look for, at a random place."""
    kind = rng.choice(["cq-dup", "cq-swap", "cq-shift", "cq-tags", "cq-size", "cq-hole", "cq-far",
                       "idx-hash", "idx-phy", "idx-prev", "rec-qoff", "rec-tx", "rec-inner",
                       "rec-qid", "props", "flip", "zeros"])
    if kind.startswith("cq-"):
        path = rng.choice(_cq_files(root))
        data = bytearray(path.read_bytes())
        used = [i for i in range(len(data) // 20 - 1) if CQ_UNIT.unpack_from(data, 20 * i)[1] > 0]
        if not used:
            return
        i = rng.choice(used)
        offset, size, tags = CQ_UNIT.unpack_from(data, 20 * i)
        if kind == "cq-dup":
            data[20 * i + 20:20 * i + 40] = data[20 * i:20 * i + 20]
        elif kind == "cq-swap":
            data[20 * i:20 * i + 40] = data[20 * i + 20:20 * i + 40] + data[20 * i:20 * i + 20]
        elif kind == "cq-shift":
            struct.pack_into(">q", data, 20 * i, offset + rng.choice([1, -1, 64]))
        elif kind == "cq-tags":
            struct.pack_into(">q", data, 20 * i + 12, tags ^ 5)
        elif kind == "cq-size":
            struct.pack_into(">i", data, 20 * i + 8, size + 1)
        elif kind == "cq-hole":
            data[20 * i:20 * i + 20] = bytes(20)
        else:
            struct.pack_into(">q", data, 20 * i, offset + 10 ** 9)
        path.write_bytes(bytes(data))
    elif kind.startswith("idx-"):
        path = rng.choice(_index_files(root))
        data = bytearray(path.read_bytes())
        count = struct.unpack_from(">i", data, 36)[0]
        if count < 3:
            return
        number = rng.randrange(1, count)
        pos = _entry_position(number)
        key_hash, phy, _, _ = ENTRY.unpack_from(data, pos)
        if kind == "idx-hash":
            struct.pack_into(">i", data, pos, key_hash ^ 16)
        elif kind == "idx-phy":
            struct.pack_into(">q", data, pos + 4, phy + rng.choice([1, -300, 10 ** 9]))
        else:
            struct.pack_into(">i", data, pos + 16, rng.choice([0, number, -1]))
        path.write_bytes(bytes(data))
    elif kind in ("flip", "zeros"):
        m = rng.choice(MESSAGES)
        at = m["filePos"] + rng.randrange(m["storeSize"])
        old = (root / _cl(m)).read_bytes()[at]
        _patch(root / _cl(m), at, bytes([old ^ (1 << rng.randrange(8))]) if kind == "flip"
               else bytes(rng.choice([4, 50, 3000])))
    else:
        m = rng.choice(MESSAGES)
        pos = m["filePos"]
        if kind == "rec-qoff":
            _patch(root / _cl(m), pos + 20, struct.pack(">q", m["queueOffset"] + rng.choice([1, -1])))
        elif kind == "rec-tx":
            _patch(root / _cl(m), pos + 36, struct.pack(">i", (m["sysFlag"] & ~0xC)
                                                         | rng.choice([0, 4, 8, 12])))
        elif kind == "rec-inner":
            _patch(root / _cl(m), pos + 36, struct.pack(">i", m["sysFlag"] | 0x80))
        elif kind == "rec-qid":
            _patch(root / _cl(m), pos + 12, struct.pack(">i", m["queueId"] + 1))
        else:
            raw = (root / _cl(m)).read_bytes()[pos:pos + m["storeSize"]]
            name = rng.choice([b"TAGS\x01", b"KEYS\x01", b"UNIQ_KEY\x01", b"\x02"])
            at = raw.find(name)
            if at >= 0 and at + len(name) < len(raw):
                _patch(root / _cl(m), pos + at + len(name),
                       rng.choice([b" ", b"\xc3", b"\x01", b"\x02", b"z"]))


@pytest.mark.parametrize("seed", range(12))
def test_engines_agree_on_damaged_copies(tmp_path, seed):
    from mqtool.forge import DAMAGE_KINDS, damage_store
    rng = random.Random(seed)
    root = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", root)
    for _ in range(rng.choice([1, 2, 3])):
        if rng.random() < 0.3:
            damage_store(root, rng.choice(DAMAGE_KINDS), seed=rng.randrange(100),
                         target=rng.choice(["body", "header", "properties"]))
        else:
            _damage_raw(root, rng)
    _same_reports(root)


def test_engines_agree_past_the_listing_caps(tmp_path, monkeypatch):
    """With tiny caps the listed findings depend on the order they are made in: the batch engine
    adds them in the reference's order."""
    import mqtool.verify.commitlog as commitlog_module
    import mqtool.verify.report as report_module
    root = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", root)
    for path in _cq_files(root)[:3]:                       # many CQ_MISMATCH per file
        data = bytearray(path.read_bytes())
        for i in range(0, len(data) // 20, 3):
            _, size, tags = CQ_UNIT.unpack_from(data, 20 * i)
            if size > 0:
                struct.pack_into(">q", data, 20 * i + 12, tags + 1)
        path.write_bytes(bytes(data))
    index = _index_files(root)[0]                          # many IDX_HASH_MISMATCH / MISSING_KEY
    data = bytearray(index.read_bytes())
    for number in range(1, struct.unpack_from(">i", data, 36)[0], 4):
        pos = _entry_position(number)
        struct.pack_into(">i", data, pos, struct.unpack_from(">i", data, pos)[0] ^ 1)
    index.write_bytes(bytes(data))
    monkeypatch.setattr(commitlog_module, "_MAX_PER_SEGMENT", 7)
    monkeypatch.setattr(report_module, "MAX_LISTED_PER_CODE", 5)
    _same_reports(root)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(st.data())
def test_engines_agree_on_writer_stores_with_random_faults(tmp_path_factory, data):
    """A small store from the writer (several files, queues, index files, odd properties), then
    faults hypothesis places in any file."""
    root = tmp_path_factory.mktemp("w") / "store"
    writer = StoreWriter(root, commitlog_file_size=64 * 1024, cq_units_per_file=40,
                         index_slots=16, index_entries=120)
    topics = ["TopicTest", "Ördér", "SCHEDULE_TOPIC_XXXX", "%RETRY%G"]
    for i in range(data.draw(st.integers(20, 160), label="messages")):
        props = {"UNIQ_KEY": f"{i:032X}"}
        if i % 3:
            props["TAGS"] = ["t", "täg", "标签", "x" * 70][i % 4]
        if i % 4:
            props["KEYS"] = [f"k{i}", f"k{i} é{i}", f" a{i}  b ", "😀"][i % 4]
        topic = topics[i % 4]
        if topic == "SCHEDULE_TOPIC_XXXX":
            props["DELAY"] = ["1", "3", "0", "x", "99"][i % 5]
        sys_flag = [0, 0, 0, 4, 8, 12, 0x80][i % 7]
        if sys_flag & 0x80:
            props["INNER_NUM"] = ["2", "q", "0"][i % 3]
        writer.put(Message(topic=topic, queue_id=i % 2, body=bytes([i % 256]) * (i * 37 % 900),
                           properties=props, sys_flag=sys_flag, store_timestamp=10 ** 12 + i))
    writer.close()
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.stat().st_size
                   and p.parent.name != "config")
    for _ in range(data.draw(st.integers(0, 4), label="faults")):
        path = data.draw(st.sampled_from(files), label="file")
        raw = bytearray(path.read_bytes())
        at = data.draw(st.integers(0, len(raw) - 1), label="position")
        kind = data.draw(st.sampled_from(["flip", "zero", "copy"]), label="kind")
        if kind == "flip":
            raw[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
        elif kind == "zero":
            n = data.draw(st.integers(1, 64), label="length")
            raw[at:at + n] = bytes(len(raw[at:at + n]))
        else:
            src = data.draw(st.integers(0, len(raw) - 1), label="source")
            chunk = bytes(raw[src:src + 20])
            raw[at:at + len(chunk)] = chunk
            del raw[len(path.read_bytes()):]
        path.write_bytes(bytes(raw))
    _same_reports(root)


def test_batch_engine_on_records_the_reference_decoder_made(store_copy, monkeypatch):
    """When the scanner's fast path declines everything, records come one by one from
    decode_message as one-record batches: the batch engine's results are the same."""
    import mqtool.scan as scan_module
    rng = random.Random(5)
    for _ in range(4):
        _damage_raw(store_copy, rng)
    expected = verify_store(Store(store_copy), engine="records").to_dict()
    monkeypatch.setattr(scan_module.batches, "_fast_batch", lambda *args, **kwargs: None)
    assert verify_store(Store(store_copy)).to_dict() == expected


def test_damage_in_an_early_file_gives_no_false_queue_gaps(tmp_path, mqtool):
    """4.9 normal recovery starts at the third-to-last file, so a CRC error in file 0 stops only
    that file's judge: the records after it still continue their queues."""
    root = tmp_path / "store"
    assert mqtool("fixture", "make", root, "-n", "4000", "--seed", "3").returncode == 0
    assert len(list((root / "commitlog").iterdir())) >= 4
    assert mqtool("fixture", "damage", root, "--kind", "bit-flip", "--seed", "1", "--file",
                  "commitlog/00000000000000000000").returncode == 0
    for engine_args in ((), ("--quick",)):
        proc = mqtool("verify", "--json", *engine_args, root)
        codes = {f["code"] for f in json.loads(proc.stdout)["findings"]}
        assert "CQ_QUEUE_GAP" not in codes, codes
    proc = mqtool("verify", "--json", root)
    assert {f["code"] for f in json.loads(proc.stdout)["findings"]} == {"CL_CRC_MISMATCH"}
