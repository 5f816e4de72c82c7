"""Controller mode (5.x automatic master switch): the epoch file, the broker identity, verify's
EPOCH_* codes, the refusal of cuts the epoch file cannot follow, and ``mqtool failover``.

No broker-written store of this mode exists: the rules come from RocketMQ 5.x's source
(EpochFileCache, CheckpointFile, MixAll.string2File, AutoSwitchHAClient.doTruncate,
BrokerMetadata) and the stores are forged through mqtool's writer
(:func:`mqtool.forge.controller.make_failover_pair`), whose summary says what it meant to write:
the expectation the commands are checked against. The CRC of the epoch file is recomputed here
with binascii (CheckpointFile's rule: CRC-32 of the entry lines, masked to 31 bits).
"""
from __future__ import annotations

import binascii
import json
import shutil

import pytest

from conftest import run_mqtool, tree_digests

from mqtool.forge.controller import make_failover_pair
from mqtool.formats import epoch as epoch_fmt
from mqtool.store import Store
from mqtool.verify import verify_store


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("failover")
    summary = make_failover_pair(root / "old", root / "new")
    return root / "old", root / "new", summary


@pytest.fixture
def new_copy(pair, tmp_path):
    dest = tmp_path / "new"
    shutil.copytree(pair[1], dest)
    return dest


def _crc(text: str) -> int:
    return binascii.crc32(text.encode()) & 0x7FFFFFFF


def test_epoch_file_is_laid_out_as_checkpointfile_writes_it(pair):
    _old, new, summary = pair
    switch = summary["switch_offset"]
    entries = f"1-0\n2-{switch}\n"
    assert (new / "epochFileCheckpoint").read_text() == f"2\n{_crc(entries)}\n{entries}"
    # string2File: the .bak is the content one write ago
    assert (new / "epochFileCheckpoint.bak").read_text() == f"1\n{_crc('1-0' + chr(10))}\n1-0\n"
    assert (new / "brokerIdentity").read_text() == "DefaultCluster#broker-a#2"


def test_parse_follows_javas_reader():
    # String.split drops trailing empty parts: "3-100-" is an entry; "-1-5" is not (3 parts)
    parsed = epoch_fmt.parse_epoch_text(f"1\n0\n3-100-\n")
    assert parsed.entries == [(3, 100)] and parsed.usable
    skipped = epoch_fmt.parse_epoch_text("1\n0\n-1-5\n")
    assert skipped.entries == [] and skipped.skipped == [3] and "entries" in skipped.problem
    assert epoch_fmt.parse_epoch_text(" 1\n0\n").fatal          # parseInt takes no blanks
    assert epoch_fmt.parse_epoch_text("").fatal


def test_info_and_passport_show_epochs_and_identity(pair):
    _old, new, summary = pair
    proc = run_mqtool("info", "--json", new)
    assert proc.returncode == 0, proc.stderr
    controller = json.loads(proc.stdout)["passport"]["controller"]
    assert controller["epoch_file"] == "epochFileCheckpoint"
    assert [(e["epoch"], e["start_offset"], e["end_offset"]) for e in controller["epochs"]] == [
        (1, 0, summary["switch_offset"]),
        (2, summary["switch_offset"], summary["new_max_offset"])]
    assert controller["broker_identity"]["brokerIdentity"] == {
        "cluster": "DefaultCluster", "broker_name": "broker-a", "broker_id": 2}
    text = run_mqtool("info", new).stdout
    assert "5.x controller mode" in text and "DefaultCluster#broker-a#2" in text


def test_verify_clean_controller_store(pair):
    proc = run_mqtool("verify", "--json", pair[1])
    assert proc.returncode == 0, proc.stdout[-2000:]
    codes = {f["code"] for f in json.loads(proc.stdout)["findings"]}
    assert not {c for c in codes if c.startswith("EPOCH_")}
    rc, found = _codes(pair[0])
    assert rc == 0 and not [c for c in found if c.startswith("EPOCH_")]


def _codes(store):
    """verify's findings, in-process (the CLI's own run is checked once below)."""
    report = verify_store(Store(store), workers=1)
    return (1 if report.errors else 0), {f.code: f.to_dict() for f in report.findings}


@pytest.mark.parametrize("name, text, code", [
    # torn mid-way through the last entry: count right, CRC wrong
    ("torn-entry", lambda s: f"2\n{_crc(f'1-0{chr(10)}2-{s}{chr(10)}')}\n1-0\n2-4", "EPOCH_CRC"),
    # torn after the CRC line: no entries
    ("torn-header", lambda s: "2\n7165", "EPOCH_COUNT"),
    # a hand edit that kept the CRC line
    ("edited", lambda s: f"2\n{_crc(f'1-0{chr(10)}2-{s}{chr(10)}')}\n1-0\n2-{s + 219}\n",
     "EPOCH_CRC"),
    ("not-a-number", lambda s: "two\n0\n1-0\n", "EPOCH_UNREADABLE"),
    # CRC 0 is "not checked": the content is what is wrong
    ("past-end", lambda s: "2\n0\n1-0\n2-999999\n", "EPOCH_PAST_END"),
    ("not-on-record", lambda s: f"2\n0\n1-0\n2-{s + 1}\n", "EPOCH_NOT_RECORD"),
    ("order", lambda s: f"2\n0\n2-0\n1-{s}\n", "EPOCH_ORDER"),
])
def test_verify_epoch_file_damage(pair, new_copy, name, text, code):
    switch = pair[2]["switch_offset"]
    (new_copy / "epochFileCheckpoint").write_text(text(switch))
    rc, found = _codes(new_copy)
    assert rc == 1 and code in found, (name, sorted(found))
    assert found[code]["file"].startswith("epochFileCheckpoint")
    if name == "not-a-number":               # the CLI: no traceback, the finding listed
        proc = run_mqtool("verify", new_copy)
        assert proc.returncode == 1 and code in proc.stdout, proc.stderr


def test_verify_bak_disagreement(pair, new_copy):
    (new_copy / "epochFileCheckpoint.bak").write_text(f"1\n{_crc('1-8' + chr(10))}\n1-8\n")
    _rc, found = _codes(new_copy)
    assert "EPOCH_BAK" in found and found["EPOCH_BAK"]["severity"] == "warning"


def test_crc_mismatch_falls_back_to_bak(pair, new_copy):
    lines = (new_copy / "epochFileCheckpoint").read_text().split("\n")
    lines[1] = "12345"
    (new_copy / "epochFileCheckpoint").write_text("\n".join(lines))
    proc = run_mqtool("info", "--json", new_copy)
    controller = json.loads(proc.stdout)["passport"]["controller"]
    assert controller["epoch_file"] == "epochFileCheckpoint.bak"
    assert [e["epoch"] for e in controller["epochs"]] == [1]


def test_failover_lists_resent_and_lost(pair, tmp_path):
    old, new, summary = pair
    out = tmp_path / "lost.jsonl"
    proc = run_mqtool("failover", "--json", "--export", out, old, new)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["consistent_point"] == summary["consistent_point"]
    assert doc["old_max_offset"] == summary["old_max_offset"]
    assert doc["new_max_offset"] == summary["new_max_offset"]
    got = [(m["commitlog_offset"], m["uniq_key"], m["failover"]) for m in doc["messages"]]
    assert got == [(p["commitlog_offset"], p["uniq_key"], p["failover"]) for p in summary["past"]]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    lost = [p["uniq_key"] for p in summary["past"] if p["failover"] == "lost"]
    assert [line["uniq_key"] for line in lines] == lost
    # as mqtool export writes them: the message dict and the replay fields
    assert all(line["kind"] == "normal" and line["real_topic"] == "TopicTest"
               and line["body"] and line["file"].startswith("commitlog/") for line in lines)


def test_failover_nothing_lost_when_roles_are_the_same_store(pair):
    old, _new, _summary = pair
    proc = run_mqtool("failover", "--json", old, old)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["summary"]["past_consistent_point"] == 0


def test_failover_bad_input(pair, new_copy, fixture_store):
    old, _new, _summary = pair
    proc = run_mqtool("failover", old, fixture_store)
    assert proc.returncode == 2 and "no epochFileCheckpoint" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    (new_copy / "epochFileCheckpoint").write_text(f"1\n{_crc('5-3' + chr(10))}\n5-3\n")
    (new_copy / "epochFileCheckpoint.bak").unlink()
    proc = run_mqtool("failover", old, new_copy)
    assert proc.returncode == 2 and "no consistent point" in proc.stderr


def test_truncate_cuts_the_epoch_file_as_the_broker_does(pair, new_copy):
    """truncateFiles + truncateSuffixByOffset: epoch 2 starts past the cut and goes; the file is
    rewritten through string2File, so the old content becomes the .bak; undo restores both."""
    switch = pair[2]["switch_offset"]
    before = tree_digests(new_copy)
    old_text = (new_copy / "epochFileCheckpoint").read_text()
    proc = run_mqtool("truncate", "--to", switch - 219, "--json", new_copy)
    assert proc.returncode == 1, proc.stderr          # messages dropped
    assert (new_copy / "epochFileCheckpoint").read_text() == f"1\n{_crc('1-0' + chr(10))}\n1-0\n"
    assert (new_copy / "epochFileCheckpoint.bak").read_text() == old_text
    _rc, found = _codes(new_copy)
    assert not [c for c in found if c.startswith("EPOCH_")]
    backup = json.loads(proc.stdout)["backup"]
    proc = run_mqtool("undo", backup)
    assert proc.returncode == 0, proc.stderr
    assert tree_digests(new_copy) == before


def test_truncate_before_every_epoch_is_refused(pair, tmp_path):
    store = tmp_path / "old"
    shutil.copytree(pair[0], store)
    (store / "epochFileCheckpoint").write_text(f"1\n{_crc('1-434' + chr(10))}\n1-434\n")
    before = tree_digests(store)
    proc = run_mqtool("truncate", "--to", 217, store)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "empty epoch file" in proc.stderr and "nothing was changed" in proc.stderr
    assert tree_digests(store) == before
