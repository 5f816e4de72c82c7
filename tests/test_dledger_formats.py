"""formats/dledger.py read against what the real 4.9.8 broker (DLedger 0.3.1.2) wrote and
decoded: every entry header of the three DLedger stores equals dump.json's ``dledger`` fields,
every file end is the blank the broker's scan saw, every DLedger index unit equals
``fileState.dledger.indexUnits``, and the text files parse as the broker's Properties did."""
from __future__ import annotations

import gzip
import json
import re

import pytest

from conftest import DLEDGER_STORES, SHARED_STORES
from mqtool.formats import commitlog as cl_fmt
from mqtool.formats import dledger as dl_fmt

HEADER_FIELDS = {"magic": "magic", "size": "size", "index": "index", "term": "term", "pos": "pos",
                 "channel": "channel", "chainCrc": "chain_crc", "bodyCrc": "body_crc",
                 "bodySize": "body_size"}


def broker_dump(name: str) -> dict:
    with gzip.open(SHARED_STORES / name / "dump.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="module", params=DLEDGER_STORES)
def store_and_dump(request, dledger_stores):
    return dledger_stores[request.param], broker_dump(request.param)


def test_every_entry_header_equals_the_broker_decode(store_and_dump):
    store, dump = store_and_dump
    files = {}
    for message in dump["messages"]:
        expected = message["dledger"]
        data = files.setdefault(expected["entryFile"], (store / expected["entryFile"]).read_bytes())
        at = expected["entryFilePos"]
        header = dl_fmt.entry_header.parse(data[at:at + dl_fmt.ENTRY_HEADER_SIZE])
        assert {key: header[field] for key, field in HEADER_FIELDS.items()} == \
            {key: expected[key] for key in HEADER_FIELDS}
        assert header.pos == expected["entryOffset"] == int(expected["entryFile"][-20:]) + at
        # the record inside: at pos + 48, its TOTALSIZE is the body size, its PHYSICALOFFSET and
        # the broker's commitLogOffset are pos + 48
        record = cl_fmt.message_header.parse(data[at + 48:at + 48 + 48])
        assert record.total_size == header.body_size == message["storeSize"]
        assert header.size == dl_fmt.ENTRY_HEADER_SIZE + header.body_size
        assert dl_fmt.record_offset(header.pos) == record.physical_offset == \
            message["commitLogOffset"]
        assert dl_fmt.entry_pos_of(message["commitLogOffset"]) == header.pos
        assert message["filePos"] == at + dl_fmt.ENTRY_HEADER_SIZE


def test_every_file_end_is_the_blank_or_zeros_the_broker_saw(store_and_dump):
    store, dump = store_and_dump
    for scan in dump["fileScan"]:
        data = (store / scan["name"]).read_bytes()
        end = re.fullmatch(r"(blank|zeros)@(\d+)(?: size=(\d+))?", scan["end"])
        assert end, scan["end"]
        at = int(end.group(2))
        if end.group(1) == "blank":
            blank = dl_fmt.end_of_file_blank.parse(data[at:at + dl_fmt.MIN_BLANK_LENGTH])
            assert blank.bytes_left == int(end.group(3)) == len(data) - at
            assert not any(data[at + dl_fmt.MIN_BLANK_LENGTH:])
        else:
            assert not any(data[at:])


def test_every_index_unit_equals_the_broker_listing(store_and_dump):
    store, dump = store_and_dump
    state = dump["fileState"]["dledger"]
    (index_file,) = state["indexFiles"]
    path = store / state["dir"] / dl_fmt.INDEX_DIR / index_file["name"]
    assert path.stat().st_size == index_file["size"] == dl_fmt.INDEX_FILE_SIZE
    with open(path, "rb") as fh:
        data = fh.read(index_file["lastNonZeroUnitPos"] + dl_fmt.INDEX_UNIT_SIZE)
    units = [dl_fmt.index_unit.parse(data[n * 32:n * 32 + 32])
             for n in range(len(data) // dl_fmt.INDEX_UNIT_SIZE)]
    assert [[n, u.magic, u.pos, u.size, u.index, u.term] for n, u in enumerate(units)] == \
        state["indexUnits"]
    by_index = {m["dledger"]["index"]: m["dledger"] for m in dump["messages"]}
    for unit in units:
        entry = by_index[unit.index]
        assert (unit.pos, unit.size, unit.term) == (entry["pos"], entry["size"], entry["term"])


def test_checkpoint_and_currterm_text(dledger_stores):
    for name in DLEDGER_STORES:
        state = broker_dump(name)["fileState"]["dledger"]
        folder = dledger_stores[name] / state["dir"]
        for file, key in ((dl_fmt.CHECKPOINT_FILE, "checkpoint"),
                          (dl_fmt.CURRTERM_FILE, "currterm")):
            text = (folder / file).read_text()
            assert text == state[f"{key}File"]["text"]
            values = dl_fmt.parse_properties_text(text)
            assert values == state[key]
            assert dl_fmt.format_properties_text(values) == text


def test_properties_text_tolerates_comments_and_colons():
    text = "#Tue Nov 24 23:43:00 UTC 2026\n\ncommittedIndex = 7\nendIndex:8\n"
    assert dl_fmt.parse_properties_text(text) == {"committedIndex": "7", "endIndex": "8"}


def test_a_blank_needs_its_magic():
    with pytest.raises(Exception):
        dl_fmt.end_of_file_blank.parse(b"\x00\x00\x00\x01\x00\x00\x00\x08")
