"""The writer against the real broker: fed the messages the broker's own MessageDecoder read back
(dump.json.gz), StoreWriter must reproduce the broker's CommitLog, ConsumeQueue and IndexFile
bytes exactly.

Per store, what "exactly" can mean:

* clean stores, and the damaged stores whose flipped byte is in a body (clean-small-damaged,
  v5-damaged): every file identical. The damaged body is fed as decoded, with the CRC the broker
  stored, so the flip is reproduced too.
* crash stores (those the broker left an ``abort`` file in): identical, except the broker's
  extra preallocated CommitLog file, which must be all zeros (the writer does not preallocate).
* BatchCQ stores: the BatchConsumeQueue files too; every inner batch is fed as its inner
  messages (parsed from the broker's record by the one inner-batch declaration), so the writer
  lays out the batch body itself; classic-batch records are fed with the batch's own
  properties (WAIT, CLUSTER) apart, which the broker appends as a second serialised map.
* head-batchcq-timer-crash (the store code after 5.3.3, a tarball): classic-batch records are fed
  with the batch's properties too (WAIT, CLUSTER, its UNIQ_KEY), and the writer, told the
  5.3.4+ layout, must leave them out as that code does.
* the properties of every record are written under the one producer model (which names its
  path put into the HashMap first and last) that reproduces all of the store's records.
* v5-propcrc-damaged: the flipped byte is inside a record's properties, which both the property
  CRC and the index key hash cover, and the broker computed those before the flip. So the test
  restores the original byte (damage.json) before feeding the record; the CommitLog must then
  differ from the broker's in exactly that one byte, and everything else must be identical.
* crash-lost-small: the crash zeroed every page past each file's flushed position, and the
  CommitLog, the ConsumeQueues and the IndexFiles were flushed to different points. Only the
  CommitLog is a function of the surviving messages; for the ConsumeQueues every unit that
  survived must equal the writer's; the IndexFiles indexed messages whose records were zeroed,
  so only their surviving entries are compared.

IndexFile names differ (the broker names a file by its creation time); contents are compared in
name order.
"""
from __future__ import annotations

import base64
import dataclasses
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import (CLASSIC_BATCH_PROPERTIES, SHARED_STORES, classic_batch_offsets,
                      is_classic_batch, reference_dirs, write_log)
from mqtool.formats import codecs
from mqtool.formats import commitlog as cl_fmt
from mqtool.formats import consumequeue as cq_fmt
from mqtool.formats import indexfile as idx_fmt
from mqtool.formats import innerbatch
from mqtool.scan import Scanner
from mqtool.store import Store
from mqtool.property_order import (PROPERTY_INSERTIONS, PropertyInsertion,
                                   broker_property_order, property_insertion_of)
from mqtool.writer import (APPENDED_BATCH_PROPERTIES, OWN_PROPERTIES_ONLY, Message, StoreWriter,
                           encode_properties)

REFS = reference_dirs()
REF_IDS = ["fixture-" + r.name if r.parent != SHARED_STORES else r.name for r in REFS]
CRC_TAIL = codecs.CRC32_RESERVED_LEN

FLUSH_ZEROED = {"crash-lost-small"}
PROPERTY_DAMAGE = {"v5-propcrc-damaged"}


def load_gz(path: Path):
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def without_empty_value_pairs(raw: bytes) -> bytes:
    """``raw`` minus its ``name 0x01`` pairs with an empty value (what the broker's decoder
    drops), keeping a trailing separator if there was one."""
    parts = raw.split(b"\x02")
    kept = [p for p in parts
            if not (len(p) > 1 and p.endswith(b"\x01") and p.count(b"\x01") == 1)]
    return b"\x02".join(kept)


@dataclass
class BrokerStore:
    """What the broker wrote, as the writer is fed it."""

    ref: Path
    geometry: dict
    broker_version: int
    prop_crc: bool
    messages: list[dict]
    stored_properties: dict[int, bytes]   # commitLogOffset -> properties without the CRC tail
    damage: dict | None
    batch_topics: frozenset[str]
    bcq_units_per_file: int | None
    classic_batch_records: frozenset[int]
    property_insertion: PropertyInsertion
    root: Path                          # the store/ folder (unpacked, for a tarball)
    classic_batches: str = APPENDED_BATCH_PROPERTIES
    # 5.3.4+ layout: commitLogOffset -> the properties of the classic batch the record came in
    batch_properties: dict[int, dict] | None = None

    @property
    def crashed(self) -> bool:
        """The broker died: its start left the abort file behind."""
        return (self.root / "abort").is_file()


def broker_message(m: dict, classic_batch_records: frozenset[int] = frozenset(),
                   batch_properties_of: dict[int, dict] | None = None) -> Message:
    """The message as the broker stored it; an inner batch's body is handed over as the
    writer builds it (from its parsed inner messages), a classic batch's own properties apart
    (``batch_properties_of``: the record stores its own properties only, and the batch's are
    handed over beside them)."""
    body = base64.b64decode(m["body"] or "")
    properties, batch_properties = m["properties"], None
    if batch_properties_of is not None:
        batch_properties = batch_properties_of.get(m["commitLogOffset"])
    elif m["commitLogOffset"] in classic_batch_records:
        batch_properties = {k: v for k, v in properties.items() if k in CLASSIC_BATCH_PROPERTIES}
        properties = {k: v for k, v in properties.items() if k not in CLASSIC_BATCH_PROPERTIES}
    if m["sysFlag"] & cl_fmt.INNER_BATCH_FLAG:
        body = innerbatch.build_inner_batch(innerbatch.parse_inner_batch(body))
    return Message(
        topic=m["topic"], queue_id=m["queueId"], body=body,
        properties=properties, flag=m["flag"], sys_flag=m["sysFlag"],
        born_timestamp=m["bornTimestamp"], born_host=codecs.parse_host(m["bornHost"]),
        store_timestamp=m["storeTimestamp"], store_host=codecs.parse_host(m["storeHost"]),
        reconsume_times=m["reconsumeTimes"],
        prepared_transaction_offset=m["preparedTransactionOffset"], body_crc=m["bodyCRC"],
        queue_offset=m["queueOffset"], batch_properties=batch_properties)


def _head_batch_properties(ref: Path) -> dict[int, dict]:
    """commitLogOffset -> the properties of the classic batch each record of one came in: the
    broker's CLUSTER, the client's WAIT and the batch's own UNIQ_KEY (write.json)."""
    out = {}
    for sent in write_log(ref).get("messages", []):
        if is_classic_batch(sent) and sent.get("msgId"):
            batch = {"WAIT": "true", "CLUSTER": "DefaultCluster",
                     "UNIQ_KEY": sent["batchUniqKey"]}
            for msg_id in sent["msgId"].split(","):
                out[int(msg_id[-16:], 16)] = batch
    return out


def _explained(raw: bytes, insertion: PropertyInsertion) -> bool:
    """The stored property names are the HashMap order of the model (no name repeated)."""
    names = [seg.split(b"\x01", 1)[0].decode("utf-8", "replace")
             for seg in raw.split(b"\x02") if seg]
    return len(set(names)) == len(names) and \
        list(broker_property_order(dict.fromkeys(names, ""), insertion)) == names


def load_broker_store(ref: Path, root: Path | None = None) -> BrokerStore:
    root = ref / "store" if root is None else root
    geometry = json.loads((ref / "geometry.json").read_text())
    newest = geometry["rocketmqVersion"].startswith("HEAD")
    broker_version = 5 if geometry["rocketmqVersion"].startswith("5.") or newest else 4
    prop_crc = bool(geometry.get("enabledAppendPropCRC"))
    messages = load_gz(ref / "dump.json.gz")["messages"]
    damage = None
    if ref.name in PROPERTY_DAMAGE:
        damage = json.loads((ref / "damage.json").read_text())
        assert damage["region"] == "props"
    # the stored property bytes of every record, read by the one scanner
    stored: dict[int, bytes] = {}
    for rec in Scanner(Store(root).commitlog, check_crc=False).messages():
        props = rec.properties_raw
        if damage and rec.offset == damage["message"]["commitLogOffset"]:
            at = damage["commitLogOffsetOfByte"] - (rec.end - len(props))
            assert props[at] == damage["newByte"]
            props = props[:at] + bytes([damage["oldByte"]]) + props[at + 1:]
        stored[rec.offset] = props[:-CRC_TAIL] if prop_crc else props
    assert set(stored) == {m["commitLogOffset"] for m in messages}
    log = write_log(ref)
    config = log.get("storeConfig", {})
    # 5.3.3 logs name them in storeConfig, head-* logs in the writer's options and geometry.json
    batch_topics = frozenset(config.get("batchCqTopics", ()))
    if not batch_topics and log.get("options", {}).get("batchTopic"):
        batch_topics = frozenset([log["options"]["batchTopic"]])
    assert batch_topics == frozenset(p.name for p in (root / "batchconsumequeue").glob("*"))
    bcq_file_size = config.get("mapperFileSizeBatchConsumeQueue") or \
        geometry.get("mappedFileSizeBatchConsumeQueue")
    classic = classic_batch_offsets(ref)
    # one producer model must explain every record whose properties are one serialised map
    single = [props for offset, props in stored.items()
              if offset not in classic and not (damage and offset ==
                                                damage["message"]["commitLogOffset"])]
    insertion = property_insertion_of(single)
    if newest:
        # the head-* harness put some properties in an order no producer model here explains
        # (KEYS after the map); those records are fed as stored bytes (properties_to_feed),
        # under the model that explains the most of the rest
        insertion = max(PROPERTY_INSERTIONS, key=lambda ins: sum(map(
            lambda raw: _explained(raw, ins), single)))
    assert insertion is not None
    return BrokerStore(ref, geometry, broker_version, prop_crc, messages, stored, damage,
                       batch_topics,
                       bcq_file_size // cq_fmt.BATCH_CQ_STORE_UNIT_SIZE if bcq_file_size else None,
                       classic, insertion, root,
                       OWN_PROPERTIES_ONLY if newest else APPENDED_BATCH_PROPERTIES,
                       _head_batch_properties(ref) if newest else None)


def store_writer(store: BrokerStore, out: Path) -> StoreWriter:
    geometry = store.geometry
    return StoreWriter(
        out, commitlog_file_size=geometry["mappedFileSizeCommitLog"],
        cq_units_per_file=geometry["mappedFileSizeConsumeQueue"] // 20,
        index_slots=geometry["maxHashSlotNum"], index_entries=geometry["maxIndexNum"],
        broker_version=store.broker_version, prop_crc=store.prop_crc,
        batch_topics=store.batch_topics, bcq_units_per_file=store.bcq_units_per_file,
        property_insertion=store.property_insertion, classic_batches=store.classic_batches)


def properties_to_feed(store: BrokerStore, m: dict, msg: Message) -> tuple[bytes | None, str]:
    """(raw bytes to feed or None, why): None when the writer's encoding of the decoded map
    already gives the stored bytes."""
    encoded = encode_properties(msg, store.prop_crc, store.broker_version,
                                store.property_insertion, store.classic_batches)
    if store.prop_crc:
        encoded = encoded[:-CRC_TAIL]
    stored = store.stored_properties[m["commitLogOffset"]]
    if encoded == stored:
        return None, ""
    return stored, "empty-values" if encoded == without_empty_value_pairs(stored) else "other"


@dataclass
class Reproduction:
    store: BrokerStore
    out: Path
    writer: StoreWriter

    @property
    def ref(self) -> Path:
        return self.store.ref

    @property
    def damage(self) -> dict | None:
        return self.store.damage


def reproduce(store: BrokerStore, out: Path) -> Reproduction:
    writer = store_writer(store, out)
    for m in store.messages:
        msg = broker_message(m, store.classic_batch_records, store.batch_properties)
        # where the decoded map lost something (empty values, a restored damaged byte, a
        # separator) the stored bytes are fed; test_properties_reencode_* says which it was
        msg.raw_properties, _ = properties_to_feed(store, m, msg)
        got = writer.put(msg)
        assert got == (m["commitLogOffset"], m["storeSize"], m["queueOffset"])
    writer.close()
    return Reproduction(store, out, writer)


# stores shipped as tarballs, opted in by name (unpacked once per session)
TARBALL_STORES = ["head-batchcq-timer-crash"]


@pytest.fixture(scope="module", params=REFS + TARBALL_STORES, ids=REF_IDS + TARBALL_STORES)
def reproduction(request, tmp_path_factory) -> Reproduction:
    ref, root = request.param, None
    if isinstance(ref, str):
        root = request.getfixturevalue("unpack_shared")(ref)
        ref = SHARED_STORES / ref
    return reproduce(load_broker_store(ref, root), tmp_path_factory.mktemp(ref.name))


def files_under(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}


def test_commitlog_identical(reproduction):
    ref, out = reproduction.ref, reproduction.out
    broker = files_under(reproduction.store.root / "commitlog")
    ours = files_under(out / "commitlog")
    assert set(ours) <= set(broker)
    for name, path in broker.items():
        data = path.read_bytes()
        if name not in ours:
            # a crash leaves the next, preallocated file behind; the writer does not preallocate
            assert reproduction.store.crashed, name
            assert name == max(broker) and not any(data)
            continue
        mine = ours[name].read_bytes()
        assert len(mine) == len(data)
        if reproduction.damage and reproduction.damage["file"] == name:
            differ = [i for i in range(len(data)) if data[i] != mine[i]] if data != mine else []
            assert differ == [reproduction.damage["filePos"]]
            assert mine[differ[0]] == reproduction.damage["oldByte"]
        else:
            assert mine == data, f"{name}: first difference at " \
                f"{next(i for i in range(len(data)) if data[i] != mine[i])}"


@pytest.mark.parametrize("kind, unit_size", [
    ("consumequeue", cq_fmt.CQ_STORE_UNIT_SIZE),
    ("batchconsumequeue", cq_fmt.BATCH_CQ_STORE_UNIT_SIZE)])
def test_consume_queues_identical(reproduction, kind, unit_size):
    ref, out = reproduction.ref, reproduction.out
    broker = files_under(reproduction.store.root / kind)
    ours = files_under(out / kind)
    assert set(broker) == set(ours)
    assert bool(broker) == (kind == "consumequeue" or bool(reproduction.store.batch_topics))
    for name, path in broker.items():
        data, mine = path.read_bytes(), ours[name].read_bytes()
        if ref.name in FLUSH_ZEROED:
            assert len(data) == len(mine)
            for pos in range(0, len(data), unit_size):
                unit = data[pos:pos + unit_size]
                assert unit == mine[pos:pos + unit_size] or not any(unit), (name, pos)
        else:
            assert mine == data, name


def test_index_files_identical(reproduction):
    ref, out = reproduction.ref, reproduction.out
    broker = sorted((reproduction.store.root / "index").iterdir())
    ours = [out / "index" / name for name in reproduction.writer.index.files]
    assert len(ours) == len(broker)
    assert [p.name for p in ours] == sorted(p.name for p in ours)
    geometry = json.loads((ref / "geometry.json").read_text())
    slots, entries = geometry["maxHashSlotNum"], geometry["maxIndexNum"]
    for theirs, mine in zip(broker, ours):
        data, written = theirs.read_bytes(), mine.read_bytes()
        if ref.name in FLUSH_ZEROED:
            count = int.from_bytes(written[36:40], "big")
            first, end = idx_fmt.entry_position(slots, 1), idx_fmt.entry_position(slots, count)
            assert written[first:end] == data[first:end], theirs.name
        else:
            assert written == data, theirs.name
    assert len(ours[-1].read_bytes()) == idx_fmt.index_file_size(slots, entries)


@pytest.mark.parametrize("ref", REFS, ids=REF_IDS)
def test_properties_reencode_except_dropped_empty_values(ref, tmp_path):
    """The broker's decoder drops ``name=""`` pairs; apart from those, what StoreWriter writes
    for the decoded map must be the stored property bytes (HashMap order, separators)."""
    store = load_broker_store(ref)
    writer = store_writer(store, tmp_path)
    for m in store.messages:
        msg = broker_message(m, store.classic_batch_records, store.batch_properties)
        msg.queue_offset = None  # records may move: only the property bytes are compared here
        writer.put(msg)
    writer.close()
    written = [rec.properties_raw[:-CRC_TAIL] if store.prop_crc else rec.properties_raw
               for rec in Scanner(Store(tmp_path).commitlog, check_crc=False).messages()]
    assert len(written) == len(store.messages)
    empty_values, others = 0, []
    for m, ours in zip(store.messages, written):
        stored = store.stored_properties[m["commitLogOffset"]]
        if ours == stored:
            continue
        if ours == without_empty_value_pairs(stored):
            assert codecs.decode_properties(stored) == codecs.decode_properties(ours)
            empty_values += 1
        else:
            others.append(m["commitLogOffset"])
    if store.damage:
        # the broker decoded the damaged UNIQ_KEY; the test restored the original byte
        assert others == [store.damage["message"]["commitLogOffset"]]
    else:
        assert others == []
    # every record holding an empty user-property value (a few percent of most mixes; none in
    # the BatchCQ stores) is one of those, and no other
    holding_empty = sum(without_empty_value_pairs(p) != p for p in store.stored_properties.values())
    assert empty_values == holding_empty < len(store.messages) // 5


def test_without_empty_value_pairs():
    assert without_empty_value_pairs(b"A\x01b\x02C\x01\x02D\x01e") == b"A\x01b\x02D\x01e"
    assert without_empty_value_pairs(b"A\x01b\x02C\x01") == b"A\x01b"
    assert without_empty_value_pairs(b"A\x01b\x02C\x01\x02") == b"A\x01b\x02"
    assert without_empty_value_pairs(b"C\x01\x02A\x01b") == b"A\x01b"
    assert without_empty_value_pairs(b"A\x01\x01x") == b"A\x01\x01x"


def test_head_classic_batches_are_laid_out_by_the_writer(unpack_shared):
    """head-batchcq-timer-crash: every classic-batch record is written from the decoded message
    and the batch's properties (not copied as stored bytes), and only the 5.3.4+ layout gives
    the broker's bytes; the 5.3.3 layout appends the batch's map."""
    name = TARBALL_STORES[0]
    store = load_broker_store(SHARED_STORES / name, unpack_shared(name))
    assert store.classic_batches == OWN_PROPERTIES_ONLY
    classic = [m for m in store.messages if m["commitLogOffset"] in store.batch_properties]
    assert len(classic) == 100
    appended = dataclasses.replace(store, classic_batches=APPENDED_BATCH_PROPERTIES)
    for m in classic:
        msg = broker_message(m, store.classic_batch_records, store.batch_properties)
        assert properties_to_feed(store, m, msg) == (None, "")
        stored = store.stored_properties[m["commitLogOffset"]]
        longer = encode_properties(msg, False, 5, store.property_insertion,
                                   appended.classic_batches)
        assert longer.startswith(stored) and longer != stored
        assert b"CLUSTER" in longer[len(stored):]
