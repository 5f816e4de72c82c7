"""Queue readers work a bounded chunk of units at a time (issue 12 item 3): where a chunk ends
must not change any result. Each check runs with one chunk per file (the default holds a whole
small file) and with chunks of a few units, so every rule that looks at neighbouring units (the
lead of pre-blank units, the last valid unit, the previous unit's offset, the first invalid
unit, the cut of truncateDirtyLogicFiles) meets chunk boundaries; the stores are broker-written
ones and copies whose queue files were damaged on purpose."""
from __future__ import annotations

import dataclasses
import json
import random
import shutil
import struct
from pathlib import Path

import pytest

from conftest import FIXTURE_STORE, SHARED_STORES
from mqtool import consumers, mapping
from mqtool.query import queues as query_queues
from mqtool.recovery import predict_recovery
from mqtool.store import Store
from mqtool.verify.run import verify_store

UNIT = 20
PRE_BLANK = struct.pack(">qiq", 0, 0x7FFFFFFF, 0)


def _damage_queues(root: Path, seed: int) -> None:
    """Holes, swapped (out of order) units, stray pre-blank units, negative offsets and a cut
    file in a few queue files, and consumer offsets inside the queues."""
    rng = random.Random(seed)
    files = sorted(p for p in (root / "consumequeue").rglob("*") if p.is_file())
    for path in rng.sample(files, 8):
        data = bytearray(path.read_bytes())
        count = len(data) // UNIT
        for _ in range(rng.randint(2, 5)):
            i = rng.randrange(max(1, count))
            what = rng.choice(["zero", "swap", "pre_blank", "negative", "cut"])
            if what == "zero":
                data[i * UNIT:(i + 1) * UNIT] = bytes(UNIT)
            elif what == "swap":
                j = rng.randrange(max(1, count))
                a, b = bytes(data[i * UNIT:(i + 1) * UNIT]), bytes(data[j * UNIT:(j + 1) * UNIT])
                data[i * UNIT:(i + 1) * UNIT], data[j * UNIT:(j + 1) * UNIT] = b, a
            elif what == "pre_blank":
                data[i * UNIT:(i + 1) * UNIT] = PRE_BLANK
            elif what == "negative":
                data[i * UNIT:i * UNIT + 8] = struct.pack(">q", -5)
            else:
                del data[i * UNIT + rng.randrange(UNIT):]
                count = len(data) // UNIT
        path.write_bytes(bytes(data))
    table: dict[str, dict[str, int]] = {}
    for queue_dir in sorted((root / "consumequeue").glob("*/*")):
        table.setdefault(f"{queue_dir.parent.name}@G", {})[queue_dir.name] = rng.randrange(300)
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": table}))
    if seed % 2:
        (root / "abort").write_text("")


def _stores(tmp_path: Path) -> list[Path]:
    stores = [FIXTURE_STORE / "store"]
    for seed in range(3):
        dest = tmp_path / f"damaged-{seed}"
        shutil.copytree(FIXTURE_STORE / "store", dest)
        _damage_queues(dest, seed)
        stores.append(dest)
    for name in ("clean-small-damaged", "crash-small", "v5-batchcq-crash"):
        if (SHARED_STORES / name / "store").is_dir():
            stores.append(SHARED_STORES / name / "store")
    return stores


def _everything(root: Path) -> str:
    """What verify, the recovery prediction, the consumer report and queue lookups say."""
    store = Store(root)
    plan = predict_recovery(store)
    out = {
        "verify": [f.to_dict() for f in verify_store(store, workers=1).findings],
        "plan": plan.to_dict(),
        "consumers": dataclasses.asdict(consumers.consumer_report(store, plan)),
        "consumers_now": dataclasses.asdict(consumers.consumer_report(store, None)),
        "lookups": [],
    }
    for queue in store.consume_queues + store.batch_consume_queues:
        for ask in (lambda o: query_queues.query_queue_offset(store, queue.topic,
                                                                queue.queue_id, o),
                    lambda t: query_queues.query_queue_time(store, queue.topic,
                                                            queue.queue_id, t)):
            for value in (0, 7, 150, 299, 300, 301, 599, 1795564802300):
                try:
                    found = ask(value)
                    out["lookups"].append([found.details, found.notes])
                except Exception as err:     # NotFound / QueryError: their message is the answer
                    out["lookups"].append([type(err).__name__, str(err)])
    return json.dumps(out, sort_keys=True, default=str)


def test_chunk_boundaries_change_no_result(tmp_path, monkeypatch):
    stores = _stores(tmp_path)
    whole = [_everything(root) for root in stores]
    assert '"CQ_DANGLING"' in "".join(whole) and '"CQ_MISMATCH"' in "".join(whole)
    for chunk in (1, 7):
        monkeypatch.setattr(mapping, "QUEUE_CHUNK_UNITS", chunk)
        for root, expected in zip(stores, whole):
            assert _everything(root) == expected, (root, chunk)


def test_iter_units_covers_the_written_units_without_gaps(tmp_path):
    path = tmp_path / "00000000000000000000"
    unit = struct.pack(">qiq", 4096, 187, 2)
    with open(path, "wb") as fh:
        fh.write(unit * 3)
        fh.seek(1000 * UNIT)          # a hole of 997 units, then two units and a trailing hole
        fh.write(unit * 2)
        fh.truncate(5000 * UNIT)
    chunks = list(mapping.iter_units(path, mapping_dtype(), chunk_units=64))
    # up to the written end (the file system's block holding the last units), not the size
    total = sum(len(units) for _, units in chunks)
    assert 1002 <= total < 5000
    assert [first for first, _ in chunks] == list(range(0, total, 64))
    assert max(len(units) for _, units in chunks) == 64
    sizes = [int(s) for _, units in chunks for s in units["size"]]
    assert sizes[:3] == [187] * 3 and sizes[1000:1002] == [187] * 2
    assert not any(sizes[3:1000]) and not any(sizes[1002:])
    assert sum(len(u) for _, u in mapping.iter_units(path, mapping_dtype(), 500)) == 500


def mapping_dtype():
    from mqtool.codec import CQ_DTYPE
    return CQ_DTYPE


def _resize_queue_files(root: Path, keep: int, size: int) -> list[Path]:
    """Keep ``keep`` queue files (of TopicTest) and make them ``size`` bytes."""
    files = sorted(p for p in (root / "consumequeue").rglob("*") if p.is_file())
    kept = [p for p in files if p.parent.parent.name == "TopicTest"][:keep]
    for path in files:
        if path not in kept:
            path.unlink()
    for path in kept:
        with open(path, "r+b") as fh:
            fh.truncate(size)
    return kept


@pytest.mark.parametrize("keep, size, trusted", [
    (1, 12_000_000, False),        # one oversized file: its size is not the geometry
    (2, 12_000_000, True),         # two files agree on a bigger, mappable geometry
    (2, 12_000_010, False),        # not whole units: no broker maps it
    (1, 4_000, True),              # up to the default a lone file's size is taken as it is
])
def test_which_queue_file_sizes_make_the_geometry(store_copy, keep, size, trusted):
    kept = _resize_queue_files(store_copy, keep, size)
    store = Store(store_copy)
    expected = size // UNIT if trusted else 300_000
    assert store.cq_units_per_file == expected
    assert store.inferred_cq_units_per_file == (expected if trusted else None)
    report = verify_store(store, quick=True, workers=1)
    rel = {store.relative(p) for p in kept}
    sizes = [f for f in report.findings if f.code == "CQ_FILE_SIZE" and f.file in rel]
    if trusted:
        assert not sizes
    else:
        assert len(sizes) == keep
        assert all("the broker's default 6000000" in f.message for f in sizes)
