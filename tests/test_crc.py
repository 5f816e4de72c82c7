"""Every CRC-32 implementation mqtool may use computes zlib's CRC-32 (the reference definition in
formats/codecs.py), on random buffers and on the bodies and records real brokers wrote."""
from __future__ import annotations

import os
import random
import zlib

import pytest

from conftest import FIXTURE_STORE, SHARED_STORES, shared_store_names
from mqtool import crc
from mqtool.formats import codecs
from mqtool.scan import MessageRecord, scan_buffer
from mqtool.store import MappedFile, Store

IMPLEMENTATIONS = crc.implementations()


def test_the_fast_one_is_chosen_and_zlib_is_always_there():
    assert "zlib" in IMPLEMENTATIONS
    assert crc.NAME in IMPLEMENTATIONS
    # isal is a default dependency: an installed mqtool has it, and uses it unless told not to
    assert "isal" in IMPLEMENTATIONS
    assert crc.NAME == (os.environ.get("MQTOOL_CRC", "").strip().lower() or "isal")


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_random_buffers(name):
    fn = IMPLEMENTATIONS[name]
    rng = random.Random(13)
    blob = rng.randbytes(1 << 20)
    view = memoryview(blob)
    lengths = list(range(0, 70)) + [rng.randrange(70, 70_000) for _ in range(300)] + [len(blob)]
    for length in lengths:
        start = rng.randrange(0, len(blob) - length + 1)
        part = view[start:start + length]           # unaligned slices, as the scanner passes
        assert fn(part) == zlib.crc32(part), (name, start, length)
        assert fn(bytes(part)) == zlib.crc32(part)
    assert fn(b"") == 0
    # the masked value the broker stores
    assert fn(blob) & codecs.CRC32_MASK == codecs.body_crc(blob)


def _real_stores():
    stores = [FIXTURE_STORE / "store"] if (FIXTURE_STORE / "store").is_dir() else []
    stores += [SHARED_STORES / n / "store" for n in shared_store_names()]
    return [s for s in stores if s.is_dir()]


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_real_bodies_and_records(name):
    fn = IMPLEMENTATIONS[name]
    stores = _real_stores()
    if not stores:
        pytest.skip("no reference store here")
    bodies = 0
    for root in stores:
        for segment in Store(root).commitlog.segments:
            with MappedFile(segment.path) as mapped:
                buf = mapped.data
                view = memoryview(buf)
                for event in scan_buffer(buf, segment.base_offset, check_crc=False, resync=True):
                    if type(event) is not MessageRecord:
                        continue
                    start = event.body_position - segment.base_offset
                    body = view[start:start + event.body_length]
                    assert fn(body) == zlib.crc32(body)
                    if event.body_length > 0:
                        # every body a broker wrote undamaged matches the CRC it stored
                        assert (fn(body) & codecs.CRC32_MASK == event.body_crc) == \
                            (codecs.body_crc(body) == event.body_crc)
                    pos = event.offset - segment.base_offset
                    record = view[pos:pos + event.total_size]
                    assert fn(record) == zlib.crc32(record)
                    bodies += 1
                view.release()
    assert bodies > 1000


def test_crc32_of_many_ranges_equals_zlib_slice_by_slice():
    """crc.crc32_ranges (the scanner's body CRCs, diff's record CRCs) gives zlib.crc32 of each
    range, empty ones and ranges of an mmap included."""
    import mmap
    import random
    import zlib

    import numpy as np
    from mqtool.crc import crc32_ranges

    rng = random.Random(3)
    data = rng.randbytes(1 << 16)
    starts = np.array(sorted(rng.randrange(len(data)) for _ in range(200)), dtype=np.int64)
    ends = np.minimum(starts + np.array([rng.choice((0, 1, 17, 1400, 9000)) for _ in starts]),
                      len(data))
    expected = [zlib.crc32(data[s:e]) for s, e in zip(starts.tolist(), ends.tolist())]
    assert crc32_ranges(data, starts, ends).tolist() == expected
    with mmap.mmap(-1, len(data)) as mapped:
        mapped.write(data)
        assert crc32_ranges(mapped, starts, ends).tolist() == expected
