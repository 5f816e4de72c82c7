"""Random and mutated bytes into every parser: the result is a clean value or an
mqtool.errors.MqtoolError (ParseError, StoreLayoutError, ...), never another exception, never a
hang (examples and per-example time are bounded)."""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings, strategies as st

from conftest import FIXTURE_STORE
from mqtool import scan
from mqtool.config import STORE_CONFIGS, read_store_configs
from mqtool.errors import MqtoolError, ParseError
from mqtool.formats import checkpoint as ckpt_fmt
from mqtool.formats import commitlog as cl_fmt
from mqtool.formats import consumequeue as cq_fmt
from mqtool.formats import indexfile as idx_fmt
from mqtool.store import CommitLog, Store, identify_file, parse_at

# MQTOOL_HYPOTHESIS_SCALE=20 runs 20x the examples (a longer local bug hunt)
SCALE = int(os.environ.get("MQTOOL_HYPOTHESIS_SCALE", "1"))
# a hang shows up as an example over this many milliseconds
FUZZ = settings(max_examples=120 * SCALE, deadline=5000,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

DECLARATIONS = {
    "commitlog_message": cl_fmt.commitlog_message,
    "message_header": cl_fmt.message_header,
    "blank_record": cl_fmt.blank_record,
    "host_v4": cl_fmt.host_v4,
    "host_v6": cl_fmt.host_v6,
    "consumequeue_unit": cq_fmt.consumequeue_unit,
    "batch_consumequeue_unit": cq_fmt.batch_consumequeue_unit,
    "index_header": idx_fmt.index_header,
    "index_entry": idx_fmt.index_entry,
    "index_file": idx_fmt.index_file(4, 8),
    "checkpoint": ckpt_fmt.checkpoint,
}


def real_record() -> bytes:
    """The first record of the broker-written fixture store (V1, IPv4)."""
    with open(FIXTURE_STORE / "store" / "commitlog" / "00000000000000000000", "rb") as fh:
        size = struct.unpack(">i", fh.read(4))[0]
        fh.seek(0)
        return fh.read(size)


REAL_RECORD = real_record()


@st.composite
def mutated(draw, seed: bytes):
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["flip", "truncate", "overwrite", "insert", "delete"]))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[at:]
        elif kind == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=8))
            data[at:at + len(chunk)] = chunk
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[at:at + draw(st.integers(1, 16))]
    return bytes(data)


fuzz_bytes = st.one_of(st.binary(max_size=600), mutated(REAL_RECORD),
                       mutated(REAL_RECORD + REAL_RECORD[:100]))


@FUZZ
@given(st.sampled_from(sorted(DECLARATIONS)), fuzz_bytes, st.integers(0, 700))
def test_parse_at_raises_only_parse_error(name, data, offset):
    try:
        parse_at(DECLARATIONS[name], data, offset, file="fuzz")
    except ParseError as err:
        assert err.file == "fuzz" and err.offset == offset
        assert str(err)


@FUZZ
@given(fuzz_bytes, st.integers(0, 2**40), st.booleans(), st.booleans(),
       st.integers(0, 700), st.one_of(st.none(), st.integers(0, 700)))
def test_scan_buffer_never_raises(data, base, check_crc, resync, start, stop):
    pos = None
    for event in scan.scan_buffer(data, base, name="fuzz", start=start, stop=stop,
                                  check_crc=check_crc, resync=resync):
        assert pos is None or event.offset > pos
        pos = event.offset
        assert base <= event.offset < base + max(len(data), 1)


# generate only: while the bug stands, shrinking and explaining the failure would cost ~20 s
@settings(FUZZ, phases=(Phase.explicit, Phase.generate), database=None)
@given(fuzz_bytes, st.integers(0, 600), st.booleans())
@example(b"\0\0\0\x10\x12\x34\x56\x78" + bytes(100), 0, True)
@example(REAL_RECORD[:40], 0, True)
def test_decode_message_raises_only_mqtool_errors(data, pos, check_crc):
    try:
        rec = scan.decode_message(data, pos, len(data), 0, check_crc)
    except MqtoolError:
        return
    assert rec.offset == pos and pos + rec.total_size <= len(data)


@pytest.fixture(scope="module")
def random_files_root():
    root = Path(tempfile.mkdtemp(prefix="mqtool-fuzz-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


STORE_FILES = [
    "commitlog/00000000000000000000",
    "commitlog/00000000000000001024",
    "consumequeue/TopicTest/0/00000000000000000000",
    "consumequeue/TopicTest/x/00000000000000000000",
    "batchconsumequeue/B/1/00000000000000000000",
    "index/20240101000000000",
    "checkpoint",
    "abort",
    "lock",
    "config/topics.json",
    "config/consumerOffset.json.bak",
    "config/delayOffset.json",
    "00000000000000000000",
    "stray.bin",
]


def write_random_store(root: Path, contents: list[bytes]) -> Path:
    store = Path(tempfile.mkdtemp(dir=root))
    for rel, data in zip(STORE_FILES, contents):
        path = store / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return store


def exercise_store(store_root: Path) -> None:
    """Everything a command does first with a store, each step allowed to refuse cleanly."""
    try:
        store = Store(store_root)
    except MqtoolError:
        return
    for step in (store.read_checkpoint, lambda: read_store_configs(store.root, STORE_CONFIGS),
                 store.abort_content, store.lock_held,
                 lambda: list(scan.Scanner(store.commitlog, resync=True)),
                 lambda: list(scan.Scanner(store.commitlog, check_crc=False)),
                 lambda: [scan.message_at(store.commitlog, s.base_offset + k)
                          for s in store.commitlog.segments for k in (0, 3, 90)]):
        try:
            step()
        except MqtoolError:
            pass
    for path in store_root.rglob("*"):
        if path.is_file():
            try:
                kind = identify_file(path)
            except MqtoolError:
                continue
            assert kind in ("commitlog", "consumequeue", "batchconsumequeue", "index",
                            "checkpoint", "abort", "lock", "config", "timerlog", "timerwheel",
                            "timercheck")


store_contents = st.lists(st.one_of(st.binary(max_size=300), mutated(REAL_RECORD)),
                          min_size=len(STORE_FILES), max_size=len(STORE_FILES))


@pytest.mark.usefixtures("walk_path")
@FUZZ
@given(store_contents)
def test_store_of_random_files(random_files_root, contents):
    exercise_store(write_random_store(random_files_root, contents))


def test_store_config_nested_too_deep(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "checkpoint").write_bytes(bytes(4096))
    (tmp_path / "config" / "topics.json").write_text("[" * 100_000)
    exercise_store(tmp_path)


@FUZZ
@given(st.binary(max_size=200), st.sampled_from([
    "checkpoint", "abort", "abort.bak", "lock", "timerwheel", "timercheck", "x.json",
    "00000000000000000000", "20240101000000000", "0000000000000000000", "random",
    "y.json.bak"]), st.sampled_from(["", "commitlog", "consumequeue/T/0", "index", "config",
                                     "timerlog", "batchconsumequeue/T/1", "elsewhere"]))
@example(b"", "00000000000000000000", "elsewhere")
@example(b"\0\0\0\x10\xda\xa3\x20\xa7", "00000000000000000000", "elsewhere")
def test_identify_file(random_files_root, data, name, parent):
    directory = Path(tempfile.mkdtemp(dir=random_files_root)) / parent
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(data)
    try:
        kind = identify_file(path)
    except MqtoolError:
        return
    assert isinstance(kind, str) and kind


def test_identify_file_refuses_missing_and_directories(tmp_path):
    with pytest.raises(MqtoolError):
        identify_file(tmp_path / "nope")
    with pytest.raises(MqtoolError):
        identify_file(tmp_path)


def test_store_refuses_missing_and_non_store(tmp_path):
    with pytest.raises(MqtoolError):
        Store(tmp_path / "nope")
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(MqtoolError):
        Store(tmp_path / "file")
    with pytest.raises(MqtoolError):
        Store(tmp_path)


@pytest.mark.usefixtures("walk_path")
@FUZZ
@given(st.lists(st.binary(max_size=400), min_size=1, max_size=3), st.integers(-5, 3000))
def test_message_at_on_random_segments(random_files_root, contents, offset):
    directory = Path(tempfile.mkdtemp(dir=random_files_root))
    for i, data in enumerate(contents):
        (directory / f"{i * 1024:020d}").write_bytes(data)
    log = CommitLog(directory)
    try:
        rec = scan.message_at(log, offset)
    except ParseError:
        return
    assert rec.offset == offset


# --- config JSON, store times and ids, huge sparse files (issue 12) ---------------------------------

from mqtool.formats import codecs  # noqa: E402
from mqtool.inspect.info import _config_summary  # noqa: E402
from mqtool.inspect.queues import iter_consume_queue_file, queue_summary  # noqa: E402
from mqtool.inspect.small_files import config_dict, small_file_dict  # noqa: E402
from mqtool.query.ids import describe_uniq_key, uniq_key_windows  # noqa: E402
from mqtool.queue_recovery import read_cq_units  # noqa: E402
from mqtool.store import read_fastjson  # noqa: E402

CONFIG_NAMES = ["topics.json", "consumerOffset.json", "lmqConsumerOffset.json",
                "delayOffset.json", "subscriptionGroup.json", "timercheck.json"]
huge_ints = st.one_of(st.integers(), st.integers(-(2**80), 2**80), st.just(-(2**63)))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), huge_ints, st.floats(allow_nan=False),
              st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.text(max_size=8),
                                                      st.integers().map(str)), inner,
                                            max_size=4)),
    max_leaves=20)
# the tables mqtool reads, filled with values of any type
config_objects = st.dictionaries(
    st.sampled_from(["topicConfigTable", "offsetTable", "subscriptionGroupTable",
                     "dataVersion", "other"]), json_values, max_size=4)


def _config_text(value, depth: int, digits: int) -> str:
    """The JSON text of ``value``; ``depth`` > 0: that many nested arrays instead; ``digits`` >
    0: a number of that many digits in it (too long for Python's int(), past 4300)."""
    if depth:
        return "[" * depth + "]" * depth
    text = json.dumps(value)
    if digits:
        number = "9" * digits
        text = (re.sub(r"\d+", number, text, count=1) if re.search(r"\d", text)
                else '{"dataVersion": ' + number + "}")
    return text


@FUZZ
@given(st.one_of(json_values, config_objects), st.sampled_from(CONFIG_NAMES),
       st.sampled_from([0, 0, 0, 50, 5000, 300_000]), st.sampled_from([0, 0, 30, 4301, 20000]),
       st.booleans())
def test_config_json_of_any_shape(random_files_root, value, name, depth, digits, mangle):
    text = _config_text(value, depth, digits)
    if mangle:
        text = re.sub(r'"(\d+)":', r"\1:", text)      # fastjson's unquoted integer keys
    path = Path(tempfile.mkdtemp(dir=random_files_root)) / name
    path.write_text(text)
    try:
        data = read_fastjson(path)
    except ValueError:
        data = None
    try:
        config_dict(path)
    except MqtoolError:
        pass
    summary = _config_summary(name, data)
    try:
        json.dumps(summary)
    except ValueError:
        pass            # a number too long for str() comes back as it was read


hex_keys = st.one_of(st.binary(min_size=16, max_size=16), st.binary(min_size=28, max_size=28)) \
    .map(lambda b: b.hex().upper())
store_times = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**45),
                        st.sampled_from([0, -1, 253402300799999, 253402300800000, 2**62]))


@FUZZ
@given(hex_keys, store_times, store_times)
def test_uniq_keys_against_any_store_time(key, lo, hi):
    try:
        info = describe_uniq_key(key, now_ms=hi)
    except ValueError as err:          # an IP that is not one: a malformed key, said in words
        assert str(err)
        return
    assert isinstance(info["approx_time"], int)
    windows = uniq_key_windows(key, min(lo, hi), max(lo, hi))
    assert all(start <= end for start, end in windows)
    assert codecs.decode_uniq_key(key, now_ms=lo)["counter"] >= 0


@FUZZ
@given(st.integers(0, (1 << 31) + 7), st.binary(max_size=200), st.integers(0, 4 << 20),
       st.sampled_from(["consumequeue/T/0", "batchconsumequeue/T/0"]))
def test_huge_sparse_queue_files(random_files_root, size, data, at, parent):
    """A queue file of up to 2 GiB, sparse, with a few bytes in its first MiBs: every reader
    works in memory bounded by the written part (a whole-file read would allocate GiBs). Data
    at the very end of a huge sparse file is read as a whole only without a geometry: every
    store path passes one (tests/test_hostile_input.py)."""
    directory = Path(tempfile.mkdtemp(dir=random_files_root)) / parent
    directory.mkdir(parents=True)
    path = directory / "00000000000000000000"
    with open(path, "wb") as fh:
        fh.truncate(size)
        if data and size:
            fh.seek(min(at, size - 1) // 4096 * 4096)
            fh.write(data)
    if path.stat().st_blocks * 512 > 16 << 20:
        pytest.skip("the file system does not keep sparse files sparse")
    units = read_cq_units(path)
    assert len(units) <= 1 + (min(at, size) + len(data) + 4096) // 20
    if parent.startswith("consumequeue"):
        for n, _ in enumerate(iter_consume_queue_file(path)):
            assert n < 20_000
    store = Store(directory.parents[2])
    for queue in (*store.consume_queues, *store.batch_consume_queues):
        queue_summary(queue)


def test_small_files_with_huge_numbers(tmp_path):
    for name in ("abort", "abort.bak"):
        (tmp_path / name).write_text("7" * 5000)
        assert small_file_dict(tmp_path / name, "abort")["pid"] is None
