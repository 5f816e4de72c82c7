"""verify on a store whose ConsumeQueue file, not the last of its queue, is cut short.

The broker refuses to load such a store (MappedFileQueue.doLoad: every file must be the
configured size; spec §2.1, §7.1). The next file still starts where the geometry puts it, so the
units past the short file's end are simply missing: verify reports the file (CQ_FILE_SIZE) and
the records that lost their units (CQ_MISSING), and goes on checking the rest of the queue.

Expected findings come from the undamaged store's raw ConsumeQueue bytes (read with struct), the
scanner's records and the forge's geometry, never from verify's own output.
"""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from mqtool.vocabulary import CONSUMER_CODES

from conftest import run_mqtool
from mqtool import forge
from mqtool.scan import MessageRecord, Scanner
from mqtool.store import Store
from mqtool.verify import verify_store

UNITS = 50                      # units per ConsumeQueue file
CL_SIZE = 256 * 1024            # CommitLog file size: the lost records span several files
UNIT = struct.Struct(">qiq")    # commitLogOffset, size, tagsCode (spec §4.1)
QUEUE = ("TopicTest", 0)
FIRST, MIDDLE = f"{0:020d}", f"{UNITS * UNIT.size:020d}"


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("short-cq")
    out = {}
    for name, crash in (("clean", False), ("crash", True)):
        forge.make_store(root / name, forge.ForgeOptions(
            messages=900, seed=5, cq_units=UNITS, commitlog_file_size=CL_SIZE, crash=crash))
        out[name] = root / name
    return out


def _queue_dir(store: Path) -> Path:
    return store / "consumequeue" / QUEUE[0] / str(QUEUE[1])


def _keys(report) -> set:
    """The store findings; a shortened queue also leaves the forge's consumer group committed
    past the queue's end, which the consumer checks report (their own tests pin those down)."""
    return {f.key for f in report.findings if f.code not in CONSUMER_CODES}


def _truncated_copy(base: Path, dest: Path, name: str, length: int) -> Path:
    shutil.copytree(base, dest)
    files = sorted(p.name for p in _queue_dir(dest).iterdir())
    # the case needs a file after the short one, and full files before the damage
    assert len(files) >= 3 and name in files[:-1]
    assert all((_queue_dir(dest) / f).stat().st_size == UNITS * UNIT.size for f in files)
    with open(_queue_dir(dest) / name, "r+b") as fh:
        fh.truncate(length)
    return dest


def _lost_records(base: Path, name: str, length: int) -> list[MessageRecord]:
    """The records whose units lay in the part of file ``name`` past ``length``, in CommitLog
    order: the units from the undamaged file's bytes, checked against the scanner's records."""
    data = (_queue_dir(base) / name).read_bytes()
    first_unit = int(name) // UNIT.size
    lost = {}
    for i in range(length // UNIT.size, UNITS):
        offset, size, _ = UNIT.unpack_from(data, i * UNIT.size)
        assert offset >= 0 and size > 0
        lost[offset] = first_unit + i
    records = {r.offset: r for r in Scanner(Store(base).commitlog) if type(r) is MessageRecord}
    out = []
    for offset, queue_offset in lost.items():
        record = records[offset]
        assert (record.topic, record.queue_id, record.queue_offset) == (*QUEUE, queue_offset)
        assert record.total_size == UNIT.unpack_from(data, (queue_offset - first_unit)
                                                     * UNIT.size)[1]
        out.append(record)
    # and no other record of the queue has a queue offset in the lost range
    lost_range = range(first_unit + length // UNIT.size, first_unit + UNITS)
    assert sorted(r.queue_offset for r in records.values() if (r.topic, r.queue_id) == QUEUE
                  and r.sys_flag & 0xC in (0, 8) and r.queue_offset in lost_range) \
        == sorted(lost.values())
    return sorted(out, key=lambda r: r.offset)


def _cl_location(offset: int) -> tuple[str, int]:
    return f"commitlog/{offset - offset % CL_SIZE:020d}", offset % CL_SIZE


@pytest.mark.parametrize("length", [30 * UNIT.size, 30 * UNIT.size + 10, 0],
                         ids=["units", "partial-unit", "empty"])
@pytest.mark.parametrize("name", [FIRST, MIDDLE], ids=["first", "middle"])
@pytest.mark.parametrize("base", ["clean", "crash"])
def test_short_queue_file_is_reported_not_fatal(bases, tmp_path, base, name, length):
    before = _keys(verify_store(Store(bases[base])))
    store = _truncated_copy(bases[base], tmp_path / "store", name, length)
    rel = f"consumequeue/{QUEUE[0]}/{QUEUE[1]}/{name}"
    lost = _lost_records(bases[base], name, length)

    reports = {engine: verify_store(Store(store), engine=engine)
               for engine in ("batches", "records")}
    assert ([f.to_dict() for f in reports["batches"].findings]
            == [f.to_dict() for f in reports["records"].findings])
    report = reports["batches"]

    file_key = ("CQ_FILE_SIZE", rel, length - length % UNIT.size)
    missing_key = ("CQ_MISSING", *_cl_location(lost[0].offset))
    assert _keys(report) == before | {file_key, missing_key}
    by_key = {f.key: f for f in report.findings}
    assert by_key[file_key].severity == "error"
    missing = by_key[missing_key]
    assert missing.severity == "error"
    assert (missing.topic, missing.queue_id) == QUEUE
    assert missing.queue_offset == lost[0].queue_offset
    assert missing.commitlog_offset == lost[0].offset
    assert missing.count == len(lost)
    # what the broker does with it: it refuses to start, and verify says so
    assert any(reason.startswith(f"{rel} is {length} bytes") for reason in
               report.recovery.refuses_to_start)
    assert "refuses to load" in by_key[file_key].message
    assert "refuses to load" in missing.message

    proc = run_mqtool("verify", "--json", store)
    assert proc.returncode == 1, proc.stderr
    document = json.loads(proc.stdout)
    assert {(f["code"], f["file"], f["offset"]) for f in document["findings"]
            if f["code"] not in CONSUMER_CODES} == _keys(report)


def test_checking_goes_on_past_the_missing_units(bases, tmp_path):
    """A damaged unit in the file after the short one is still found, and the numbers of the
    units there stay their queue offsets (no CQ_MISMATCH for the others)."""
    store = _truncated_copy(bases["clean"], tmp_path / "store", FIRST, 600)
    after = f"{2 * UNITS * UNIT.size:020d}"
    following = _queue_dir(store) / MIDDLE
    data = bytearray(following.read_bytes())
    offset, size, tags = UNIT.unpack_from(data, 3 * UNIT.size)
    UNIT.pack_into(data, 3 * UNIT.size, offset, size + 1, tags)
    following.write_bytes(bytes(data))
    assert (_queue_dir(store) / after).exists()

    lost = _lost_records(bases["clean"], FIRST, 600)
    expected = {("CQ_FILE_SIZE", f"consumequeue/{QUEUE[0]}/{QUEUE[1]}/{FIRST}", 600),
                ("CQ_MISSING", *_cl_location(lost[0].offset)),
                ("CQ_MISMATCH", f"consumequeue/{QUEUE[0]}/{QUEUE[1]}/{MIDDLE}", 3 * UNIT.size)}
    assert _keys(verify_store(Store(bases["clean"]))) == set()
    for engine in ("batches", "records"):
        report = verify_store(Store(store), engine=engine)
        assert _keys(report) == expected, engine
        mismatch = next(f for f in report.findings if f.code == "CQ_MISMATCH")
        assert mismatch.queue_offset == UNITS + 3 and mismatch.commitlog_offset == offset
    assert _keys(verify_store(Store(store), workers=2)) == expected


def test_two_short_files_in_one_queue(bases, tmp_path):
    store = _truncated_copy(bases["clean"], tmp_path / "store", FIRST, 200)
    with open(_queue_dir(store) / MIDDLE, "r+b") as fh:
        fh.truncate(0)
    first = _lost_records(bases["clean"], FIRST, 200)
    second = _lost_records(bases["clean"], MIDDLE, 0)
    # queue offsets 10..99 are gone: one run of records without a unit
    assert [r.queue_offset for r in first + second] == list(range(10, 2 * UNITS))
    expected = {("CQ_FILE_SIZE", f"consumequeue/{QUEUE[0]}/{QUEUE[1]}/{FIRST}", 200),
                ("CQ_FILE_SIZE", f"consumequeue/{QUEUE[0]}/{QUEUE[1]}/{MIDDLE}", 0),
                ("CQ_MISSING", *_cl_location(first[0].offset))}
    reports = [verify_store(Store(store), engine=e) for e in ("batches", "records")]
    assert [f.to_dict() for f in reports[0].findings] == [f.to_dict() for f in reports[1].findings]
    assert _keys(reports[0]) == expected
    missing = next(f for f in reports[0].findings if f.code == "CQ_MISSING")
    assert missing.count == len(first + second)
