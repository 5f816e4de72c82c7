"""A CommitLog over several directories (storePathCommitLog "a,b" and
readOnlyCommitLogStorePaths, RocketMQ's MultiPathMappedFileQueue): read commands and verify take
the directories from --broker-config or --commitlog-dirs; repairs refuse such a store.

No reference store has this layout: it is forged through mqtool's writer
(:func:`mqtool.forge.multipath.make_multipath_store`, file n in the (n % count)-th sorted
directory, the oldest file moved to a read-only directory), whose summary is the expectation.
"""
from __future__ import annotations

import json

import pytest

from conftest import run_mqtool, tree_digests

from mqtool.forge.multipath import make_multipath_store


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    base = tmp_path_factory.mktemp("multipath")
    summary = make_multipath_store(base / "store", [base / "disk2", base / "disk1"],
                                   base / "readonly")
    return base, summary


def test_files_lie_where_the_broker_puts_them(spread):
    base, summary = spread
    size = summary["file_size"]
    names = {name: d for d, files in summary["files"].items() for name in files}
    assert len(names) == summary["end_offset"] // size + 1
    for name, directory in names.items():
        n = int(name) // size
        if name in summary["readonly_files"]:
            assert directory.endswith("readonly")
        else:   # sorted writable dirs: disk1, disk2
            assert directory.endswith(("disk1", "disk2")[n % 2])


def test_verify_and_dump_read_every_directory(spread):
    base, summary = spread
    config = summary["config"]
    proc = run_mqtool("verify", "--json", "--broker-config", config, base / "store")
    assert proc.returncode == 0, proc.stdout[-1500:]
    report = json.loads(proc.stdout)
    assert report["summary"]["errors"] == 0
    assert report["recovery"]["process_offset"] == summary["end_offset"]
    dirs = ",".join(str(base / d) for d in ("readonly", "disk1", "disk2"))
    proc = run_mqtool("dump", "--json", "--body", "none", "--commitlog-dirs", dirs,
                      base / "store")
    messages = [d for d in map(json.loads, proc.stdout.splitlines())
                if d["record_type"] == "commitlog/message"]
    assert [m["commitlog_offset"] for m in messages] == summary["offsets"]
    assert [m["uniq_key"] for m in messages] == summary["uniq_keys"]


def test_without_the_directories_the_passport_says_why(spread):
    base, _summary = spread
    proc = run_mqtool("info", "--json", base / "store")
    problems = json.loads(proc.stdout)["passport"]["inconsistencies"]
    assert any("--broker-config" in p for p in problems)


def test_missing_directory_is_one_line(spread):
    base, _summary = spread
    proc = run_mqtool("verify", "--commitlog-dirs", f"{base / 'disk1'},{base / 'gone'}",
                      base / "store")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "gone" in proc.stderr


def test_repairs_refuse_and_change_nothing(spread):
    base, summary = spread
    before = tree_digests(base)
    for command in ("recover", "truncate"):
        proc = run_mqtool(command, "--broker-config", summary["config"], base / "store")
        assert proc.returncode == 2, proc.stderr
        assert "refused" in proc.stderr and "nothing was changed" in proc.stderr
    assert tree_digests(base) == before


def test_a_new_user_forges_and_reads_the_layout(tmp_path):
    proc = run_mqtool("fixture", "layout", "multi-path", "lay", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    proc = run_mqtool("info", "--json", "--broker-config", "lay/broker.conf", "lay/store",
                      cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    commitlog = json.loads(proc.stdout)["commitlog"]
    assert commitlog["end_of_data"] == summary["end_offset"]
