"""Random, truncated and mutated bytes fed to dump and verify: a clean answer, a one-line error
with exit 2, or findings with exit 1 — never a traceback, never another exit code."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURE_STORE, invoke

SEGMENT = (FIXTURE_STORE / "store" / "commitlog" / "00000000000000000000").read_bytes()[:40000]
CQ_FILE = (FIXTURE_STORE / "store" / "consumequeue" / "TopicTest" / "0"
           / "00000000000000000000").read_bytes()
INDEX_NAME = sorted((FIXTURE_STORE / "store" / "index").iterdir())[0].name
CHECKPOINT = (FIXTURE_STORE / "store" / "checkpoint").read_bytes()


def assert_clean_outcome(code: int, err: str, allowed=(0, 1, 2)):
    assert "Traceback" not in err, err
    assert code in allowed, (code, err)
    if code == 2:
        errors = [line for line in err.splitlines() if line.startswith("mqtool: error:")]
        assert len(errors) == 1, err


def mutate(data: bytes, draw_ops) -> bytes:
    buf = bytearray(data)
    for kind, where, value in draw_ops:
        if not buf:
            break
        i = where % len(buf)
        if kind == "flip":
            buf[i] ^= 1 << (value % 8)
        elif kind == "zero":
            buf[i:i + value % 512] = bytes(len(buf[i:i + value % 512]))
        elif kind == "cut":
            del buf[i:]
        else:
            buf[i:i] = bytes([value % 256]) * (value % 64)
    return bytes(buf)


ops = st.lists(st.tuples(st.sampled_from(["flip", "zero", "cut", "insert"]),
                         st.integers(0, 1 << 20), st.integers(0, 1 << 16)), max_size=6)
KINDS = {
    "commitlog": ("commitlog/00000000000000000000", SEGMENT),
    "consumequeue": ("consumequeue/TopicTest/0/00000000000000000000", CQ_FILE),
    "index": (f"index/{INDEX_NAME}", None),
    "checkpoint": ("checkpoint", CHECKPOINT),
}


def write_store(root: Path, kind: str, data: bytes) -> Path:
    rel, _ = KINDS[kind]
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if kind != "commitlog":
        (root / "commitlog").mkdir(exist_ok=True)
    return path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(KINDS)), st.one_of(st.binary(max_size=3000), ops))
def test_dump_and_verify_on_random_or_mutated_files(kind, payload):
    original = KINDS[kind][1]
    if kind == "index":
        original = (FIXTURE_STORE / "store" / "index" / INDEX_NAME).read_bytes()
    data = payload if isinstance(payload, bytes) else mutate(original, payload)
    root = Path(tempfile.mkdtemp(prefix="mqtool-bad-"))
    try:
        path = write_store(root, kind, data)
        code, _, err = invoke("dump", "--json", path)
        assert_clean_outcome(code, err)
        code, _, err = invoke("dump", "--json", "--resync", root)
        assert_clean_outcome(code, err)
        code, out, err = invoke("verify", "--json", root)
        assert_clean_outcome(code, err)
        code, _, err = invoke("info", "--json", root)
        assert_clean_outcome(code, err)
    finally:
        shutil.rmtree(root)


def test_wrong_type_and_missing_inputs(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a store file\n")
    empty = tmp_path / "00000000000000000000"
    empty.write_bytes(b"")
    for argv in (("dump", tmp_path / "missing"), ("verify", tmp_path / "missing"),
                 ("info", tmp_path / "missing"), ("dump", text), ("verify", text),
                 ("info", text), ("dump", empty), ("verify", tmp_path / "nothing-here"),
                 ("dump", "--from", "abc", tmp_path), ("verify", "--mode", "sideways", tmp_path)):
        if argv[-1] == tmp_path / "nothing-here":
            (tmp_path / "nothing-here").mkdir()
        code, out, err = invoke(*argv)
        assert code == 2, (argv, code, out, err)
        assert_clean_outcome(code, err)
        assert err.startswith("mqtool: error:"), err
