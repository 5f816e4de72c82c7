"""Sparse files read only where they hold data: the helpers that skip holes give the answers a
full read gives (a hole reads as zeros, written zeros are zeros too)."""
from __future__ import annotations

import os
import random

from mqtool.queue_recovery import CONSUME_QUEUE, read_cq_units
from mqtool.repair.files import data_end, diff_ranges
from mqtool.repair.transaction import sparse_copy
from mqtool.store import data_extents

SIZE = 6_000_000


def _write(path, pieces, sparse: bool) -> None:
    """A SIZE-byte file with ``pieces`` (offset, bytes); zeros elsewhere, as holes or written."""
    with open(path, "wb") as fh:
        if not sparse:
            fh.write(bytes(SIZE))
        for offset, data in pieces:
            fh.seek(offset)
            fh.write(data)
        fh.truncate(SIZE)


def _full_diff(a: bytes, b: bytes) -> list[list[int]]:
    ranges: list[list[int]] = []
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            if ranges and i - ranges[-1][1] <= 16:
                ranges[-1][1] = i + 1
            else:
                ranges.append([i, i + 1])
    return ranges


def test_hole_skipping_helpers_equal_full_reads(tmp_path):
    rng = random.Random(5)
    for trial in range(6):
        pieces_a = [(rng.randrange(SIZE - 4096), rng.randbytes(rng.randrange(1, 3000)))
                    for _ in range(rng.randrange(0, 5))]
        pieces_b = pieces_a[:2] + [(rng.randrange(SIZE - 4096), rng.randbytes(20))
                                   for _ in range(rng.randrange(0, 4))]
        for sparse_a, sparse_b in ((True, True), (True, False), (False, True)):
            a, b = tmp_path / f"a{trial}", tmp_path / f"b{trial}"
            _write(a, pieces_a, sparse_a)
            _write(b, pieces_b, sparse_b)
            raw_a, raw_b = a.read_bytes(), b.read_bytes()
            assert diff_ranges(a, b) == _full_diff(raw_a, raw_b)
            stripped = raw_a.rstrip(b"\0")
            for start in (0, 1000, SIZE // 2):
                assert data_end(a, start) == max(start, len(stripped))
            units = read_cq_units(a, 300_000, CONSUME_QUEUE)
            assert units.tobytes() == raw_a[:len(units) * 20]
            copy = tmp_path / f"copy{trial}"
            sparse_copy(a, copy)
            assert copy.read_bytes() == raw_a
            with open(a, "rb") as fh:
                extents = data_extents(fh, SIZE)
            covered = bytearray(SIZE)
            for lo, hi in extents:
                covered[lo:hi] = raw_a[lo:hi]
            assert bytes(covered) == raw_a
            os.unlink(copy)


def test_diff_ranges_joins_gaps_of_sixteen_bytes_across_chunks(tmp_path):
    """Differing bytes 16 equal bytes apart make one range, 17 apart two, also where they lie in
    different 1 MiB read chunks; an IndexFile's rewrite gives tens of thousands of ranges."""
    rng = random.Random(11)
    size = (5 << 19) + 123                 # 2.5 MiB: three read chunks
    old = rng.randbytes(size)
    new = bytearray(old)
    pos = 17
    while pos < size:
        new[pos] ^= 0xFF
        pos += rng.choice((1, 15, 16, 17, 18, 40, 3000))
    for edge in (1 << 20, 2 << 20):        # runs ending and starting at a chunk boundary
        for at in (edge - 9, edge - 1, edge, edge + 7):
            new[at] ^= 0x0F
    a, b = tmp_path / "old", tmp_path / "new"
    a.write_bytes(old)
    b.write_bytes(bytes(new))
    expected = _full_diff(old, bytes(new))
    assert len(expected) > 1000
    assert diff_ranges(a, b) == expected


def test_save_range_skips_holes_only_when_the_digest_is_known(tmp_path):
    """backup.save_range reads only data extents when it need not hash: the saved segments
    still rebuild the file byte for byte."""
    import hashlib
    from mqtool import backup
    rng = random.Random(9)
    path = tmp_path / "f"
    _write(path, [(0, rng.randbytes(5000)), (3_000_000, rng.randbytes(70_000)),
                  (SIZE - 10, rng.randbytes(10))], sparse=True)
    raw = path.read_bytes()
    for known in (None, hashlib.sha256(raw).hexdigest()):
        with open(tmp_path / "blob", "w+b") as blob:
            blob.write(b"x" * 7)   # saved data does not start at the blob's start
            segments, digest = backup.save_range(path, 0, SIZE, blob, "blob", known)
        assert digest == hashlib.sha256(raw).hexdigest()
        blob_bytes = (tmp_path / "blob").read_bytes()
        rebuilt = bytearray(SIZE)
        for seg in segments:
            rebuilt[seg["offset"]:seg["offset"] + seg["length"]] = \
                blob_bytes[seg["blob_offset"]:seg["blob_offset"] + seg["length"]]
        assert bytes(rebuilt) == raw


def test_change_backup_undoes_a_replaced_file_exactly(tmp_path):
    """backup.save_changes keeps only the old bytes where a new file differs (holes or written
    zeros alike), its digests depend on the content alone, and restore_changes turns the new
    file back into the old one byte for byte - also when the sizes differ."""
    import hashlib
    from mqtool import backup
    from test_repair import content_digest
    rng = random.Random(13)
    for trial in range(8):
        pieces = [(rng.randrange(SIZE - 80_000), rng.randbytes(rng.randrange(1, 70_000)))
                  for _ in range(rng.randrange(1, 6))]
        changed = pieces[:rng.randrange(0, len(pieces) + 1)] + [
            (rng.randrange(SIZE - 4096), rng.randbytes(rng.randrange(1, 3000)))
            for _ in range(rng.randrange(0, 4))]
        old, new = tmp_path / f"old{trial}", tmp_path / f"new{trial}"
        _write(old, pieces, sparse=trial % 2 == 0)
        _write(new, changed, sparse=trial % 3 != 0)
        if trial == 5:
            os.truncate(new, SIZE - 123_457)
        if trial == 6:
            os.truncate(new, SIZE + 70_001)
        raw_old, raw_new = old.read_bytes(), new.read_bytes()
        with open(tmp_path / "blob", "w+b") as blob:
            blob.write(b"x" * 3)
            record = backup.save_changes(old, new, blob, "blob")
        assert record["old_digest"] == content_digest(raw_old) == backup.content_digest(old)
        assert record["new_digest"] == content_digest(raw_new) == backup.content_digest(new)
        saved = sum(seg["length"] for seg in record["saved"])
        assert saved <= sum(hi - lo for lo, hi in record["changed"])
        if raw_old == raw_new:
            assert record["changed"] == [] and record["old_digest"] == record["new_digest"]
        else:
            assert record["old_digest"] != record["new_digest"]
        backup.restore_changes(new, len(raw_old), record["changed"], record["saved"], tmp_path)
        assert hashlib.sha256(new.read_bytes()).digest() == hashlib.sha256(raw_old).digest()


def test_in_place_content_digests_equal_the_digests_of_the_bytes(tmp_path):
    from mqtool import backup
    from test_repair import content_digest
    rng = random.Random(17)
    path = tmp_path / "f"
    _write(path, [(0, rng.randbytes(5000)), (2_500_000, rng.randbytes(1_500_000))], sparse=True)
    raw = path.read_bytes()
    for start, end, new_size in ((0, 0, SIZE), (2_600_000, SIZE, 2_700_000),
                                 (10, 4000, SIZE + 5), (3_000_000, 3_000_100, SIZE),
                                 (0, 0, SIZE + 3_000_000), (5_999_000, SIZE, SIZE + 100)):
        after = bytearray(raw)
        after[start:end] = bytes(len(after[start:end]))
        del after[new_size:]
        after.extend(bytes(new_size - len(after)))
        assert backup.in_place_content_digests(path, start, end, new_size) == (
            content_digest(raw), content_digest(bytes(after)))


def test_recover_continuing_a_sparse_index_file_keeps_it_sparse(tmp_path):
    """The broker's IndexFile is a mapping of the whole file holding a few MB; recover that
    continues it leaves the same bytes as when it continues a dense copy of it, and leaves it
    sparse instead of writing (and syncing) every zero of the 40 MB."""
    import shutil
    import subprocess
    from mqtool import forge
    from mqtool.repair import run_repair

    base = tmp_path / "base"
    forge.make_store(base, forge.ForgeOptions(messages=3000, seed=3, crash=True,
                                              commitlog_file_size=4 << 20,
                                              index_slots=500_000, index_entries=2_000_000))
    # a normal start with the index behind the CommitLog: the last IndexFile is continued
    (base / "abort").unlink()
    index_files = sorted((base / "index").iterdir())
    stores = {}
    for kind in ("sparse", "dense"):
        store = tmp_path / kind
        shutil.copytree(base, store)
        for path in sorted((store / "index").iterdir()):
            if kind == "sparse":
                subprocess.run(["cp", "--sparse=always", str(path), str(path) + ".tmp"],
                               check=True)
                os.replace(str(path) + ".tmp", path)
            else:
                path.write_bytes(path.read_bytes())     # every block written
        result = run_repair("recover", store)
        assert result.status == "repaired"
        stores[kind] = store
    for original in index_files:
        sparse = stores["sparse"] / "index" / original.name
        dense = stores["dense"] / "index" / original.name
        assert sparse.read_bytes() == dense.read_bytes()
        size = sparse.stat().st_size
        assert size >= 40_000_000
        assert sparse.stat().st_blocks * 512 < size // 4
