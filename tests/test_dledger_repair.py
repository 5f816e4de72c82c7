"""`mqtool recover` on DLedger-mode stores leaves what the real broker's next start leaves.

On the three reference stores the result must equal the broker's recovered.tar.gz byte for byte
(the DLedger checkpoint/currterm and their .bak files, the abort file gone, the IndexFile the
crash's abnormal start deletes gone and not rebuilt), a second run finds nothing to do, and undo
puts the store back byte for byte. On damaged copies: data files past the end deleted,
ConsumeQueue units past the end removed, disagreeing DLedger index units rewritten; and where the
broker would exit instead of starting, recover refuses and changes nothing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import DLEDGER_STORES, sparse_copytree, tree_digests
from mqtool.formats import dledger as dl_fmt
from mqtool.store import Store
from test_dledger_recovery import entries, in_file, poke


@pytest.mark.parametrize("name", DLEDGER_STORES)
def test_recover_equals_the_brokers_end_state_and_undo_puts_it_back(name, dledger_stores,
                                                                    unpack_shared, tmp_path,
                                                                    mqtool):
    store = tmp_path / "store"
    sparse_copytree(dledger_stores[name], store)
    original = tree_digests(store)
    proc = mqtool("recover", "--json", store)
    assert proc.returncode == (1 if name == "dledger-crash" else 0), proc.stderr
    result = json.loads(proc.stdout)
    assert tree_digests(store) == tree_digests(unpack_shared(name, "recovered.tar.gz"))
    again = mqtool("recover", store)
    assert again.returncode == 0 and "nothing to do" in again.stderr
    proc = mqtool("undo", result["backup"])
    assert proc.returncode == 0, proc.stderr
    assert tree_digests(store) == original


def test_dry_run_changes_nothing(dledger_stores, tmp_path, mqtool):
    store = tmp_path / "store"
    sparse_copytree(dledger_stores["dledger-crash"], store)
    before = tree_digests(store)
    proc = mqtool("recover", "--dry-run", store)
    assert proc.returncode == 1 and "index/20261124234339309" in proc.stdout
    assert tree_digests(store) == before and not (store / ".mqtool-backup").exists()


_SOURCES: dict[str, Path] = {}


def dledger_source() -> Path:
    """The unpacked dledger-clean store clean_copy copies."""
    return _SOURCES["dledger-clean"]


@pytest.fixture
def clean_copy(dledger_stores, tmp_path) -> Path:
    _SOURCES["dledger-clean"] = dledger_stores["dledger-clean"]
    dest = tmp_path / "store"
    sparse_copytree(dledger_stores["dledger-clean"], dest)
    return dest


def test_a_bad_entry_one_file_back_cuts_the_log_there(clean_copy, mqtool):
    victim = in_file(entries(), 3145728)[-5]
    poke(clean_copy, victim, 8, (victim["index"] + 2).to_bytes(8, "big"))
    data_files = sorted(p.name for p in (clean_copy / "dledger-n0" / "data").iterdir())
    proc = mqtool("recover", "--json", clean_copy)
    assert proc.returncode == 1, proc.stderr      # messages and queue units are lost
    assert sorted(p.name for p in (clean_copy / "dledger-n0" / "data").iterdir()) == \
        data_files[:-1]
    store = Store(clean_copy)
    for queue in store.consume_queues:
        for seg in queue.segments:
            data = seg.path.read_bytes()
            for at in range(0, len(data), 20):
                offset = int.from_bytes(data[at:at + 8], "big")
                assert offset < victim["pos"], (queue.key, at, offset)
    last = victim["index"] - 1
    text = (clean_copy / "dledger-n0" / "checkpoint").read_text()
    assert text == f"committedIndex={last}\nendIndex={last}\n"
    # the kept bytes are the broker's: nothing past the end of the log is erased in the data
    assert (clean_copy / "dledger-n0" / "data" / data_files[-2]).stat().st_size == 1 << 20
    verify = json.loads(mqtool("verify", "--json", clean_copy).stdout)
    assert verify["recovery"]["process_offset"] == victim["pos"]
    assert "RECOVERY_TRUNCATES" not in {f["code"] for f in verify["findings"]}


def test_disagreeing_index_units_are_rewritten(clean_copy, mqtool):
    victim = entries()[1990]
    index_file = clean_copy / "dledger-n0" / "index" / "00000000000000000000"
    at = victim["index"] * dl_fmt.INDEX_UNIT_SIZE
    original = index_file.read_bytes()[at:at + 32]
    poke(clean_copy, {"entryFile": "dledger-n0/index/00000000000000000000",
                      "entryFilePos": at}, 4, (123).to_bytes(8, "big"))
    proc = mqtool("recover", clean_copy)
    assert proc.returncode == 0, proc.stderr
    with open(index_file, "rb") as fh:
        fh.seek(at)
        assert fh.read(32) == original
    assert index_file.stat().st_size == dl_fmt.INDEX_FILE_SIZE


def test_recover_refuses_where_the_broker_would_exit(clean_copy, mqtool):
    victim = in_file(entries(), 2097152)[100]
    poke(clean_copy, victim, dl_fmt.POS_FIELD_OFFSET, (1).to_bytes(8, "big"))
    before = tree_digests(clean_copy)
    proc = mqtool("recover", clean_copy)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "processOffset is too small" in proc.stderr and "refuses" in proc.stderr
    assert tree_digests(clean_copy) == before


def test_rebuild_index_restores_what_the_crash_recovery_lost(dledger_stores, tmp_path, mqtool):
    """Beyond the broker: after the crash's recovery deleted the newer IndexFile, rebuild-index
    regenerates it from the records inside the DLedger entries, with the very bytes the broker
    had written (only its name differs: the broker names a file by the clock when it creates it,
    mqtool by the first record's store time), and key lookups find those messages again."""
    from mqtool import query as q

    original = dledger_stores["dledger-crash"]
    store = tmp_path / "store"
    sparse_copytree(original, store)
    assert mqtool("recover", store).returncode == 1
    lost = original / "index" / "20261124234339309"
    assert not (store / "index" / lost.name).exists()
    key = "hotkey-0"
    before = q.broker_query_message(Store(store), "TopicTest", key)
    proc = mqtool("rebuild-index", store)
    assert proc.returncode == 0, proc.stderr
    rebuilt = sorted((store / "index").iterdir())
    assert [p.read_bytes() for p in rebuilt] == \
        [p.read_bytes() for p in sorted((original / "index").iterdir())]
    after = q.broker_query_message(Store(store), "TopicTest", key)
    assert len(after) > len(before)
    assert mqtool("rebuild-index", store).stderr.strip().endswith("nothing to do")


def test_rebuild_queues_regenerates_the_brokers_consume_queues(dledger_stores, tmp_path, mqtool):
    original = dledger_stores["dledger-clean"]
    store = tmp_path / "store"
    sparse_copytree(original, store)
    for path in (store / "consumequeue" / "TopicTest").rglob("*"):
        if path.is_file():
            path.unlink()
    proc = mqtool("rebuild-queues", store)
    assert proc.returncode == 0, proc.stderr
    assert tree_digests(store / "consumequeue") == tree_digests(original / "consumequeue")


def test_recover_out_keeps_the_dledger_index_sparse(dledger_stores, unpack_shared, tmp_path,
                                                    mqtool):
    """--out repairs a copy; the 160 MiB DLedger index (64 KB of units) stays a sparse file."""
    store = tmp_path / "store"
    sparse_copytree(dledger_stores["dledger-crash"], store)
    before = tree_digests(store)
    out = tmp_path / "out"
    proc = mqtool("recover", store, "--out", out)
    assert proc.returncode == 1, proc.stderr
    assert tree_digests(store) == before
    assert tree_digests(out) == tree_digests(unpack_shared("dledger-crash", "recovered.tar.gz"))
    index_file = out / "dledger-n0" / "index" / f"{0:020d}"
    assert index_file.stat().st_size == dl_fmt.INDEX_FILE_SIZE
    assert index_file.stat().st_blocks * 512 < 4 << 20


# --- truncate: the ledger cut at an entry ---------------------------------------------------------

def test_truncate_cuts_the_ledger_at_an_entry_and_undo_puts_it_back(clean_copy, mqtool):
    """Cut before entry 1500 (named by its record's offset, as dump and query show it): the
    entries from there on are gone as DLedger's recovery would then find them - the data file
    after the cut deleted, the cut file's bytes past the cut zero (else the next start's walk
    would accept the old entries again), their index units erased, endIndex 1499, no
    ConsumeQueue unit or index entry at or past the cut."""
    all_entries = entries()
    victim = all_entries[1500]
    cut = victim["pos"]
    before = tree_digests(clean_copy)
    proc = mqtool("truncate", "--dry-run", clean_copy, "--to", cut + dl_fmt.ENTRY_HEADER_SIZE)
    assert proc.returncode == 1, proc.stderr
    assert tree_digests(clean_copy) == before
    proc = mqtool("truncate", "--json", clean_copy, "--to", cut + dl_fmt.ENTRY_HEADER_SIZE)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["summary"]["cut"] == cut
    data = clean_copy / "dledger-n0" / "data"
    cut_file = victim["entryFile"].rsplit("/", 1)[1]
    assert sorted(p.name for p in data.iterdir()) == sorted(
        {e["entryFile"].rsplit("/", 1)[1] for e in all_entries if e["pos"] < cut} | {cut_file})
    raw = (data / cut_file).read_bytes()
    assert raw[:victim["entryFilePos"]] == (
        Path(dledger_source()) / victim["entryFile"]).read_bytes()[:victim["entryFilePos"]]
    assert not any(raw[victim["entryFilePos"]:])
    index = (clean_copy / "dledger-n0" / "index" / f"{0:020d}").read_bytes()[:64_000]
    assert not any(index[1500 * 32:]) and index[1499 * 32:1500 * 32] != bytes(32)
    assert (clean_copy / "dledger-n0" / "checkpoint").read_text() == \
        "committedIndex=1499\nendIndex=1499\n"
    store = Store(clean_copy)
    for queue in store.consume_queues:
        for seg in queue.segments:
            units = seg.path.read_bytes()
            for at in range(0, len(units), 20):
                offset, size = int.from_bytes(units[at:at + 8], "big"), \
                    int.from_bytes(units[at + 8:at + 12], "big")
                if size:
                    assert offset < cut
    report = json.loads(mqtool("verify", "--json", clean_copy).stdout)
    assert [f for f in report["findings"] if f["severity"] == "error"] == []
    assert report["recovery"]["process_offset"] == cut
    assert mqtool("truncate", "--json", clean_copy).returncode == 0   # nothing left to cut
    proc = mqtool("undo", result["backup"])
    assert proc.returncode == 0, proc.stderr
    assert tree_digests(clean_copy) == before


def test_truncate_refuses_to_cut_inside_an_entry(clean_copy, mqtool):
    victim = entries()[700]
    before = tree_digests(clean_copy)
    proc = mqtool("truncate", clean_copy, "--to", victim["pos"] + 10)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert f"inside the DLedger entry at {victim['pos']:,}" in proc.stderr
    assert tree_digests(clean_copy) == before


def test_truncate_is_how_far_to_cut_where_recover_refuses(clean_copy, mqtool):
    """A bad entry too far back: the broker would exit and recover refuses; truncate (to the
    end of the log DLedger's walk finds) cuts there, and the broker can start again."""
    victim = in_file(entries(), 2097152)[100]
    poke(clean_copy, victim, dl_fmt.POS_FIELD_OFFSET, (1).to_bytes(8, "big"))
    assert mqtool("recover", clean_copy).returncode == 2
    proc = mqtool("truncate", "--json", clean_copy)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["summary"]["cut"] == victim["pos"]
    report = json.loads(mqtool("verify", "--json", clean_copy).stdout)
    assert report["recovery"]["refuses_to_start"] == []
    assert report["recovery"]["process_offset"] == victim["pos"]
    assert (clean_copy / "dledger-n0" / "checkpoint").read_text() == \
        f"committedIndex={victim['index'] - 1}\nendIndex={victim['index'] - 1}\n"
