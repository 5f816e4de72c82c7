"""`mqtool fixture make --dledger`: DLedger-mode stores laid out as the 4.9.8 broker with DLedger
0.3.1.2 lays them out (test_writer_dledger proves the writer byte-identical to the broker's stores),
and read, verified, recovered and queried by mqtool as the reference stores are.

Expectations come from the format declarations and the broker's rules written out here (entry
header fields, DLedger's blank rule, pos + 48, one index unit per entry), from the forge's own
record of what it meant to write (its summary), and from what the broker does on recovery - never
from re-reading the store with the code under test."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import sparse_copytree, tree_digests

from mqtool import forge
from mqtool.formats import commitlog as cl_fmt
from mqtool.formats import consumequeue as cq_fmt
from mqtool.formats import dledger as dl_fmt
from mqtool.store import DLEDGER_LAYOUT, UPGRADED_LAYOUT, Store

FILE_SIZE = 256 * 1024
MESSAGES = 700


def options(**kw) -> forge.ForgeOptions:
    base = dict(messages=MESSAGES, seed=11, commitlog_file_size=FILE_SIZE, cq_units=50,
                index_slots=100, index_entries=400, delay_ratio=0.05, transaction_ratio=0.09,
                compress_ratio=0.05, dledger=True)
    base.update(kw)
    return forge.ForgeOptions(**base)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    cache = {}

    def make(name: str, **kw):
        if name not in cache:
            root = tmp_path_factory.mktemp("forge-dledger") / name
            cache[name] = (root, forge.make_store(root, options(**kw)))
        return cache[name]
    return make


def walk_entries(data_dir: Path) -> tuple[list[dict], list[tuple]]:
    """Every entry of the data files, parsed with the declarations, and every file end."""
    entries, ends = [], []
    for path in sorted(data_dir.iterdir()):
        data, base, at = path.read_bytes(), int(path.name), 0
        while at + 8 <= len(data):
            magic = int.from_bytes(data[at:at + 4], "big", signed=True)
            if magic == dl_fmt.BLANK_MAGIC:
                blank = dl_fmt.end_of_file_blank.parse(data[at:at + 8])
                ends.append(("blank", path.name, at, blank.bytes_left))
                assert blank.bytes_left == len(data) - at and not any(data[at + 8:])
                break
            if magic == 0:
                ends.append(("zeros", path.name, at, 0))
                assert not any(data[at:])
                break
            header = dl_fmt.entry_header.parse(data[at:at + dl_fmt.ENTRY_HEADER_SIZE])
            record = cl_fmt.message_header.parse(data[at + 48:at + 96])
            entries.append({"file": path.name, "at": at, "pos": base + at, **{
                k: header[k] for k in ("magic", "size", "index", "term", "pos", "channel",
                                       "chain_crc", "body_crc", "body_size")},
                "record_size": record.total_size, "physical_offset": record.physical_offset})
            at += header.size
    return entries, ends


def test_layout_entries_blanks_and_index_units(made):
    root, summary = made("clean")
    folder = root / "dledger-n0"
    assert not (root / "commitlog").exists()
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint", "checkpoint.bak",
                                                        "currterm", "data", "index"]
    entries, ends = walk_entries(folder / "data")
    assert {p.stat().st_size for p in (folder / "data").iterdir()} == {FILE_SIZE}
    assert len(entries) == MESSAGES == summary["messages"]
    for n, e in enumerate(entries):
        assert (e["magic"], e["index"], e["term"], e["channel"], e["chain_crc"],
                e["body_crc"]) == (1, n, 0, 0, 0, 0)
        assert e["pos"] == e["pos"] and e["size"] == 48 + e["body_size"] == 48 + e["record_size"]
        assert e["physical_offset"] == e["pos"] + 48
    # DLedger's blank rule: a file is closed only when the next entry plus 8 bytes does not fit
    by_file = {}
    for e in entries:
        by_file.setdefault(e["file"], []).append(e)
    names = sorted(by_file)
    assert all(e["at"] + e["size"] + 8 <= FILE_SIZE for e in entries)   # each fit where it is
    for kind, name, at, left in ends:
        if kind == "blank":
            following = by_file[names[names.index(name) + 1]][0]
            assert following["size"] + 8 > left
    assert ends[-1][0] == "zeros" and [k for k, *_ in ends[:-1]] == ["blank"] * (len(ends) - 1)
    index = folder / "index" / f"{0:020d}"
    assert index.stat().st_size == dl_fmt.INDEX_FILE_SIZE
    assert os.stat(index).st_blocks * 512 < 1 << 20            # sparse: 160 MiB of hole
    raw = index.read_bytes()[:len(entries) * 32 + 32]
    for n, e in enumerate(entries):
        unit = dl_fmt.index_unit.parse(raw[n * 32:n * 32 + 32])
        assert (unit.magic, unit.pos, unit.size, unit.index, unit.term) == \
            (1, e["pos"], e["size"], n, 0)
    assert not any(raw[len(entries) * 32:])
    assert (folder / "checkpoint").read_text() == "committedIndex=699\nendIndex=699\n"
    assert (folder / "currterm").read_text() == "voteLeader=n0\ncurrTerm=0\n"
    bak = dl_fmt.parse_properties_text((folder / "checkpoint.bak").read_text())
    assert int(bak["committedIndex"]) + 1 == int(bak["endIndex"]) < MESSAGES - 1
    assert summary["commitlog"]["max_offset"] == entries[-1]["pos"] + entries[-1]["size"]
    assert summary["dledger"]["data_files"] == names


def test_consume_queue_units_point_inside_the_entries(made):
    root, summary = made("clean")
    entries, _ = walk_entries(root / "dledger-n0" / "data")
    record_at = {e["pos"] + 48: e["record_size"] for e in entries}
    units = 0
    for path in sorted((root / "consumequeue").glob("*/*/*")):
        data = path.read_bytes()
        for at in range(0, len(data), cq_fmt.CQ_STORE_UNIT_SIZE):
            unit = cq_fmt.consumequeue_unit.parse(data[at:at + cq_fmt.CQ_STORE_UNIT_SIZE])
            if not cq_fmt.is_valid_unit(unit.commitlog_offset, unit.size):
                break
            assert record_at[unit.commitlog_offset] == unit.size
            units += 1
    assert units == sum(n for queues in summary["queue_offsets"].values()
                        for n in queues.values())


def test_dump_and_verify_read_it_as_the_broker_wrote_it(made, mqtool):
    root, _ = made("clean")
    entries, _ = walk_entries(root / "dledger-n0" / "data")
    proc = mqtool("dump", root, "--json")
    assert proc.returncode == 0, proc.stderr
    messages = [json.loads(line) for line in proc.stdout.splitlines()]
    messages = [m for m in messages if m["record_type"] == "commitlog/message"]
    assert [(m["commitlog_offset"], m["dledger"]["index"]) for m in messages] == \
        [(e["pos"] + 48, e["index"]) for e in entries]
    report = json.loads(mqtool("verify", "--json", root).stdout)
    assert report["findings"] == [] and report["recovery"]["process_offset"] == \
        entries[-1]["pos"] + entries[-1]["size"]
    info = json.loads(mqtool("info", "--json", root).stdout)
    assert info["passport"]["layout"] == DLEDGER_LAYOUT
    assert info["passport"]["dledger"]["ledger"]["last"]["index"] == MESSAGES - 1
    assert info["passport"]["inconsistencies"] == []


def test_queries_find_the_entries(made, mqtool):
    root, _ = made("clean")
    proc = mqtool("dump", root, "--json")
    messages = [json.loads(line) for line in proc.stdout.splitlines()]
    message = [m for m in messages if m["record_type"] == "commitlog/message"
               and m["sys_flag"] & 0xC == 0 and m["topic"] == "TopicTest"][100]
    for args in (("--msg-id", message["msg_id"]),
                 ("--topic", message["topic"], "--queue", str(message["queue_id"]), "--offset",
                  str(message["queue_offset"])),
                 ("--topic", message["topic"], "--uniq-key", message["uniq_key"])):
        proc = mqtool("query", "--json", root, *args)
        assert proc.returncode == 0, (args, proc.stderr)
        found = [json.loads(line) for line in proc.stdout.splitlines()]
        found = [r for r in found if r["record_type"] == "commitlog/message"]
        assert [r["commitlog_offset"] for r in found] == [message["commitlog_offset"]], args


def test_recover_a_clean_store_touches_only_the_dledger_bak_files(made, mqtool):
    """As the broker's start on dledger-clean: the checkpoint persisted again (its copy in
    checkpoint.bak), the term persisted (currterm.bak); nothing else changes."""
    root, _ = made("clean-to-recover")
    before = tree_digests(root)
    proc = mqtool("recover", root)
    assert proc.returncode == 0, proc.stderr
    after = tree_digests(root)
    changed = {n for n in set(before) | set(after) if before.get(n) != after.get(n)}
    assert changed == {"dledger-n0/checkpoint.bak", "dledger-n0/currterm.bak"}
    folder = root / "dledger-n0"
    assert (folder / "checkpoint.bak").read_bytes() == (folder / "checkpoint").read_bytes()
    assert (folder / "currterm.bak").read_bytes() == (folder / "currterm").read_bytes()
    again = mqtool("recover", root)
    assert again.returncode == 0 and "nothing to do" in again.stderr


def test_crash_store_recovers_as_the_broker_would(made, mqtool):
    root, summary = made("crash", crash=True)
    folder = root / "dledger-n0"
    assert (root / "abort").is_file() and not (root / "commitlog").exists()
    assert not (folder / "checkpoint.bak").exists()
    checkpoint = dl_fmt.parse_properties_text((folder / "checkpoint").read_text())
    assert int(checkpoint["committedIndex"]) + 1 == int(checkpoint["endIndex"]) <= MESSAGES - 1
    # DLedger preallocates no data file; the reput had caught up (as in the reference crash)
    entries, ends = walk_entries(folder / "data")
    assert ends[-1][0] == "zeros" and summary["dispatched_messages"] == MESSAGES
    newest_index = max(p.name for p in (root / "index").iterdir())
    data_before = {name: d for name, d in tree_digests(root).items()
                   if name.startswith("dledger-n0/data/") or name.startswith("dledger-n0/index/")}
    proc = mqtool("recover", "--json", root)
    assert proc.returncode == 1, proc.stderr        # the crash's newest IndexFile is lost
    result = json.loads(proc.stdout)
    after = tree_digests(root)
    assert {n: d for n, d in after.items() if n in data_before} == data_before
    assert not (root / "abort").exists() and not (root / "index" / newest_index).exists()
    text = f"committedIndex={MESSAGES - 1}\nendIndex={MESSAGES - 1}\n"
    assert (folder / "checkpoint").read_text() == (folder / "checkpoint.bak").read_text() == text
    assert (folder / "currterm.bak").read_bytes() == (folder / "currterm").read_bytes()
    again = mqtool("recover", root)
    assert again.returncode == 0 and "nothing to do" in again.stderr
    assert mqtool("undo", result["backup"]).returncode == 0


def test_upgraded_store(made, mqtool):
    root, summary = made("upgraded", dledger_after=300)
    store = Store(root)
    assert store.layout == UPGRADED_LAYOUT
    divided = summary["dledger"]["divided_commitlog_offset"]
    assert store.commitlog.divided_offset == divided and divided % FILE_SIZE == 0
    assert sorted(p.name for p in (root / "dledger-n0" / "data").iterdir())[0] == \
        f"{divided:020d}"
    entries, _ = walk_entries(root / "dledger-n0" / "data")
    assert entries[0]["pos"] == divided and entries[0]["index"] == 0
    assert len(entries) == MESSAGES - 300
    report = json.loads(mqtool("verify", "--json", root).stdout)
    assert report["findings"] == []


def test_cli_make_dledger(mqtool, tmp_path):
    proc = mqtool("fixture", "make", tmp_path / "s", "-n", "50", "--dledger")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["dledger"]["last_index"] == 49
    for bad in (("--dledger-after", "10"), ("--dledger", "--dledger-after", "50"),
                ("--dledger", "--broker-version", "5")):
        proc = mqtool("fixture", "make", tmp_path / "t", "-n", "50", *bad)
        assert proc.returncode == 2 and proc.stderr.startswith("mqtool: error:"), proc.stderr


# --- fixture damage on entry headers, and what the broker's DLedger recovery makes of it ---------

# the code verify gives a damaged field: a broken header ends the walk there (DL_ENTRY_*); an
# index or term the entries around it do not follow breaks the sequence the walk checks
FIELD_CODES = {"magic": "DL_ENTRY_MAGIC", "pos": "DL_ENTRY_POS", "size": "DL_ENTRY_SIZE",
               "body_size": "DL_ENTRY_SIZE", "index": "DL_INDEX_SEQUENCE",
               "term": "DL_TERM_ORDER"}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A DLedger store of four 64 KiB data files, made once; tests copy it."""
    root = tmp_path_factory.mktemp("forge-dledger-small") / "store"
    forge.make_store(root, options(messages=300, commitlog_file_size=64 * 1024,
                                   body_mean=512, body_max=2048))
    return root


@pytest.mark.parametrize("field", sorted(FIELD_CODES))
def test_entry_header_damage_and_the_brokers_recovery(field, small, tmp_path, mqtool):
    root = sparse_copytree(small, tmp_path / "store")
    entries, _ = walk_entries_of(root)
    files = sorted(p.name for p in (root / "dledger-n0" / "data").iterdir())
    assert len(files) == 4
    # an entry of the second-to-last file: inside the walk, which starts at the third-to-last
    victim = [e for e in entries if e["file"] == files[-2]][7]
    proc = mqtool("fixture", "damage", root, "--kind", "bit-flip", "--target", "entry-header",
                  "--field", field, "--offset", victim["pos"] + 5, "--seed", "1")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["field"] == field and report["entry"]["pos"] == victim["pos"]
    assert report["old_value"] == victim[field] != report["new_value"]
    n = victim["index"]
    # the walk's rules (spec 7.11): the first entry failing a check ends the log; a term that
    # went up is accepted (its index unit is rewritten) and the next entry's lower term ends it
    end_index = n + 1 if field == "term" and report["new_value"] > report["old_value"] else n
    end = entries[end_index]["pos"]
    verify = mqtool("verify", "--json", root)
    assert verify.returncode == 1
    result = json.loads(verify.stdout)
    codes = {f["code"] for f in result["findings"]}
    assert FIELD_CODES[field] in codes and "RECOVERY_TRUNCATES" in codes
    assert result["recovery"]["process_offset"] == end
    proc = mqtool("recover", "--json", root)
    assert proc.returncode == 1, proc.stderr
    assert sorted(p.name for p in (root / "dledger-n0" / "data").iterdir()) == \
        [name for name in files if int(name) <= end]
    assert (root / "dledger-n0" / "checkpoint").read_text() == \
        f"committedIndex={end_index - 1}\nendIndex={end_index - 1}\n"
    for path in (root / "consumequeue").glob("*/*/*"):
        data = path.read_bytes()
        for at in range(0, len(data), cq_fmt.CQ_STORE_UNIT_SIZE):
            unit = cq_fmt.consumequeue_unit.parse(data[at:at + cq_fmt.CQ_STORE_UNIT_SIZE])
            if cq_fmt.is_valid_unit(unit.commitlog_offset, unit.size):
                assert unit.commitlog_offset < end
    # beyond the broker, as on a plain store: nothing past the end is left to pass for data
    cut_file = root / "dledger-n0" / "data" / max(n for n in files if int(n) <= end)
    assert not any(cut_file.read_bytes()[end - int(cut_file.name):])
    after = json.loads(mqtool("verify", "--json", root).stdout)
    assert [f for f in after["findings"] if f["severity"] == "error"] == []
    again = mqtool("recover", root)
    assert again.returncode == 0 and "nothing to do" in again.stderr


def test_recover_keep_stale_leaves_what_lies_past_the_end(small, tmp_path, mqtool):
    root = sparse_copytree(small, tmp_path / "store")
    entries, _ = walk_entries_of(root)
    files = sorted(p.name for p in (root / "dledger-n0" / "data").iterdir())
    victim = [e for e in entries if e["file"] == files[-1]][5]
    mqtool("fixture", "damage", root, "--kind", "bit-flip", "--target", "entry-header",
           "--field", "magic", "--offset", victim["pos"])
    last_file = root / "dledger-n0" / "data" / files[-1]
    before = last_file.read_bytes()
    index = {p.name: p.read_bytes() for p in (root / "index").iterdir()}
    proc = mqtool("recover", root, "--keep-stale")
    assert proc.returncode == 1, proc.stderr
    assert last_file.read_bytes() == before
    assert {p.name: p.read_bytes() for p in (root / "index").iterdir()} == index


def test_entry_header_damage_too_far_back_makes_recover_refuse(small, tmp_path, mqtool):
    root = sparse_copytree(small, tmp_path / "store")
    proc = mqtool("fixture", "damage", root, "--kind", "bit-flip", "--target", "entry-header",
                  "--field", "magic", "--file", "dledger-n0/data/00000000000000065536")
    assert proc.returncode == 0, proc.stderr
    verify = json.loads(mqtool("verify", "--json", root).stdout)
    assert any("processOffset is too small" in r for r in verify["recovery"]["refuses_to_start"])
    before = tree_digests(root)
    proc = mqtool("recover", root)
    assert proc.returncode == 2 and "processOffset is too small" in proc.stderr
    assert tree_digests(root) == before


def test_entry_header_damage_needs_a_dledger_store(tmp_path, mqtool):
    root = tmp_path / "plain"
    forge.make_store(root, options(messages=20, dledger=False))
    proc = mqtool("fixture", "damage", root, "--kind", "bit-flip", "--target", "entry-header")
    assert proc.returncode == 2 and "not a DLedger-mode store" in proc.stderr
    proc = mqtool("fixture", "damage", root, "--kind", "bit-flip", "--field", "magic")
    assert proc.returncode == 2 and "--target entry-header" in proc.stderr


def walk_entries_of(root: Path):
    return walk_entries(root / "dledger-n0" / "data")


def test_a_short_data_file_is_cut_away_by_truncate(small, tmp_path, mqtool):
    """A data file of the wrong size: DLedger does not load, the broker does not start, recover
    refuses; truncate to the file's start drops it (and what follows) and the store starts."""
    root = sparse_copytree(small, tmp_path / "store")
    files = sorted(p.name for p in (root / "dledger-n0" / "data").iterdir())
    proc = mqtool("fixture", "damage", root, "--kind", "truncate-file", "--file",
                  f"dledger-n0/data/{files[2]}")
    assert proc.returncode == 0, proc.stderr
    proc = mqtool("recover", root)
    assert proc.returncode == 2 and "wrong size" in proc.stderr
    proc = mqtool("truncate", root, "--to", int(files[2]))
    assert proc.returncode == 1, proc.stderr
    assert sorted(p.name for p in (root / "dledger-n0" / "data").iterdir()) == files[:2]
    report = json.loads(mqtool("verify", "--json", root).stdout)
    assert [f for f in report["findings"] if f["severity"] == "error"] == []
    assert report["recovery"]["refuses_to_start"] == []
    assert report["recovery"]["process_offset"] == int(files[2])


def test_broker_compatible_query_loses_the_crash_index_tail(made, mqtool):
    """As on dledger-crash: the abnormal start deletes the IndexFile written after
    indexMsgTimestamp and DLedger mode re-dispatches nothing, so the broker no longer finds the
    last message by its UNIQ_KEY; mqtool's own query still does (it reads the records)."""
    def last_message(root: Path) -> dict:
        proc = mqtool("dump", root, "--json")
        return [m for m in map(json.loads, proc.stdout.splitlines())
                if m["record_type"] == "commitlog/message" and m["sys_flag"] & 0xC != 0xC][-1]

    def broker_answer(root: Path, message: dict) -> list[int]:
        proc = mqtool("query", "--json", "--broker-compatible", root, "--topic",
                      message["topic"], "--uniq-key", message["uniq_key"])
        return json.loads(proc.stdout.splitlines()[-1])["offsets"]

    clean, _ = made("clean")
    message = last_message(clean)
    assert broker_answer(clean, message) == [message["commitlog_offset"]]
    root, _ = made("crash-query", crash=True)
    message = last_message(root)
    found = mqtool("query", "--json", root, "--topic", message["topic"], "--uniq-key",
                   message["uniq_key"]).stdout.splitlines()
    assert [r["commitlog_offset"] for r in map(json.loads, found)
            if r["record_type"] == "commitlog/message"] == [message["commitlog_offset"]]
    assert broker_answer(root, message) == []
