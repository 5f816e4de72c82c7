"""A store upgraded from a plain CommitLog to DLedger mode: commitlog/ below
dividedCommitlogOffset, DLedger data above it (README "Upgrade path"). No reference store of
this kind exists, so one is laid out here from the broker-written fixture store exactly as the
README describes the broker's first DLedger start: a plain blank at the plain write position,
the first data file named by the end of the last plain file, its first entry with index 0 and
pos = dividedCommitlogOffset, records inside with PHYSICALOFFSET = pos + 48. The forge's
``--dledger-after`` makes such stores too. Recover follows DLedgerCommitLog.recover: once DLedger
data files exist only DLedger's recovery runs, and commitlog/ stays untouched."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURE_STORE
from mqtool.formats import commitlog as cl_fmt
from mqtool.formats import dledger as dl_fmt
from mqtool.formats import indexfile as idx_fmt
from mqtool.passport import store_passport
from mqtool.recovery import predict_recovery
from mqtool.scan import BlankRecord, MessageRecord, Scanner, UnwrittenTail
from mqtool.store import COMMITLOG_LAYOUT, DLEDGER_LAYOUT, UPGRADED_LAYOUT, Store

FILE_SIZE = 1 << 20
ENTRIES = 25


def upgrade(root, *, data_file_base: int | None = None) -> dict:
    """Turn the plain store at ``root`` into an upgraded one; returns what was laid out."""
    plain = Store(root)
    events = list(Scanner(plain.commitlog).scan())
    tail = next(e for e in events if type(e) is UnwrittenTail)
    last = plain.commitlog.segments[-1]
    write_pos = tail.offset - last.base_offset
    with open(last.path, "r+b") as fh:          # the plain blank at the plain write position
        fh.seek(write_pos)
        fh.write(cl_fmt.blank_record.build({"total_size": FILE_SIZE - write_pos}))
    divided = last.base_offset + FILE_SIZE
    base = divided if data_file_base is None else data_file_base
    records = [e for e in events if type(e) is MessageRecord][:ENTRIES]
    data, units, offsets = bytearray(FILE_SIZE), bytearray(), []
    position = 0
    for n, record in enumerate(records):
        raw = bytearray(plain.commitlog.read(record.offset, record.total_size))
        pos = base + position
        raw[28:36] = (pos + dl_fmt.ENTRY_HEADER_SIZE).to_bytes(8, "big")   # PHYSICALOFFSET
        size = dl_fmt.ENTRY_HEADER_SIZE + len(raw)
        header = dl_fmt.entry_header.build(dict(
            magic=dl_fmt.ENTRY_MAGIC, size=size, index=n, term=1, pos=pos, channel=0,
            chain_crc=0, body_crc=0, body_size=len(raw)))
        data[position:position + size] = header + raw
        units += dl_fmt.index_unit.build(dict(magic=1, pos=pos, size=size, index=n, term=1))
        offsets.append(pos + dl_fmt.ENTRY_HEADER_SIZE)
        position += size
    folder = root / "dledger-n0"
    (folder / "data").mkdir(parents=True)
    (folder / "index").mkdir()
    (folder / "data" / f"{base:020d}").write_bytes(bytes(data))
    with open(folder / "index" / f"{0:020d}", "wb") as fh:
        fh.write(units)
        fh.truncate(dl_fmt.INDEX_FILE_SIZE)
    (folder / "checkpoint").write_text(dl_fmt.format_properties_text(
        {"committedIndex": ENTRIES - 1, "endIndex": ENTRIES - 1}))
    (folder / "currterm").write_text(dl_fmt.format_properties_text(
        {"voteLeader": "n0", "currTerm": 1}))
    return {"divided": divided, "plain_blank": tail.offset, "offsets": offsets,
            "end": base + position, "plain_messages": sum(type(e) is MessageRecord
                                                          for e in events)}


@pytest.fixture
def upgraded(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", root)
    return root, upgrade(root)


def test_the_layout_and_its_geometry(upgraded):
    root, laid = upgraded
    store = Store(root)
    assert store.layout == UPGRADED_LAYOUT
    assert store.commitlog.divided_offset == laid["divided"] == 3 * FILE_SIZE
    assert [s.layout for s in store.commitlog.segments] == [COMMITLOG_LAYOUT] * 3 + [DLEDGER_LAYOUT]
    assert store.commitlog.file_size == FILE_SIZE
    passport = store_passport(store)
    assert passport["layout"] == UPGRADED_LAYOUT and passport["inconsistencies"] == []
    section = passport["dledger"]
    assert section["divided_commitlog_offset"] == laid["divided"]
    assert section["ledger"]["first"] == {"index": 0, "term": 1, "pos": laid["divided"]}
    assert section["ledger"]["last"]["index"] == ENTRIES - 1
    assert section["current_term"] == 1 and section["checkpoint_lag"] == 0
    assert passport["claims"][0]["claim"] == "upgraded from a plain CommitLog to DLedger mode"


def test_one_scan_reads_both_layouts_in_offset_order(upgraded):
    root, laid = upgraded
    events = list(Scanner(Store(root).commitlog).scan())
    messages = [e for e in events if type(e) is MessageRecord]
    assert len(messages) == laid["plain_messages"] + ENTRIES
    assert [m.offset for m in messages[-ENTRIES:]] == laid["offsets"]
    assert all(m.offset_ok and m.body_crc_ok is not False for m in messages)
    blanks = [e.offset for e in events if type(e) is BlankRecord]
    assert laid["plain_blank"] in blanks
    assert events[-1] == UnwrittenTail(laid["end"], 4 * FILE_SIZE - laid["end"])


def test_recovery_recovers_only_the_dledger_part(upgraded):
    root, laid = upgraded
    plan = predict_recovery(Store(root))
    assert plan.process_offset == laid["end"]
    assert plan.commitlog_files_kept[:3] == [f"{n * FILE_SIZE:020d}" for n in range(3)]
    assert plan.commitlog_files_deleted == [] and plan.refuses_to_start == []


def test_a_dledger_part_that_does_not_continue_the_plain_files_is_inconsistent(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", root)
    upgrade(root, data_file_base=4 * FILE_SIZE)
    problems = store_passport(Store(root))["inconsistencies"]
    assert any("dividedCommitlogOffset" in p for p in problems)


def test_recover_leaves_the_plain_part_alone(upgraded, mqtool):
    """The broker recovers only the DLedger part of an upgraded store (DLedgerCommitLog.recover:
    once DLedger data files exist, DLedger's recovery alone): commitlog/ stays as it is."""
    root, laid = upgraded
    plain = {p.name: p.read_bytes() for p in (root / "commitlog").iterdir()}
    proc = mqtool("recover", "--json", root)
    assert proc.returncode == 0, proc.stderr
    assert {p.name: p.read_bytes() for p in (root / "commitlog").iterdir()} == plain
    assert (root / "dledger-n0" / "checkpoint").read_text() == \
        f"committedIndex={ENTRIES - 1}\nendIndex={ENTRIES - 1}\n"
    assert mqtool("recover", root).stderr.count("nothing to do") == 1


def test_a_forged_upgraded_crash_store_recovers_as_the_broker_would(tmp_path, mqtool):
    from mqtool import forge

    root = tmp_path / "store"
    summary = forge.make_store(root, forge.ForgeOptions(
        messages=600, seed=3, commitlog_file_size=64 * 1024, cq_units=50, index_slots=100,
        index_entries=400, body_mean=512, body_max=2048, dledger=True, dledger_after=250,
        crash=True))
    divided = summary["dledger"]["divided_commitlog_offset"]
    plain = {p.name: p.read_bytes() for p in (root / "commitlog").iterdir()}
    assert max(int(name) for name in plain) + 64 * 1024 == divided
    checkpoint = Store(root).read_checkpoint()
    newer = sorted((p.name, idx_fmt.index_header.parse(p.read_bytes()[:40]).end_timestamp)
                   for p in (root / "index").iterdir())
    assert any(end > checkpoint["index_msg_timestamp"] for _, end in newer)
    report = json.loads(mqtool("verify", "--json", root).stdout)
    assert [f for f in report["findings"] if f["severity"] == "error"] == []
    proc = mqtool("recover", "--json", root)
    assert proc.returncode in (0, 1), proc.stderr
    assert {p.name: p.read_bytes() for p in (root / "commitlog").iterdir()} == plain
    assert not (root / "abort").exists()
    last = summary["dledger"]["last_index"]
    assert (root / "dledger-n0" / "checkpoint").read_text() == \
        f"committedIndex={last}\nendIndex={last}\n"
    # the abnormal start deletes the IndexFiles that end after indexMsgTimestamp; in DLedger
    # mode nothing rebuilds them
    assert sorted(p.name for p in (root / "index").iterdir()) == \
        [name for name, end in newer if end <= checkpoint["index_msg_timestamp"]]
    assert mqtool("recover", root).stderr.count("nothing to do") == 1


def test_truncate_cuts_only_the_dledger_part(upgraded, mqtool):
    root, laid = upgraded
    proc = mqtool("truncate", root, "--to", laid["divided"] - 100)
    assert proc.returncode == 2 and "plain commitlog/ part" in proc.stderr
    proc = mqtool("truncate", "--json", root, "--to", laid["offsets"][10])
    assert proc.returncode == 1, proc.stderr
    assert predict_recovery(Store(root)).process_offset == \
        laid["offsets"][10] - dl_fmt.ENTRY_HEADER_SIZE


def test_mutating_commands_refuse_parts_that_do_not_meet(tmp_path, mqtool):
    root = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", root)
    upgrade(root, data_file_base=4 * FILE_SIZE)
    for args in (("recover", "--dry-run"), ("truncate",), ("rebuild-index",)):
        proc = mqtool(*args, root)
        assert proc.returncode == 2 and "does not continue commitlog/" in proc.stderr, args


def test_the_rebuilds_find_a_forged_upgraded_store_as_the_broker_dispatched_it(tmp_path, mqtool):
    """Queues and key index regenerated from the records of both parts equal the forge's."""
    from mqtool import forge

    root = tmp_path / "store"
    forge.make_store(root, forge.ForgeOptions(
        messages=400, seed=5, commitlog_file_size=64 * 1024, cq_units=50, index_slots=100,
        index_entries=400, body_mean=512, body_max=2048, dledger=True, dledger_after=150))
    assert Store(root).layout == UPGRADED_LAYOUT
    for command in ("rebuild-queues", "rebuild-index"):
        proc = mqtool(command, root)
        assert proc.returncode == 0 and "nothing to do" in proc.stderr, (command, proc.stderr)
