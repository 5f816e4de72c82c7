"""Mutating commands refuse a store whose layout they do not fully understand.

A DLedger-mode store (no commitlog/, messages inside dledger-<id>/data/) looked to older mqtool
like a plain store that lost its CommitLog, and `recover` "repaired" it by deleting every
ConsumeQueue. Every mutating command now refuses such a store (and a store holding folders of
data it does not know) before it reads or plans anything: exit 2, one line on stderr, not one byte
changed. Every mutating command knows pure DLedger stores (DLedger's own recovery, see
test_dledger_repair.py), and every command refuses a store upgraded from a plain CommitLog to
DLedger. The plain
stores the real brokers wrote (4.x and 5.x, with timerlog/, compaction/, batchconsumequeue/,
abort.bak, config/ ...) stay accepted.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import DLEDGER_STORES, FIXTURE_STORE, SHARED_STORES, run_mqtool
from mqtool.forge import ForgeOptions, make_store
from mqtool.store import unexplained_layout

# how each layout is named in the one-line refusal
PLAIN_LAYOUTS = {
    "unknown-data-folder": "rocksdbstore/ (an unknown folder that holds data)",
    "queues-without-commitlog": "consumequeue/ and index/ with data but no commitlog/",
    "dledger-beside-commitlog": "dledger-n0/ (a DLedger-mode CommitLog)",
    "compaction-topic-data": "compaction/compactionLog/ (5.x compaction-topic data)",
}
DLEDGER_PHRASE = "dledger-n0/ (a DLedger-mode CommitLog)"


def make_plain_layout(kind: str, dest: Path) -> Path:
    """A copy of the broker-written fixture store changed into one of the PLAIN_LAYOUTS."""
    shutil.copytree(FIXTURE_STORE / "store", dest)
    if kind == "unknown-data-folder":
        (dest / "rocksdbstore" / "metadata").mkdir(parents=True)
        (dest / "rocksdbstore" / "metadata" / "000001.sst").write_bytes(b"\x01" * 64)
    elif kind == "queues-without-commitlog":
        shutil.rmtree(dest / "commitlog")
    elif kind == "dledger-beside-commitlog":
        data = dest / "dledger-n0" / "data"
        data.mkdir(parents=True)
        # an entry header, as the first DLedger start after an upgrade writes one
        (data / "00000000000003145728").write_bytes((1).to_bytes(4, "big") + bytes(60))
    elif kind == "compaction-topic-data":
        log = dest / "compaction" / "compactionLog" / "CompactTopic" / "0"
        log.mkdir(parents=True)
        (log / "00000000000000000000").write_bytes(b"\x02" * 100)
    return dest


def file_states(root: Path, *, digest: bool) -> dict[str, object]:
    """Every folder and file below ``root``: (size, mtime) per file, or its SHA-256."""
    states: dict[str, object] = {}
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root).as_posix()
        states[rel + "/"] = "dir"
        for name in files:
            path = Path(folder) / name
            if digest:
                sha = hashlib.sha256()
                with open(path, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        sha.update(chunk)
                states[f"{rel}/{name}"] = sha.hexdigest()
            else:
                stat = path.stat()
                states[f"{rel}/{name}"] = (stat.st_size, stat.st_mtime_ns)
    return states


@pytest.fixture(scope="module")
def real_backup(tmp_path_factory) -> Path:
    """A backup folder written by a real repair (truncate to 0 on a copy of the fixture store)."""
    work = tmp_path_factory.mktemp("real-backup")
    store = work / "store"
    shutil.copytree(FIXTURE_STORE / "store", store)
    backup = work / "backup"
    proc = run_mqtool("truncate", store, "--to", "0", "--backup-dir", backup)
    assert proc.returncode in (0, 1), proc.stderr
    assert (backup / "manifest.json").is_file()
    return backup


def backup_of(real_backup: Path, store: Path, dest: Path) -> Path:
    """The real backup's manifest, as if the repair had run on ``store`` (an older mqtool did
    run repairs on such stores)."""
    manifest = json.loads((real_backup / "manifest.json").read_text())
    manifest["store"] = str(store.resolve())
    dest.mkdir(parents=True)
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def mutating_commands(store: Path, backup: Path | None, damage_kind: str) -> list[tuple]:
    """Every mutating command; without ``backup`` only those that do not know DLedger stores."""
    knows_dledger = [("recover", store), ("recover", "--dry-run", store),
                     ("recover", store, "--out", store.parent / "recovered-copy"),
                     ("rebuild-index", store), ("rebuild-queues", store), ("undo", backup),
                     ("fixture", "damage", store, "--kind", damage_kind),
                     ("truncate", store, "--to", "0")]
    return knows_dledger if backup is not None else []


def assert_all_refused(store: Path, backup: Path | None, phrase: str, damage_kind: str) -> None:
    before = file_states(store, digest=True)
    stats = file_states(store, digest=False)
    for argv in mutating_commands(store, backup, damage_kind):
        proc = run_mqtool(*argv)
        assert proc.returncode == 2, (argv, proc.returncode, proc.stdout, proc.stderr)
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("mqtool: error: "), (argv, proc.stderr)
        assert "refused" in lines[0] and phrase in lines[0], (argv, lines[0])
        assert proc.stdout == "", argv
        assert file_states(store, digest=False) == stats, argv
        assert not (store.parent / "recovered-copy").exists()
    assert file_states(store, digest=True) == before


DAMAGE_KINDS = ("bit-flip", "delete-file", "stray-file", "torn-tail", "truncate-file",
                "zero-range", "stale-checkpoint")


def test_recover_the_rebuilds_and_undo_know_only_pure_dledger_stores(dledger_stores, tmp_path):
    pure = dledger_stores["dledger-clean"]
    assert unexplained_layout(pure, "recover") == unexplained_layout(pure, "undo") == []
    assert unexplained_layout(pure, "rebuild-index") == []
    assert unexplained_layout(pure, "rebuild-queues") == []
    assert unexplained_layout(pure, "fixture damage") == unexplained_layout(pure, "truncate") == []
    assert unexplained_layout(pure) != []


@pytest.mark.parametrize("kind", sorted(PLAIN_LAYOUTS))
def test_unexplained_plain_layouts_are_refused(kind, real_backup, tmp_path):
    store = make_plain_layout(kind, tmp_path / "work" / "store")
    backup = backup_of(real_backup, store, tmp_path / "backup")
    damage = DAMAGE_KINDS[sorted(PLAIN_LAYOUTS).index(kind) + len(DLEDGER_STORES)]
    assert_all_refused(store, backup, PLAIN_LAYOUTS[kind], damage)


def test_undo_refuses_once_the_store_holds_data_it_does_not_know(real_backup, tmp_path):
    """The genuine case: a real repair, then an unknown data folder appears, then undo."""
    store = Path(json.loads((real_backup / "manifest.json").read_text())["store"])
    backup = tmp_path / "backup"
    shutil.copytree(real_backup, backup)
    stray = store / "tiered" / "segment"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"data")
    try:
        before = file_states(store, digest=True)
        proc = run_mqtool("undo", backup)
        assert proc.returncode == 2 and "tiered/ (an unknown folder that holds data)" in proc.stderr
        assert len(proc.stderr.splitlines()) == 1
        assert file_states(store, digest=True) == before
    finally:
        shutil.rmtree(store / "tiered")


# --- what stays accepted -------------------------------------------------------------------------

def plain_reference_stores() -> list[Path]:
    stores = [FIXTURE_STORE / "store"]
    if SHARED_STORES.is_dir():
        for ref in sorted(SHARED_STORES.iterdir()):
            stores += [ref / part for part in ("store", "recovered") if (ref / part).is_dir()]
    return stores


@pytest.mark.parametrize("store", plain_reference_stores(),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_plain_reference_store_is_explained(store):
    assert unexplained_layout(store) == []


def test_shipped_5x_timer_store_is_explained(unpack_shared):
    store = unpack_shared("v5-timer-crash")
    assert {"timerlog", "timerwheel", "config", "abort.bak"} <= {p.name for p in store.iterdir()}
    assert unexplained_layout(store) == []


@pytest.mark.parametrize("name", DLEDGER_STORES)
def test_broker_recovered_dledger_stores_are_still_dledger(name, unpack_shared):
    assert DLEDGER_PHRASE in unexplained_layout(unpack_shared(name, "recovered.tar.gz"))


def test_forged_5x_store_and_mqtools_own_folders_are_explained(tmp_path):
    store = tmp_path / "store"
    make_store(store, ForgeOptions(messages=60, broker_version=5, crash=True,
                                   batch_cq_topics=("TopicTest",)))
    (store / ".mqtool-backup" / "20260101T000000Z" / "data").mkdir(parents=True)
    (store / ".mqtool-backup" / "20260101T000000Z" / "data" / "1.bin").write_bytes(b"x")
    (store / "my-backups" / "one").mkdir(parents=True)
    (store / "my-backups" / "one" / "manifest.json").write_text("{}")
    (store / "empty-folder" / "sub").mkdir(parents=True)
    (store / "empty-folder" / "sub" / "zero-bytes").write_bytes(b"")
    (store / "notes.txt").write_text("an operator's notes; no broker reads them\n")
    assert unexplained_layout(store) == []


@pytest.mark.parametrize("store", [FIXTURE_STORE / "store", "v5-batchcq-clean", "v5-timer-crash"],
                         ids=str)
def test_plain_stores_are_not_refused_by_the_cli(store, unpack_shared):
    if isinstance(store, str):
        store = SHARED_STORES / store / "store"
        if not store.is_dir():
            store = unpack_shared(store.parent.name)
    proc = run_mqtool("recover", "--dry-run", store)
    assert proc.returncode in (0, 1), proc.stderr
    assert "refused" not in proc.stderr


def test_the_folder_above_a_store_is_refused_and_the_store_named(tmp_path):
    """The usual slip: the folder holding the store is named. Every mutating command refuses
    it (exit 2, one line naming the store it probably meant) and changes nothing."""
    store = tmp_path / "top" / "store"
    shutil.copytree(FIXTURE_STORE / "store", store)
    top = store.parent
    before = file_states(top, digest=True)
    for args in (("recover",), ("truncate", "--to", "0"), ("rebuild-queues",),
                 ("rebuild-index",), ("fixture", "damage", "--kind", "bit-flip")):
        proc = run_mqtool(*args, top)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "not a RocketMQ store" in proc.stderr
        assert f"did you mean {store}?" in proc.stderr
    # a store root that also holds another store below it names that one as its own folder
    (top / "commitlog").mkdir()
    proc = run_mqtool("recover", top)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert f"store/ (a store root of its own: did you mean {store}?)" in proc.stderr
    (top / "commitlog").rmdir()
    assert file_states(top, digest=True) == before


# --- RocksDB-backed 5.x stores -------------------------------------------------------------------
# the broker-written RocksDB stores (../shared, tarballs) and the phrase each refusal names
ROCKS_STORES = {
    "rocks-cq-crash": "consumequeue/ (a RocksDB ConsumeQueue (storeType=defaultRocksDB): CURRENT "
                      "names MANIFEST-",
    "rocks-cq-restart-crash": "consumequeue/ (a RocksDB ConsumeQueue (storeType=defaultRocksDB): "
                              "CURRENT names MANIFEST-",
    "rocks-consumer-offsets": "config/consumerOffsets/ (RocksDB metadata: consumer offsets "
                              "(RocksDBConsumerOffsetManager); CURRENT names MANIFEST-",
}


@pytest.mark.parametrize("name", ["rocks-consumer-offsets", "rocks-cq-restart-crash"])
def test_rocksdb_stores_are_refused_by_every_mutating_command(name, real_backup, unpack_shared,
                                                              tmp_path):
    """recover and undo know a store whose queues live in RocksDB (they cut the CommitLog and
    leave RocksDB to the broker: test_rocksdb.py); every other mutating command refuses it, and
    every one refuses RocksDB metadata."""
    store = tmp_path / "work" / "store"
    shutil.copytree(unpack_shared(name), store, symlinks=True)
    backup = backup_of(real_backup, store, tmp_path / "backup")
    if name == "rocks-consumer-offsets":
        assert_all_refused(store, backup, ROCKS_STORES[name], "bit-flip")
        proc = run_mqtool("recover", "--dry-run", store)
        assert "mqtool never writes into a RocksDB database" in proc.stderr
        return
    before = file_states(store, digest=True)
    stats = file_states(store, digest=False)
    for argv in [("rebuild-index", store), ("rebuild-queues", store),
                 ("rebuild-queues", "--dry-run", store), ("truncate", store, "--to", "0"),
                 ("rebuild-queues", store, "--topic", "TopicTest", "--out", tmp_path / "o"),
                 ("fixture", "damage", store, "--kind", "bit-flip")]:
        proc = run_mqtool(*argv)
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and "refused" in lines[0] and ROCKS_STORES[name] in lines[0]
        assert "mqtool never writes into a RocksDB database" in lines[0]
        assert file_states(store, digest=False) == stats, argv
    assert file_states(store, digest=True) == before


def test_every_rocksdb_cq_store_is_refused_but_by_recover_and_undo(unpack_shared):
    """The same decision for rocks-cq-crash, in process (the CLI runs on the other two)."""
    store = unpack_shared("rocks-cq-crash")
    for command in ("rebuild-index", "rebuild-queues", "truncate", "fixture damage"):
        assert unexplained_layout(store, command)[0].startswith(ROCKS_STORES["rocks-cq-crash"])
    assert unexplained_layout(store, "recover") == unexplained_layout(store, "undo") == []


def test_recovered_rocksdb_stores_stay_refused(unpack_shared):
    for name in ("rocks-cq-crash", "rocks-cq-restart-crash"):
        findings = unexplained_layout(unpack_shared(name, "recovered.tar.gz"), "rebuild-index")
        assert findings and "a RocksDB ConsumeQueue" in findings[0]
    findings = unexplained_layout(unpack_shared("rocks-consumer-offsets", "reloaded.tar.gz"))
    assert findings and "config/consumerOffsets/ (RocksDB metadata" in findings[0]


@pytest.mark.parametrize("where", ["consumequeue", "consumequeue_rocksdb"])
def test_a_combine_consume_queue_is_refused(where, unpack_shared, tmp_path):
    """CombineConsumeQueueStore (newest code): file ConsumeQueues, and a RocksDB one in the same
    folder or in consumequeue_rocksdb/ (useSeparateStorePathForRocksdbCQ)."""
    store = tmp_path / "store"
    shutil.copytree(FIXTURE_STORE / "store", store)
    rocks = unpack_shared("rocks-cq-restart-crash") / "consumequeue"
    (store / where).mkdir(exist_ok=True)
    for path in rocks.iterdir():
        shutil.copy2(path, store / where / path.name)
    findings = unexplained_layout(store, "recover")
    assert len(findings) == 1, findings
    assert findings[0].startswith(f"{where}/ (a CombineConsumeQueue: file ConsumeQueues beside a "
                                  "RocksDB one: CURRENT names MANIFEST-000013")
    assert "27 file ConsumeQueues" in findings[0]
    assert_all_refused(store, None, findings[0], "bit-flip")
    proc = run_mqtool("truncate", store, "--to", "0")
    assert proc.returncode == 2 and findings[0] in proc.stderr


def test_the_passport_names_the_rocksdb_databases(unpack_shared):
    from mqtool.passport import store_passport
    from mqtool.store import Store
    passport = store_passport(Store(unpack_shared("rocks-cq-restart-crash")))
    assert passport["family"] == "5.x"
    assert [(p["kind"], p["folder"]) for p in passport["rocksdb"]] == [("rocksdb-cq",
                                                                      "consumequeue/")]
    assert passport["claims"][0]["claim"].startswith("5.2+ RocksDB ConsumeQueue")
    assert "CURRENT names MANIFEST-000013" in passport["claims"][0]["evidence"]
