"""The store passport names the writer family with its evidence and lists inconsistencies."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import SHARED_STORES, shared_store_names
from mqtool.forge import ForgeOptions, make_store
from mqtool.passport import store_passport
from mqtool.store import Store


def forge(tmp_path, name, **kw):
    root = tmp_path / name
    make_store(root, ForgeOptions(messages=kw.pop("messages", 300), seed=5, **kw))
    return root


def claims(passport):
    return {c["claim"]: c["evidence"] for c in passport["claims"]}


def test_a_4x_store_is_4x_without_inconsistencies(tmp_path):
    passport = store_passport(Store(forge(tmp_path, "v4")))
    assert passport["family"] == "4.x"
    assert passport["recovery_rules"] == "4.9"
    assert list(claims(passport)) == ["4.x"]
    assert passport["inconsistencies"] == []


def test_a_crashed_5x_store_shows_its_evidence(tmp_path):
    passport = store_passport(Store(forge(tmp_path, "v5", broker_version=5, crash=True)))
    assert passport["family"] == "5.x"
    assert passport["recovery_rules"] == "5.3.2+"
    evidence = claims(passport)["5.x"]
    assert "abort.bak exists" in evidence
    assert "abort holds" in evidence


def test_info_adds_record_evidence(tmp_path, mqtool):
    root = forge(tmp_path, "v5crc", broker_version=5, long_topic=True, prop_crc=True)
    proc = mqtool("info", "--json", root)
    assert proc.returncode == 0, proc.stderr
    passport = json.loads(proc.stdout)["passport"]
    found = claims(passport)
    assert "V2 records" in found["5.1+"]
    assert found["5.2+ with enabledAppendPropCRC"].startswith("300 records")


def test_inconsistent_geometry_is_listed(tmp_path):
    root = forge(tmp_path, "odd", messages=1500)
    segments = sorted((root / "commitlog").iterdir())
    with open(segments[-1], "r+b") as fh:
        fh.truncate(4096)
    queue_file = next((root / "consumequeue").rglob("00000000000000000000"))
    with open(queue_file, "r+b") as fh:
        fh.truncate(5990)
    index = sorted((root / "index").iterdir())[0]
    shutil.copy(index, index.with_name("20991231235959999"))
    with open(index.with_name("20991231235959999"), "r+b") as fh:
        fh.truncate(1000)
    problems = store_passport(Store(root))["inconsistencies"]
    assert any(p.startswith("CommitLog files of 2 sizes") for p in problems), problems
    assert any("not a multiple of 20: 5,990" in p for p in problems), problems
    assert any(p.startswith("IndexFiles of 2 sizes") for p in problems), problems


@pytest.mark.parametrize("name", shared_store_names() or ["(absent)"])
def test_reference_stores_family(name):
    if name == "(absent)":
        pytest.skip("../shared/rocketmq-stores is absent")
    geometry = json.loads((SHARED_STORES / name / "geometry.json").read_text())
    passport = store_passport(Store(SHARED_STORES / name / "store"))
    expected = "5.x" if geometry["rocketmqVersion"].startswith("5.") else "4.x"
    assert passport["family"] == expected
    assert passport["inconsistencies"] == []


@pytest.mark.parametrize("requested,source", [(None, "passport"), ("4.9", "--broker-version")])
def test_recover_starts_with_the_passport_and_names_its_rules(tmp_path, mqtool, requested,
                                                               source):
    root = forge(tmp_path, "v5", broker_version=5, crash=True)
    args = ["recover", "--dry-run", root] + (["--broker-version", requested] if requested else [])
    text = mqtool(*args)
    lines = text.stdout.splitlines()
    assert lines[1] == "Written by: RocketMQ 5.x (recovery rules 5.3.2+)"
    assert lines[2].startswith("  5.x: ") and "abort holds" in lines[2]
    rules = requested or "5.3.2+"
    assert any(line.startswith(f"broker rules {rules} (from the {source}), abnormal recovery")
               for line in lines)
    doc = json.loads(mqtool(*args, "--json").stdout)
    assert doc["passport"]["family"] == "5.x"
    assert doc["options"]["broker_version"] == rules
    assert doc["options"]["broker_version_from"] == source


def test_verify_passport_counts_the_records_it_scanned(tmp_path, mqtool):
    """verify's passport carries the V2 and property-CRC evidence of its own scan (counted here
    with the scanner), in both engines, and says the records were scanned."""
    from mqtool.formats import commitlog as cl_fmt
    from mqtool.scan import Scanner
    from mqtool.verify import verify_store
    root = forge(tmp_path, "v5", broker_version=5, prop_crc=True, long_topic=True, messages=600)
    records = list(Scanner(Store(root).commitlog).messages())
    v2 = sum(r.magic_code == cl_fmt.MESSAGE_MAGIC_CODE_V2 for r in records)
    prop_crc = sum(r.prop_crc_ok is not None for r in records)
    assert v2 and prop_crc == len(records)
    for engine in ("batches", "records"):
        summary = verify_store(Store(root), engine=engine).summary
        assert (summary["v2_records"], summary["prop_crc_records_checked"]) == (v2, prop_crc)
    doc = json.loads(mqtool("verify", "--json", root).stdout)
    evidence = claims(doc["passport"])
    assert evidence["5.1+"].startswith(f"{v2:,} V2 records")
    assert evidence["5.2+ with enabledAppendPropCRC"].startswith(f"{prop_crc:,} records")
    plain = forge(tmp_path, "v4", messages=200)
    evidence = claims(json.loads(mqtool("verify", "--json", plain).stdout)["passport"])
    assert evidence == {"4.x": "no 5.x-only file, field or record"}
