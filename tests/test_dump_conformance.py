"""`mqtool dump STORE --json` against the broker's own decode of every reference store.

Each store's dump.json.gz was written by the broker's MessageDecoder (4.9.8 or 5.3.3) over the raw
files. Every message mqtool reports must carry the same values; bodies are compared in their
stored form (``--no-decompress``: compressed bodies stay as the bytes bodyCRC covers, which is
what the broker's dump shows), so ``--body base64`` must reproduce the dump's base64 exactly.
The real CLI runs in a subprocess for every store (about 1 s each; clean-multi is the biggest).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import reference_dirs

# broker dump key -> mqtool JSON key
FIELDS = {
    "topic": "topic",
    "queueId": "queue_id",
    "queueOffset": "queue_offset",
    "commitLogOffset": "physical_offset",   # MessageDecoder reads the self-recorded field
    "fileBasedOffset": "commitlog_offset",  # the real position
    "filePos": "file_offset",
    "storeSize": "total_size",
    "bodyCRC": "body_crc",
    "bodyCrcOk": "body_crc_ok",
    "sysFlag": "sys_flag",
    "flag": "flag",
    "bornTimestamp": "born_timestamp",
    "storeTimestamp": "store_timestamp",
    "bornHost": "born_host",
    "storeHost": "store_host",
    "reconsumeTimes": "reconsume_times",
    "preparedTransactionOffset": "prepared_transaction_offset",
    "tags": "tags",
    "keys": "keys",
    "uniqKey": "uniq_key",
    "msgId": "msg_id",
    "properties": "properties",
    "bodyLength": "body_length",
    "body": "body",
    "messageVersion": "magic_version",   # 5.3.3 dumps only
    "propCrcOk": "prop_crc_ok",          # property-CRC stores only
}


def _load_dump(ref: Path) -> dict:
    with gzip.open(ref / "dump.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


_RUNS: dict[Path, list[dict]] = {}


def _cli_records(ref: Path, mqtool) -> list[dict]:
    """One real CLI run per store, shared by the tests below."""
    if ref not in _RUNS:
        proc = mqtool("dump", ref / "store", "--json", "--body", "base64", "--no-decompress",
                      "--no-unwrap")
        assert proc.returncode == 0, proc.stderr
        _RUNS[ref] = [json.loads(line) for line in proc.stdout.splitlines()]
    return _RUNS[ref]


def _ids(paths):
    return [p.name if p.parent.name != "rocketmq-4.9.8" else f"fixture-{p.name}" for p in paths]


@pytest.mark.parametrize("ref", reference_dirs(), ids=_ids(reference_dirs()))
def test_every_message_matches_the_broker_decode(ref, mqtool):
    broker = _load_dump(ref)
    records = _cli_records(ref, mqtool)
    ours = [r for r in records if r["record_type"] == "commitlog/message"]

    assert len(ours) == broker["messageCount"] == len(broker["messages"])
    mismatches = []
    for expected, got in zip(broker["messages"], ours):
        assert got["file"] == f"commitlog/{expected['file']}"
        for broker_key, our_key in FIELDS.items():
            if broker_key in expected and expected[broker_key] != got[our_key]:
                mismatches.append((expected["commitLogOffset"], broker_key,
                                   expected[broker_key], got[our_key]))
        if "magicCode" in expected:
            assert int(expected["magicCode"], 16) == got["magic_code"]
        # the stored form is what the broker shows, compressed or not
        assert got["body_stored_length"] == expected["bodyLength"]
        assert got["body_decompressed"] is False and got["body_truncated"] is False
    assert not mismatches, mismatches[:10]


@pytest.mark.parametrize("ref", reference_dirs(), ids=_ids(reference_dirs()))
def test_where_each_file_scan_ends_matches_the_broker(ref, mqtool):
    """The non-message records: a blank record, zeros, or an illegal magic, at the position
    the broker's raw scan stopped (fileScan ``end``)."""
    broker = _load_dump(ref)
    records = _cli_records(ref, mqtool)
    _RUNS.pop(ref, None)  # the last user of this run: free its memory
    ends = {}
    for r in records:
        if r["record_type"] != "commitlog/message":
            ends.setdefault(r["file"].split("/")[-1], r)
    messages_per_file = {}
    for r in records:
        if r["record_type"] == "commitlog/message":
            name = r["file"].split("/")[-1]
            messages_per_file[name] = messages_per_file.get(name, 0) + 1
    for scan in broker["fileScan"]:
        assert messages_per_file.get(scan["name"], 0) == scan["messages"]
        kind, _, rest = scan["end"].partition("@")
        position = int(rest.split()[0])
        ours = ends[scan["name"]]
        assert ours["file_offset"] == position == scan["scanEndPos"]
        if kind == "blank":
            assert ours["record_type"] == "commitlog/blank"
            assert f"size={ours['total_size']}" in scan["end"]
        elif kind == "zeros":
            assert ours["record_type"] == "commitlog/unwritten"
        else:
            assert ours["record_type"] == "commitlog/corrupt"


def test_the_compression_store_has_bodies_of_every_codec(shared_stores):
    """Guards the test below against silently checking nothing."""
    messages = _load_dump(shared_stores / "v5-compress-clean")["messages"]
    assert {m["compressionType"] for m in messages if "bodyUncompressedBase64" in m} == \
        {"LZ4", "ZSTD", "ZLIB"}


@pytest.mark.parametrize("ref", reference_dirs(), ids=_ids(reference_dirs()))
def test_every_compressed_body_decompresses_to_the_brokers_bytes(ref, mqtool):
    """LZ4, ZSTD and zlib bodies, decompressed by a default install, equal what 5.3.3's own
    decompressors made of them (``bodyUncompressedBase64``); every other body stays as stored."""
    broker = _load_dump(ref)["messages"]
    if not any("bodyUncompressedBase64" in m for m in broker):
        pytest.skip("the broker decompressed no body of this store")
    proc = mqtool("dump", ref / "store", "--json", "--body", "base64", "--messages-only")
    assert proc.returncode == 0, proc.stderr
    ours = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(ours) == len(broker)
    codecs_seen, mismatches = set(), []
    for expected, got in zip(broker, ours):
        if "bodyUncompressedBase64" not in expected:
            assert got["body"] == expected["body"] and not got["body_decompressed"]
            continue
        codecs_seen.add(expected["compressionType"])
        assert got.get("body_decompress_error") is None, got["body_decompress_error"]
        assert got["body_compression"] == expected["compressionType"].lower()
        if not got["body_decompressed"] or got["body"] != expected["bodyUncompressedBase64"]:
            mismatches.append((expected["commitLogOffset"], expected["compressionType"]))
    assert not mismatches, mismatches[:10]
    if ref.name == "v5-compress-clean":
        assert codecs_seen == {"LZ4", "ZSTD", "ZLIB"}


def test_body_codecs_are_default_dependencies():
    """A plain ``pip install mqtool`` brings lz4 and zstandard; the old ``codecs`` extra still
    resolves (to nothing more) so old install commands keep working."""
    tomllib = pytest.importorskip("tomllib")
    from conftest import REPO
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {dep.split(">")[0].split("=")[0].split("<")[0].strip() for dep in project["dependencies"]}
    assert {"lz4", "zstandard"} <= names
    assert "codecs" in project["optional-dependencies"]
