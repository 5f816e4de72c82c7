"""recover / truncate / rebuild-queues / rebuild-index / undo on real files.

Expected values come from the broker-written fixture store (its own ConsumeQueue and IndexFile
bytes, and the broker's queryMessage answers in recover.json.gz) or from the files as they were
before the repair, read here with plain struct - never from the code under test."""
from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURE_STORE, run_mqtool
from mqtool.repair import query_index, run_repair
from mqtool.store import Store

CQ_UNIT = struct.Struct(">qiq")
INDEX_HEADER = struct.Struct(">qqqqii")
PRE_BLANK = (0, 0x7FFFFFFF, 0)


# --- helpers shared by the repair test files ---------------------------------------------------------

def load_json(path: Path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file of a store, the mqtool backup/stage/journal excluded."""
    out = {}
    for path in sorted(Path(root).rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith(".mqtool"):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def cq_units(path: Path) -> list[tuple[int, int, int]]:
    data = path.read_bytes()
    return [CQ_UNIT.unpack_from(data, p) for p in range(0, len(data) - len(data) % 20, 20)]


def valid_units(path: Path) -> list[tuple[int, int, int]]:
    out = []
    for unit in cq_units(path):
        if unit[0] >= 0 and unit[1] > 0:
            out.append(unit)
        else:
            break
    return out


def queue_units(root: Path, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    """Every valid unit of a queue in queue-offset order (files by name)."""
    directory = root / "consumequeue" / topic / str(queue_id)
    if not directory.is_dir():
        return []
    units = []
    for path in sorted(directory.iterdir(), key=lambda p: int(p.name)):
        units.extend(valid_units(path))
    return units


def backup_dirs(root: Path) -> list[Path]:
    base = Path(root) / ".mqtool-backup"
    return sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def content_digest(data: bytes) -> str:
    """The manifest's "sha256-sparse/1" digest, from the bytes: sha256 over (8-byte big-endian
    offset, bytes) of each 1 MiB block holding a non-zero byte, then b"size" and the size."""
    digest = hashlib.sha256()
    for pos in range(0, len(data), 1 << 20):
        block = bytes(data[pos:pos + (1 << 20)])
        if block.count(0) != len(block):
            digest.update(pos.to_bytes(8, "big") + block)
    digest.update(b"size" + len(data).to_bytes(8, "big"))
    return digest.hexdigest()


def _blank(data: bytes, width: int, ranges) -> bytearray:
    out = bytearray(data) + bytearray(width - len(data))
    for lo, hi in ranges:
        out[lo:hi] = bytes(max(0, min(hi, width) - lo))
    return out


def assert_backup_holds_originals(backup: Path, original: Path, repaired: Path) -> None:
    """Every byte the repair changed or removed is in the backup (read here straight from the
    manifest and the blobs, replaying the operations in order), and every difference between
    ``original`` and ``repaired`` is covered by an operation of the manifest."""
    manifest = json.loads((backup / "manifest.json").read_text())
    state: dict[str, bytearray | None] = {}
    touched: set[str] = set()
    last_op = {op["path"]: op["n"] for op in manifest["ops"]}
    for op in manifest["ops"]:
        rel = op["path"]
        touched.add(rel)
        if rel not in state:
            source = original / rel
            state[rel] = bytearray(source.read_bytes()) if source.exists() else None
        data = state[rel]
        new = bytearray((repaired / rel).read_bytes()) if op["op"] == "write" else None
        if op["old_size"] is None:
            assert data is None, rel
        else:
            assert data is not None and len(data) == op["old_size"], rel
            if op.get("changed") is not None:
                # a write over a file saves the ranges where old and new differ, and only those
                spans = [(lo, min(hi, op["old_size"])) for lo, hi in op["changed"]]
                width = max(len(data), len(new))
                assert _blank(data, width, op["changed"]) == _blank(new, width, op["changed"]), \
                    f"{rel}: old and new differ outside the saved ranges"
            elif op["op"] in ("write", "delete"):
                spans = [(0, op["old_size"])]
            else:
                spans = [(op["start"], min(op["end"], op["old_size"])),
                         (min(op["new_size"], op["old_size"]), op["old_size"])]
            rebuilt = bytearray(op["old_size"])
            for seg in op["saved"]:
                blob = (backup / seg["blob"]).read_bytes()
                chunk = blob[seg["blob_offset"]:seg["blob_offset"] + seg["length"]]
                assert len(chunk) == seg["length"]
                rebuilt[seg["offset"]:seg["offset"] + seg["length"]] = chunk
            for lo, hi in spans:
                assert rebuilt[lo:hi] == data[lo:hi], f"{rel}: backup differs from original"
            key = "old_file_digest" if op["op"] == "edit" else "old_digest"
            assert content_digest(data) == op[key], rel
        # replay the operation
        if op["op"] == "delete":
            state[rel] = None
        elif op["op"] == "write":
            if last_op[rel] == op["n"]:
                assert content_digest(new) == op["new_digest"], rel
            state[rel] = new
        elif op["op"] == "edit":
            end = min(op["end"], len(data))
            data[op["start"]:end] = bytes(max(0, end - op["start"]))
            del data[op["new_size"]:]
            data.extend(bytes(op["new_size"] - len(data)))
            if last_op[rel] == op["n"]:
                assert content_digest(data) == op["new_file_digest"], rel
    before, after = snapshot(original), snapshot(repaired)
    for rel in set(before) | set(after):
        if before.get(rel) == after.get(rel):
            continue
        assert rel in touched, f"{rel} changed but no operation covers it"
        final = state[rel]
        now = (repaired / rel).read_bytes() if rel in after else None
        assert (None if final is None else bytes(final)) == now, f"{rel}: replay differs"


def make_store(path: Path, *args: str) -> Path:
    proc = run_mqtool("fixture", "make", path, *args)
    assert proc.returncode == 0, proc.stderr
    return path


def broker_queries(ref: Path) -> list[dict]:
    return load_json(ref / "recover.json.gz")["queryMessage"]


# --- query_index against the broker ---------------------------------------------------------------------

def test_query_index_equals_broker_query_message(fixture_store):
    store = Store(fixture_store)
    queries = broker_queries(FIXTURE_STORE)
    assert len(queries) > 1000
    for q in queries:
        assert query_index(store, q["topic"], q["key"]) == q["offsets"], (q["topic"], q["key"])


def test_query_index_caps_at_64_newest(store_copy):
    store = Store(store_copy)
    hot = [q for q in broker_queries(FIXTURE_STORE) if q["kind"] == "hot key"]
    q = max(hot, key=lambda item: len(item["offsets"]))
    everything = query_index(store, q["topic"], q["key"], max_num=64)
    three = query_index(store, q["topic"], q["key"], max_num=3)
    assert len(three) == min(3, len(everything))
    # the newest entries are collected first, then sorted ascending
    assert three == sorted(everything)[-len(three):]
    assert query_index(store, q["topic"], q["key"], max_num=1000) == everything


# --- recover -----------------------------------------------------------------------------------------

def test_recover_clean_store_has_nothing_to_do(store_copy):
    before = snapshot(store_copy)
    proc = run_mqtool("recover", store_copy, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "nothing to do" and doc["backup"] is None and doc["files"] == []
    assert "nothing to do" in proc.stderr
    assert snapshot(store_copy) == before
    assert not (store_copy / ".mqtool-backup").exists()


def test_recover_damaged_last_file_loses_data_exit_1(store_copy):
    damage = run_mqtool("fixture", "damage", store_copy, "--kind", "bit-flip", "--seed", "4",
                        "--file", "commitlog/00000000000002097152")
    assert damage.returncode == 0, damage.stderr
    hit = json.loads(damage.stdout)["records"][0]
    original = store_copy.parent / "original"
    shutil.copytree(store_copy, original)
    proc = run_mqtool("recover", store_copy, "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "repaired" and doc["data_loss"] is True
    assert doc["recovery"]["process_offset"] == hit["offset"]
    assert Path(doc["backup"]).is_dir() and str(doc["backup"]) in proc.stderr
    assert doc["lost"] and doc["summary"]["messages_removed"] >= 1
    # CommitLog identical up to the damaged record, zeros after it
    cut_file = store_copy / "commitlog" / "00000000000002097152"
    pos = hit["offset"] - 2097152
    old = (original / "commitlog" / "00000000000002097152").read_bytes()
    new = cut_file.read_bytes()
    assert new[:pos] == old[:pos] and not any(new[pos:])
    # every ConsumeQueue unit points before the cut, and only units past it were removed
    for qdir in (store_copy / "consumequeue").glob("*/*"):
        for path in qdir.iterdir():
            kept = valid_units(path)
            assert all(offset < hit["offset"] for offset, _, _ in kept)
            assert kept == [u for u in valid_units(original / path.relative_to(store_copy))
                            if u[0] < hit["offset"]]
    # index lookups are the broker's answers without the offsets past the cut
    store = Store(store_copy)
    for q in broker_queries(FIXTURE_STORE)[:300]:
        assert query_index(store, q["topic"], q["key"]) == [o for o in q["offsets"]
                                                            if o < hit["offset"]]
    assert_backup_holds_originals(Path(doc["backup"]), original, store_copy)
    again = run_mqtool("recover", store_copy, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "nothing to do"


def _expected_units(root: Path) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    """ConsumeQueue units the records ask for: every NOT/COMMIT record at its QUEUEOFFSET, with
    the Java hash of its TAGS (read with the shared scanner; codes from the spec's vectors)."""
    from mqtool.formats.codecs import java_string_hash
    from mqtool.scan import Scanner
    store = Store(root)
    units: dict[tuple[str, int], dict[int, tuple[int, int, int]]] = {}
    for rec in Scanner(store.commitlog, check_crc=False).messages():
        if rec.sys_flag & 0xC in (0, 8):
            tags = rec.properties.get("TAGS")
            units.setdefault((rec.topic, rec.queue_id), {})[rec.queue_offset] = (
                rec.offset, rec.total_size, java_string_hash(tags) if tags else 0)
    return {key: [by_offset[i] for i in sorted(by_offset)] for key, by_offset in units.items()}


def test_recover_crash_store_dispatches_every_record(tmp_path):
    crash = make_store(tmp_path / "crash", "--messages", "1500", "--seed", "5", "--crash")
    missing_before = run_mqtool("verify", crash, "--json")
    assert any(f["code"] == "CQ_MISSING" for f in json.loads(missing_before.stdout)["findings"])
    proc = run_mqtool("recover", crash, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["recovery"]["mode"] == "abnormal" and not (crash / "abort").exists()
    expected = _expected_units(crash)
    assert expected
    for (topic, queue_id), want in expected.items():
        got = queue_units(crash, topic, queue_id)
        assert [u[:2] for u in got] == [u[:2] for u in want], (topic, queue_id)
        if topic != "SCHEDULE_TOPIC_XXXX":
            assert got == want, (topic, queue_id)
    assert run_mqtool("verify", crash).returncode == 0


def test_reindex_all_finds_every_key(tmp_path):
    crash = make_store(tmp_path / "crash", "--messages", "1500", "--seed", "6", "--crash",
                       "--index-entries", "1000", "--index-slots", "250")
    proc = run_mqtool("recover", crash, "--reindex-all", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["summary"]["index_entries_not_rebuilt"] == 0
    store = Store(crash)
    from mqtool.scan import Scanner
    checked = 0
    for rec in Scanner(store.commitlog, check_crc=False).messages():
        if rec.offset >= doc["recovery"]["process_offset"] or rec.sys_flag & 0xC == 12:
            continue
        props = rec.properties
        for key in [props.get("UNIQ_KEY")] + (props.get("KEYS") or "").split(" "):
            if key:
                found = query_index(store, rec.topic, key)
                assert rec.offset in found or len(found) == 64, (rec.topic, key)
                checked += 1
    assert checked > 2000


# --- truncate ------------------------------------------------------------------------------------------

def _record_starts(root: Path) -> list[tuple[int, int, int]]:
    """(offset, size, store timestamp) of every record, read with struct (the fixture's broker
    dump names them too)."""
    dump = load_json(FIXTURE_STORE / "dump.json.gz")
    return [(m["commitLogOffset"], m["storeSize"], m["storeTimestamp"]) for m in dump["messages"]]


def test_truncate_to_offset(store_copy):
    records = _record_starts(store_copy)
    cut, _, _ = records[1234]
    last_kept_ts = max(ts for offset, _, ts in records if offset < cut)
    original = store_copy.parent / "original"
    shutil.copytree(store_copy, original)
    proc = run_mqtool("truncate", store_copy, "--to", cut, "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    removed = sum(1 for offset, _, _ in records if offset >= cut)
    assert doc["summary"]["messages_removed"] == removed
    base = cut - cut % 1048576
    for path in (store_copy / "commitlog").iterdir():
        start = int(path.name)
        data = path.read_bytes()
        if start > cut:
            pytest.fail(f"{path.name} should be deleted")
        old = (original / "commitlog" / path.name).read_bytes()
        if start == base:
            assert data[:cut - base] == old[:cut - base] and not any(data[cut - base:])
        else:
            assert data == old
    assert sorted(p.name for p in (store_copy / "commitlog").iterdir()) == \
        sorted(p.name for p in (original / "commitlog").iterdir() if int(p.name) <= cut)
    for qdir in (original / "consumequeue").glob("*/*"):
        topic, queue_id = qdir.parent.name, int(qdir.name)
        want = [u for u in queue_units(original, topic, queue_id) if u[0] < cut]
        target = store_copy / "consumequeue" / topic / str(queue_id)
        got = queue_units(store_copy, topic, queue_id) if target.is_dir() else []
        assert got == want, (topic, queue_id)
    store = Store(store_copy)
    for q in broker_queries(FIXTURE_STORE)[:400]:
        assert query_index(store, q["topic"], q["key"]) == [o for o in q["offsets"] if o < cut]
    physic, logics, index = struct.unpack_from(">qqq", (store_copy / "checkpoint").read_bytes())
    assert max(physic, logics, index) <= last_kept_ts
    assert_backup_holds_originals(Path(doc["backup"]), original, store_copy)


def test_truncate_refuses_offset_inside_a_record(store_copy):
    offset, size, _ = _record_starts(store_copy)[100]
    before = snapshot(store_copy)
    proc = run_mqtool("truncate", store_copy, "--to", offset + 7)
    assert proc.returncode == 2
    assert proc.stderr.startswith("mqtool: error:") and f"{offset:,}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert snapshot(store_copy) == before


def test_truncate_default_is_process_offset(store_copy):
    proc = run_mqtool("truncate", store_copy, "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["summary"]["cut"] == 2745792 == doc["summary"]["process_offset"]
    assert doc["nothing_to_do"]


# --- rebuild-queues -------------------------------------------------------------------------------------

def test_rebuild_queues_equals_broker_files(store_copy):
    broker = FIXTURE_STORE / "store" / "consumequeue"
    shutil.rmtree(store_copy / "consumequeue")
    # with no ConsumeQueue file left the geometry cannot be inferred: the broker default is used
    default = json.loads(run_mqtool("rebuild-queues", store_copy, "--dry-run", "--json").stdout)
    assert any("300000" in note for note in default["notes"])
    proc = run_mqtool("rebuild-queues", store_copy, "--cq-units", "300", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["summary"]["files_created"] == 27
    ours = {p.relative_to(store_copy / "consumequeue").as_posix(): p.read_bytes()
            for p in (store_copy / "consumequeue").rglob("*") if p.is_file()}
    theirs = {p.relative_to(broker).as_posix(): p.read_bytes() for p in broker.rglob("*")
              if p.is_file()}
    assert ours.keys() == theirs.keys()
    for rel in ours:
        assert ours[rel] == theirs[rel], rel


def test_rebuild_one_queue_leaves_the_others(store_copy):
    target = store_copy / "consumequeue" / "TopicTest" / "2"
    shutil.rmtree(target)
    target.mkdir()
    before = snapshot(store_copy)
    proc = run_mqtool("rebuild-queues", store_copy, "--topic", "TopicTest", "--queue", "2",
                      "--json")
    assert proc.returncode == 0, proc.stderr
    after = snapshot(store_copy)
    changed = {rel for rel in after if before.get(rel) != after[rel]}
    assert changed == {"consumequeue/TopicTest/2/00000000000000000000"}
    assert (target / "00000000000000000000").read_bytes() == \
        (FIXTURE_STORE / "store/consumequeue/TopicTest/2/00000000000000000000").read_bytes()


def test_rebuild_queues_pre_blank_when_queue_starts_late(store_copy):
    """With the first CommitLog file gone (expired), a rebuilt queue starts at the queue offset
    of its first remaining record: the units before it are pre-blank (0, 0x7FFFFFFF, 0)."""
    (store_copy / "commitlog" / "00000000000000000000").unlink()
    proc = run_mqtool("rebuild-queues", store_copy, "--topic", "OrderTopic", "--json")
    assert proc.returncode == 0, proc.stderr
    broker_units = cq_units(FIXTURE_STORE / "store/consumequeue/OrderTopic/1/00000000000000000000")
    first_kept = next(i for i, u in enumerate(broker_units) if u[0] >= 1048576)
    ours = cq_units(store_copy / "consumequeue/OrderTopic/1/00000000000000000000")
    assert first_kept > 0
    assert ours[:first_kept] == [PRE_BLANK] * first_kept
    assert ours[first_kept:] == broker_units[first_kept:]


def test_rebuild_queues_other_file_size(store_copy):
    proc = run_mqtool("rebuild-queues", store_copy, "--topic", "TopicTest", "--cq-units", "100")
    assert proc.returncode == 0, proc.stderr
    for queue_id in range(4):
        directory = store_copy / "consumequeue" / "TopicTest" / str(queue_id)
        names = sorted(int(p.name) for p in directory.iterdir())
        assert names == list(range(0, 2000 * len(names), 2000))
        broker = valid_units(FIXTURE_STORE / f"store/consumequeue/TopicTest/{queue_id}/"
                                             "00000000000000000000")
        assert queue_units(store_copy, "TopicTest", queue_id) == broker


# --- rebuild-index ----------------------------------------------------------------------------------------

def test_rebuild_index_lookups_equal_broker(store_copy):
    shutil.rmtree(store_copy / "index")
    proc = run_mqtool("rebuild-index", store_copy, "--slots", "1000", "--entries", "4000",
                      "--json")
    assert proc.returncode == 0, proc.stderr
    broker_files = sorted((FIXTURE_STORE / "store" / "index").iterdir())
    ours = sorted((store_copy / "index").iterdir())
    assert [p.read_bytes() for p in ours] == [p.read_bytes() for p in broker_files]
    store = Store(store_copy)
    for q in broker_queries(FIXTURE_STORE):
        assert query_index(store, q["topic"], q["key"]) == q["offsets"]


def test_rebuild_index_other_geometry(store_copy):
    proc = run_mqtool("rebuild-index", store_copy, "--slots", "300", "--entries", "1200",
                      "--json")
    assert proc.returncode == 0, proc.stderr
    files = sorted((store_copy / "index").iterdir())
    assert len(files) > 2
    size = 40 + 300 * 4 + 1200 * 20
    headers = [INDEX_HEADER.unpack_from(p.read_bytes()) for p in files]
    assert all(p.stat().st_size == size for p in files)
    # a full file holds entryCount-1 entries; the next begins where it ended
    assert all(h[5] == 1200 for h in headers[:-1])
    assert all(b[2] == a[3] for a, b in zip(headers, headers[1:]))
    store = Store(store_copy, index_slots=300, index_entries=1200)
    for q in broker_queries(FIXTURE_STORE):
        assert query_index(store, q["topic"], q["key"]) == q["offsets"]
    checkpoint = struct.unpack_from(">qqq", (store_copy / "checkpoint").read_bytes())
    assert checkpoint[2] == headers[-2][1]   # indexMsgTimestamp: end of the last full file


# --- the command line --------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["recover", "truncate", "rebuild-queues", "rebuild-index",
                                     "undo"])
def test_help_says_what_changes(command):
    proc = run_mqtool(command, "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "--dry-run" in text and "--json" in text
    if command != "undo":
        assert "backup" in text and "--out" in text and "3 refused" in text


def test_unreadable_store_is_one_line_exit_2(tmp_path):
    for command in ("recover", "truncate", "rebuild-queues", "rebuild-index"):
        proc = run_mqtool(command, tmp_path / "missing")
        assert proc.returncode == 2
        assert proc.stderr.startswith("mqtool: error:")
        assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_mqtool("undo", tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("mqtool: error:")


def test_dry_run_json_document(store_copy):
    run_mqtool("fixture", "damage", store_copy, "--kind", "torn-tail", "--seed", "1",
               "--file", "commitlog/00000000000001048576")
    proc = run_mqtool("recover", store_copy, "--dry-run", "--json")
    doc = json.loads(proc.stdout)
    assert doc["status"] == "planned" and doc["backup"] is None
    assert proc.returncode == (1 if doc["data_loss"] else 0)
    assert {"files_created", "files_changed", "files_deleted", "cq_units_removed",
            "index_entries_removed", "messages_removed"} <= doc["summary"].keys()
    for entry in doc["files"]:
        assert entry["action"] in ("create", "change", "delete")
        assert all(0 <= s < e for s, e in entry["ranges"])
    assert any(f["path"] == "commitlog/00000000000002097152" and f["action"] == "delete"
               for f in doc["files"])


def test_a_torn_record_alone_names_no_first_lost_message(tmp_path):
    """A crash that tore the last record drops bytes but no whole message: the plan says so and
    names no first lost message (it printed "first at None")."""
    store = make_store(tmp_path / "store", "--messages", "500", "--crash")
    assert run_mqtool("fixture", "damage", store, "--kind", "torn-tail").returncode == 0
    proc = run_mqtool("recover", store, "--dry-run", "--json")
    lost = json.loads(proc.stdout)["lost"]
    assert lost and lost[0].startswith("0 message(s) at or past processOffset")
    assert "None" not in " ".join(lost) and "stop: " in lost[0]


def test_cli_module_registers_commands():
    proc = subprocess.run([sys.executable, "-m", "mqtool", "--help"], capture_output=True,
                          text=True)
    for name in ("recover", "truncate", "rebuild-queues", "rebuild-index", "undo"):
        assert name in proc.stdout


def test_run_repair_library_dry_run(store_copy):
    result = run_repair("rebuild-index", store_copy, dry_run=True)
    assert result.status == "nothing to do" and result.exit_code == 0


# --- the reput walk -----------------------------------------------------------------------------------

def test_reput_walk_from_a_record_with_a_damaged_physical_offset(tmp_path):
    """The walk the broker's reput makes, started at a record whose PHYSICALOFFSET is damaged:
    that record is still the first one walked (the file is read from its start to find it),
    and the records after it are the ones a walk from the file's start reads past it."""
    from mqtool import forge
    from mqtool.reput.dispatching import iter_records
    from mqtool.scan import MessageRecord, scan_segment

    root = tmp_path / "store"
    forge.make_store(root, forge.ForgeOptions(messages=600, seed=4,
                                              commitlog_file_size=64 * 1024))
    store = Store(root)
    seg = store.commitlog.segments[1]

    def walk_from_start(segment):
        found = []
        for event in scan_segment(segment, check_crc=False, resync=False):
            if type(event) is not MessageRecord:
                break
            found.append(event.offset)
        return found

    offsets = walk_from_start(seg)
    target = offsets[len(offsets) // 2]
    with open(seg.path, "r+b") as fh:       # PHYSICALOFFSET: bytes 28-35 of the record
        fh.seek(target - seg.base_offset + 28)
        fh.write((target + 12345).to_bytes(8, "big"))
    store = Store(root)
    stop = store.commitlog.segments[2].base_offset + 1
    walked = [r.offset for r in iter_records(store, target, stop)]
    expected = [o for o in offsets if o >= target] + \
        [o for o in walk_from_start(store.commitlog.segments[2]) if o < stop]
    assert walked == expected
    assert walked[0] == target
