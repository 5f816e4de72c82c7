"""mqtool salvage: damage in the middle of a file (bit flip, zeroed range, torn write) and every
message outside the damaged bytes comes back with its body intact; the hole map covers what is
lost; the broker's truncation point splits the output exactly.

References: the intact store's own ``mqtool dump --json`` (taken before the damage), the damage
report of ``mqtool fixture damage``, ``mqtool verify``'s recovery prediction, and the
broker-written reference stores' dumps and recovery results."""
from __future__ import annotations

import gzip
import json
import shutil
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import FIXTURE_STORE
from mqtool import forge


@lru_cache(maxsize=None)
def load_gz(path: str):
    with gzip.open(path) as fh:
        return json.load(fh)


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def intact(tmp_path_factory, ):
    """A 3-file store and its dump, keyed by CommitLog offset."""
    from conftest import run_mqtool
    root = tmp_path_factory.mktemp("intact") / "store"
    forge.make_store(root, forge.ForgeOptions(messages=2600, seed=21))
    proc = run_mqtool("dump", "--json", "--messages-only", root)
    assert proc.returncode == 0, proc.stderr
    dump = {m["commitlog_offset"]: m for m in jsonl(proc.stdout)}
    assert len(list((root / "commitlog").iterdir())) >= 3
    return root, dump


def damaged_copy(intact, tmp_path, mqtool, *damage_args) -> tuple[Path, dict]:
    root, _ = intact
    copy = tmp_path / "store"
    shutil.copytree(root, copy)
    proc = mqtool("fixture", "damage", copy, *damage_args)
    assert proc.returncode == 0, proc.stderr
    return copy, json.loads(proc.stdout)


def run_salvage(mqtool, store: Path, out: Path, *extra) -> tuple[list[dict], dict]:
    proc = mqtool("salvage", store, "--out", out, *extra)
    assert proc.returncode == 0, proc.stderr
    return jsonl(out.read_text(encoding="utf-8")), json.loads(proc.stdout)


def predicted_truncation(mqtool, store: Path) -> int:
    proc = mqtool("verify", "--json", store)
    return json.loads(proc.stdout)["recovery"]["process_offset"]


def overlaps(record: dict, start: int, end: int) -> bool:
    return record["commitlog_offset"] < end and start < record["commitlog_offset"] + \
        record["total_size"]


def check_salvage(mqtool, intact, store: Path, report: dict, tmp_path: Path,
                  detectable: bool = True) -> tuple[list[dict], dict]:
    _, dump = intact
    rng = report["range"]
    start, end = rng["start"], rng["end"]
    messages, salvage_map = run_salvage(mqtool, store, tmp_path / "out.jsonl")
    got = {m["commitlog_offset"]: m for m in messages}
    outside = [m for m in dump.values() if not overlaps(m, start, end)]
    assert outside and len(outside) < len(dump)
    for m in outside:
        assert m["commitlog_offset"] in got, m["commitlog_offset"]
        out = dict(got[m["commitlog_offset"]])
        out.pop("beyond_truncation")
        assert out == m      # every field, body included, as the intact store's dump says
    lost = [m for m in dump.values() if m["commitlog_offset"] not in got]
    if detectable:
        assert lost, "the damage went unseen"
    holes = [(h["start"], h["end"]) for h in salvage_map["holes"]]
    for m in lost:
        assert overlaps(m, start, end)
        assert any(a <= m["commitlog_offset"] < b for a, b in holes), m["commitlog_offset"]
    # the broker's truncation point, as verify predicts it independently
    cut = predicted_truncation(mqtool, store)
    assert salvage_map["truncation"]["process_offset"] == cut
    for m in messages:
        assert m["beyond_truncation"] == (m["commitlog_offset"] >= cut)
    assert salvage_map["messages_beyond_truncation"] == sum(o >= cut for o in got)
    return messages, salvage_map


def test_bit_flip_in_a_body(intact, tmp_path, mqtool):
    store, report = damaged_copy(intact, tmp_path, mqtool, "--kind", "bit-flip", "--file",
                                 "commitlog/00000000000001048576", "--seed", "3")
    messages, salvage_map = check_salvage(mqtool, intact, store, report, tmp_path)
    victim = report["records"][0]["offset"]
    assert victim not in {m["commitlog_offset"] for m in messages}
    [hole] = salvage_map["holes"]
    assert hole["kinds"] == ["body-crc"] and hole["start"] == victim
    assert [r["commitlog_offset"] for r in hole["damaged_records"]] == [victim]
    assert hole["lost_bytes"] == report["records"][0]["size"]
    assert hole["before"]["commitlog_offset"] < victim < hole["after"]["commitlog_offset"]
    assert hole["time_range"][0] <= hole["time_range"][1]
    assert hole["messages_lost_estimate"] == 1
    # the damaged record itself, on request, marked
    with_damaged, _ = run_salvage(mqtool, store, tmp_path / "all.jsonl", "--include-damaged")
    marked = [m for m in with_damaged if m["damage"]]
    assert [(m["commitlog_offset"], m["damage"]) for m in marked] == [(victim, "body-crc")]


def test_zeroed_range_spanning_records(intact, tmp_path, mqtool):
    store, report = damaged_copy(intact, tmp_path, mqtool, "--kind", "zero-range", "--file",
                                 "commitlog/00000000000001048576", "--seed", "5",
                                 "--length", "6000")
    messages, salvage_map = check_salvage(mqtool, intact, store, report, tmp_path)
    assert len(salvage_map["holes"]) == 1
    hole = salvage_map["holes"][0]
    rng = report["range"]
    assert hole["start"] < rng["end"] and rng["start"] < hole["end"]
    whole = [r for r in report["records"] if rng["start"] <= r["offset"]
             and r["offset"] + r["size"] <= rng["end"]]
    assert whole and hole["messages_lost_estimate"] >= len(whole)


def test_torn_write_in_the_middle_of_a_file(intact, tmp_path, mqtool):
    _, dump = intact
    middle = sorted(o for o in dump if 1048576 + 300000 < o < 1048576 + 700000)[0]
    store, report = damaged_copy(intact, tmp_path, mqtool, "--kind", "torn-tail", "--offset",
                                 str(middle))
    messages, salvage_map = check_salvage(mqtool, intact, store, report, tmp_path)
    [hole] = salvage_map["holes"]
    assert hole["start"] == middle
    assert hole["end"] == middle + dump[middle]["total_size"]
    # recovery stops at the torn record and drops everything after it
    assert salvage_map["truncation"]["process_offset"] == middle
    beyond = [m["commitlog_offset"] for m in messages if m["beyond_truncation"]]
    assert beyond == sorted(o for o in dump if o > middle)


def test_beyond_truncation_writes_only_what_a_restart_drops(intact, tmp_path, mqtool):
    store, report = damaged_copy(intact, tmp_path, mqtool, "--kind", "bit-flip", "--file",
                                 "commitlog/00000000000002097152", "--seed", "8")
    cut = predicted_truncation(mqtool, store)
    only, salvage_map = run_salvage(mqtool, store, tmp_path / "beyond.jsonl",
                                    "--beyond-truncation")
    _, dump = intact
    victim = report["records"][0]["offset"]
    assert victim == cut
    assert [m["commitlog_offset"] for m in only] == sorted(o for o in dump if o > cut)
    assert all(m["beyond_truncation"] for m in only)
    assert salvage_map["messages_written"] == len(only)


def test_missing_middle_file_is_a_hole(intact, tmp_path, mqtool):
    store, _ = damaged_copy(intact, tmp_path, mqtool, "--kind", "delete-file", "--file",
                            "commitlog/00000000000001048576")
    messages, salvage_map = run_salvage(mqtool, store, tmp_path / "out.jsonl")
    _, dump = intact
    assert {m["commitlog_offset"] for m in messages} == {
        o for o in dump if not 1048576 <= o < 2 * 1048576}
    [hole] = salvage_map["holes"]
    assert hole["kinds"] == ["missing-file"]
    assert (hole["start"], hole["end"], hole["lost_bytes"]) == (1048576, 2097152, 1048576)
    assert hole["messages_lost_estimate"] > 0


def test_output_inside_the_store_is_refused(intact, tmp_path, mqtool):
    root, _ = intact
    proc = mqtool("salvage", root, "--out", root / "commitlog" / "x.jsonl")
    assert proc.returncode == 2 and "refusing to write inside the store" in proc.stderr
    assert not (root / "commitlog" / "x.jsonl").exists()


# --- broker-written stores ------------------------------------------------------------------------

def _matches_broker_decode(out: dict, broker: dict) -> None:
    assert out["topic"] == broker["topic"] and out["queue_id"] == broker["queueId"]
    assert out["queue_offset"] == broker["queueOffset"]
    assert out["store_timestamp"] == broker["storeTimestamp"]
    assert out["properties"] == broker["properties"]
    assert out["msg_id"] == broker["msgId"]
    assert out["body"] == (broker.get("body") or "") or (out["body"] is None
                                                          and not broker.get("body"))


def test_clean_reference_store_salvages_everything(tmp_path, mqtool):
    messages, salvage_map = run_salvage(mqtool, FIXTURE_STORE / "store", tmp_path / "o.jsonl",
                                        "--no-decompress")
    broker = load_gz(str(FIXTURE_STORE / "dump.json.gz"))["messages"]
    assert [m["commitlog_offset"] for m in messages] == [b["commitLogOffset"] for b in broker]
    for out, b in zip(messages, broker):
        _matches_broker_decode(out, b)
        assert out["beyond_truncation"] is False
    assert salvage_map["holes"] == [] and salvage_map["bytes_lost"] == 0
    assert len(salvage_map["islands"]) == len(list((FIXTURE_STORE / "store" /
                                                    "commitlog").iterdir()))


@pytest.mark.parametrize("name,extra", [("clean-small-damaged", []),
                                        ("v5-damaged", []),
                                        ("v5-propcrc-damaged", ["--force-verify-prop-crc"])])
def test_damaged_reference_stores(shared_stores, tmp_path, mqtool, name, extra):
    folder = shared_stores / name
    damage = json.loads((folder / "damage.json").read_text())
    victim = damage["message"]["commitLogOffset"]
    recover = load_gz(str(folder / "recover.json.gz"))
    cut = recover["afterRecovery"]["maxPhyOffset"]
    assert cut == victim
    messages, salvage_map = run_salvage(mqtool, folder / "store", tmp_path / "o.jsonl",
                                        "--no-decompress", *extra)
    broker = {b["commitLogOffset"]: b for b in load_gz(str(folder / "dump.json.gz"))["messages"]}
    got = {m["commitlog_offset"]: m for m in messages}
    assert set(got) == set(broker) - {victim}
    for offset, out in got.items():
        _matches_broker_decode(out, broker[offset])
        assert out["beyond_truncation"] == (offset >= cut)
    assert salvage_map["truncation"]["process_offset"] == cut
    [hole] = salvage_map["holes"]
    assert hole["start"] == victim and hole["end"] == victim + damage["message"]["storeSize"]
    assert hole["kinds"] == (["prop-crc"] if name == "v5-propcrc-damaged" else ["body-crc"])
    lost_by_broker = sum(1 for o in broker if o >= cut)
    assert salvage_map["messages_beyond_truncation"] == lost_by_broker - 1
