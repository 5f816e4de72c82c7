"""The writer in DLedger mode against the real 4.9.8 broker (DLedger 0.3.1.2): fed the messages
the broker's own MessageDecoder read back from a DLedger-mode store (dump.json.gz), StoreWriter
with ``dledger_self_id`` must reproduce the broker's DLedger data files (entry headers, records
inside with PHYSICALOFFSET = pos + 48, DLedger's end-of-file blanks), its DLedger index (sparse,
one 32-byte unit per entry), its ConsumeQueues and its IndexFiles byte for byte.

dledger-clean-damaged is fed its damaged body as decoded, with the CRC the broker stored, so the
flip is reproduced too. IndexFile names differ (the broker names a file by its creation time);
contents are compared in name order, as in test_writer_conformance.

A store upgraded from a plain CommitLog has no reference store; the writer's switch is checked
against the layout the README describes (plain blank, dividedCommitlogOffset, index 0 there)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import DLEDGER_STORES, SHARED_STORES, classic_batch_offsets
from mqtool.formats import commitlog as cl_fmt
from mqtool.formats import dledger as dl_fmt
from mqtool.property_order import PRODUCER_UNIQ_KEY_FIRST, property_insertion_of
from mqtool.scan import BlankRecord, MessageRecord, Scanner
from mqtool.store import DLEDGER_LAYOUT, UPGRADED_LAYOUT, Store
from mqtool.writer import Message, StoreWriter
from test_writer_conformance import (BrokerStore, broker_message, files_under, load_gz,
                                     properties_to_feed)

SELF_ID = "n0"


def load_dledger_store(name: str, root: Path) -> BrokerStore:
    ref = SHARED_STORES / name
    geometry = json.loads((ref / "geometry.json").read_text())
    assert geometry["enableDLegerCommitLog"] and geometry["dLegerSelfId"] == SELF_ID
    messages = load_gz(ref / "dump.json.gz")["messages"]
    stored = {rec.offset: rec.properties_raw
              for rec in Scanner(Store(root).commitlog, check_crc=False).messages()}
    assert set(stored) == {m["commitLogOffset"] for m in messages}
    classic = classic_batch_offsets(ref)
    # the DLedger stores' producers put userProp2 after the broker's CLUSTER (a quarter of the
    # records show it: the two share a HashMap bucket), which no producer model names; those
    # records are fed their stored bytes (test_only_the_cluster_bucket_is_fed_raw)
    assert property_insertion_of([props for offset, props in stored.items()
                                  if offset not in classic]) is None
    insertion = PRODUCER_UNIQ_KEY_FIRST
    return BrokerStore(ref, geometry, 4, False, messages, stored, None, frozenset(), None,
                       classic, insertion, root)


def reproduce(store: BrokerStore, out: Path) -> StoreWriter:
    geometry = store.geometry
    assert geometry["dledgerDataFileSize"] == geometry["mappedFileSizeCommitLog"]
    writer = StoreWriter(out, commitlog_file_size=geometry["mappedFileSizeCommitLog"],
                         cq_units_per_file=geometry["mappedFileSizeConsumeQueue"] // 20,
                         index_slots=geometry["maxHashSlotNum"],
                         index_entries=geometry["maxIndexNum"],
                         property_insertion=store.property_insertion, dledger_self_id=SELF_ID)
    for m in store.messages:
        msg = broker_message(m, store.classic_batch_records)
        msg.raw_properties, _ = properties_to_feed(store, m, msg)
        assert writer.put(msg) == (m["commitLogOffset"], m["storeSize"], m["queueOffset"])
    writer.close()
    return writer


@pytest.fixture(scope="module", params=DLEDGER_STORES)
def reproduction(request, dledger_stores, tmp_path_factory):
    name = request.param
    root = dledger_stores[name]
    out = tmp_path_factory.mktemp(name)
    writer = reproduce(load_dledger_store(name, root), out)
    return root, out, writer


def same_sparse_bytes(a: Path, b: Path) -> bool:
    """Equal contents, read a MiB at a time (a DLedger index file is 160 MiB, almost all hole)."""
    if a.stat().st_size != b.stat().st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


def test_data_files_identical(reproduction):
    root, out, _ = reproduction
    broker = files_under(root / f"dledger-{SELF_ID}" / dl_fmt.DATA_DIR)
    ours = files_under(out / f"dledger-{SELF_ID}" / dl_fmt.DATA_DIR)
    assert set(ours) == set(broker) and len(broker) == 5
    for name, path in broker.items():
        data, mine = path.read_bytes(), ours[name].read_bytes()
        assert mine == data, f"{name}: first difference at " \
            f"{next((i for i in range(len(data)) if data[i] != mine[i]), len(data))}"
    assert not (out / "commitlog").exists()


def test_dledger_index_identical_and_sparse(reproduction):
    root, out, writer = reproduction
    broker = files_under(root / f"dledger-{SELF_ID}" / dl_fmt.INDEX_DIR)
    ours = files_under(out / f"dledger-{SELF_ID}" / dl_fmt.INDEX_DIR)
    assert set(ours) == set(broker) == {f"{0:020d}"}
    for name, path in broker.items():
        assert ours[name].stat().st_size == dl_fmt.INDEX_FILE_SIZE
        assert same_sparse_bytes(path, ours[name]), name
        # 2,000 units fill 64,000 bytes: the writer must not have written the rest
        assert os.stat(ours[name]).st_blocks * 512 < 1 << 20
    assert writer.commitlog.last_index == 1999


def test_consume_queues_identical(reproduction):
    root, out, _ = reproduction
    broker, ours = files_under(root / "consumequeue"), files_under(out / "consumequeue")
    assert set(broker) == set(ours) and broker
    for name, path in broker.items():
        assert ours[name].read_bytes() == path.read_bytes(), name


def test_index_files_identical(reproduction):
    root, out, writer = reproduction
    broker = sorted((root / "index").iterdir())
    ours = [out / "index" / name for name in writer.index.files]
    # the crash store's newest IndexFile was flushed: the broker lost it only on recovery
    assert len(ours) == len(broker) == 2
    for theirs, mine in zip(broker, ours):
        assert mine.read_bytes() == theirs.read_bytes(), theirs.name


@pytest.mark.parametrize("name", DLEDGER_STORES)
def test_only_the_cluster_bucket_is_fed_raw(name, dledger_stores):
    store = load_dledger_store(name, dledger_stores[name])
    raw = []
    for m in store.messages:
        msg = broker_message(m, store.classic_batch_records)
        fed, why = properties_to_feed(store, m, msg)
        if fed is not None and why == "other":
            keys = [seg.split(b"\x01", 1)[0] for seg in fed.split(b"\x02") if seg]
            raw.append(keys.index(b"CLUSTER") < keys.index(b"userProp2"))
    assert raw and all(raw) and len(raw) < len(store.messages) // 3


def test_the_reproduction_reads_as_the_broker_store(reproduction):
    root, out, _ = reproduction
    assert Store(out).layout == DLEDGER_LAYOUT
    ours = [(r.offset, r.total_size, r.queue_offset)
            for r in Scanner(Store(out).commitlog, check_crc=False).messages()]
    theirs = [(r.offset, r.total_size, r.queue_offset)
              for r in Scanner(Store(root).commitlog, check_crc=False).messages()]
    assert ours == theirs and len(ours) == 2000


# --- a store upgraded from a plain CommitLog ------------------------------------------------------

def test_switch_to_dledger_lays_out_an_upgraded_store(tmp_path):
    size = 64 * 1024
    writer = StoreWriter(tmp_path, commitlog_file_size=size, cq_units_per_file=50,
                         index_slots=100, index_entries=400)
    offsets = []
    for i in range(60):
        if i == 40:
            plain_end = writer.commitlog.offset
            divided = writer.switch_to_dledger(SELF_ID, term=2)
            assert divided == plain_end - plain_end % size + size
        msg = Message(topic="T", queue_id=i % 2, body=bytes([i]) * (2000 + 37 * i),
                      properties={"UNIQ_KEY": f"{i:032X}", "KEYS": f"k{i}"},
                      store_timestamp=1_700_000_000_000 + i)
        offsets.append(writer.put(msg))
    writer.close()
    store = Store(tmp_path)
    assert store.layout == UPGRADED_LAYOUT and store.commitlog.divided_offset == divided
    events = list(Scanner(store.commitlog).scan())
    records = [e for e in events if type(e) is MessageRecord]
    assert [(r.offset, r.total_size, r.queue_offset) for r in records] == offsets
    assert all(r.offset_ok and r.body_crc_ok for r in records)
    # the plain blank at the plain write position, the first entry at dividedCommitlogOffset
    assert BlankRecord(plain_end, divided - plain_end) in events
    assert offsets[40][0] == divided + dl_fmt.ENTRY_HEADER_SIZE
    first = store.dledger.first_entry()
    assert (first.index, first.term, first.pos) == (0, 2, divided)
    # queue offsets go on across the switch
    assert [o[2] for o in offsets[38:42]] == [19, 19, 20, 20]
    assert cl_fmt.BLANK_MAGIC_CODE in {int.from_bytes(
        (tmp_path / "commitlog" / f"{plain_end - plain_end % size:020d}").read_bytes()[
            plain_end % size + 4:plain_end % size + 8], "big", signed=False)}


def test_the_blank_rule_at_the_edge(tmp_path):
    """MmapFileList.preAppend: an entry goes into the current data file only while its size + 8
    fits in what is left; otherwise -1, the bytes left, zeros close the file."""
    from mqtool.writer import DLedgerWriter

    size = 1024
    writer = DLedgerWriter(tmp_path / "dledger-n0", size)
    first = writer.reserve(400 - 48)                   # entry of 400 bytes at 0
    writer.write(first, bytes(400 - 48))
    exact = size - 400 - 8                             # leaves exactly 8 bytes: it fits
    at = writer.reserve(exact - 48)
    assert at == 400 + 48
    writer.write(at, b"\x01" * (exact - 48))
    at = writer.reserve(100 - 48)                      # 8 bytes left: a blank closes the file
    assert at == size + 48
    writer.write(at, b"\x02" * (100 - 48))
    at = writer.reserve(size - 100 - 7 - 48)           # one byte short of fitting
    assert at == 2 * size + 48
    writer.write(at, bytes(size - 100 - 7 - 48))
    writer.close()
    data = sorted((tmp_path / "dledger-n0" / "data").iterdir())
    assert [p.name for p in data] == [f"{n * size:020d}" for n in range(3)]
    raw = data[0].read_bytes()
    assert raw[size - 8:] == (-1).to_bytes(4, "big", signed=True) + (8).to_bytes(4, "big")
    raw = data[1].read_bytes()
    assert raw[100:108] == (-1).to_bytes(4, "big", signed=True) + (size - 100).to_bytes(4, "big")
    assert not any(raw[108:])
    assert writer.last_index == 3
    units = (tmp_path / "dledger-n0" / "index" / f"{0:020d}").read_bytes()[:4 * 32]
    assert [dl_fmt.index_unit.parse(units[n * 32:n * 32 + 32]).pos for n in range(4)] == \
        [0, 400, size, 2 * size]
