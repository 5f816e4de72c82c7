"""Mutation fuzzing of mqtool's read paths, in process, bounded in time (issue 12).

    python benchmarks/fuzz_read_paths.py [--count 100000] [--seconds 900] [--seed 1]

Real store files of the broker-written fixture store (a CommitLog head, a ConsumeQueue file,
an IndexFile, the checkpoint, a config file, abort and UNIQ_KEYs) are mutated (bit flips, bytes
overwritten with boundary values, inserts, deletes, truncation, splices, huge numbers and deep
nesting in JSON) and fed to the library functions the read commands use. A function may return
or raise what it documents (an ``MqtoolError``; ``ValueError`` for the JSON and UNIQ_KEY
decoders); anything else is an *uncaught exception* and is counted, by type and place. The goal
is 0. Not part of the test run (it takes minutes); prints one JSON summary on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from mqtool import scan  # noqa: E402
from mqtool.errors import MqtoolError  # noqa: E402
from mqtool.formats import checkpoint as ckpt_fmt  # noqa: E402
from mqtool.formats import codecs  # noqa: E402
from mqtool.formats import commitlog as cl_fmt  # noqa: E402
from mqtool.formats import consumequeue as cq_fmt  # noqa: E402
from mqtool.formats import indexfile as idx_fmt  # noqa: E402
from mqtool.inspect.index import iter_index_file  # noqa: E402
from mqtool.inspect.info import _config_summary  # noqa: E402
from mqtool.inspect.queues import iter_batch_consume_queue_file, iter_consume_queue_file  # noqa: E402
from mqtool.inspect.small_files import checkpoint_dict, config_dict, small_file_dict  # noqa: E402
from mqtool.query.ids import describe_uniq_key, uniq_key_windows  # noqa: E402
from mqtool.queue_recovery import (BATCH_CONSUME_QUEUE, CONSUME_QUEUE, read_cq_units,  # noqa: E402
                                   recover_consume_queue, truncate_dirty_logic)
from mqtool.store import ConsumeQueue, Segment, parse_at, read_fastjson  # noqa: E402

STORE = HERE.parent / "fixtures" / "rocketmq-4.9.8" / "clean-small" / "store"
BOUNDARY = [b"\x00", b"\xff", b"\x7f", b"\x80", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff",
            b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\x7f\xff\xff\xff\xff\xff\xff\xff",
            b"\x80\x00\x00\x00\x00\x00\x00\x00", b"\x00\x00\x00\x14", b"\xda\xa3\x20\xa7",
            b"\xcb\xd4\x38\x20"]
DECLARATIONS = [cl_fmt.commitlog_message, cl_fmt.message_header, cl_fmt.blank_record,
                cq_fmt.consumequeue_unit, cq_fmt.batch_consumequeue_unit, idx_fmt.index_header,
                idx_fmt.index_entry, ckpt_fmt.checkpoint]


def mutate(rng: random.Random, data: bytes, donors: list[bytes]) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 5, 8))):
        at = rng.randrange(len(out)) if out else 0
        kind = rng.randrange(8)
        if kind == 0 and out:
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            value = rng.choice(BOUNDARY)
            at -= at % 4
            out[at:at + len(value)] = value
        elif kind == 2:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        elif kind == 3:
            del out[at:at + rng.randrange(1, 64)]
        elif kind == 4 and rng.random() < 0.3:
            del out[at:]
        elif kind == 5:
            donor = rng.choice(donors)
            if donor:
                start = rng.randrange(len(donor))
                out[at:at] = donor[start:start + rng.randrange(1, 200)]
        elif kind == 6 and out:
            out[at] = rng.randrange(256)
        elif kind == 7 and len(out) > 8:
            start = rng.randrange(len(out) - 4)
            out[at:at] = out[start:start + rng.randrange(1, 64)]
    return bytes(out)


def json_mutate(rng: random.Random, text: str) -> str:
    choice = rng.randrange(6)
    if choice == 0:
        depth = rng.choice((100, 1000, 5000, 100_000))
        return "[" * depth + "]" * depth
    if choice == 1:
        digits = rng.choice((19, 20, 4300, 4301, 5000))
        return text.replace("0", "9" * digits, 1) if "0" in text else "9" * digits
    if choice == 2:
        for key in ("offsetTable", "topicConfigTable", "subscriptionGroupTable"):
            text = text.replace(f'"{key}":{{', f'"{key}":{rng.choice(["[", "7,", "true,"])}{{', 1)
        return text
    if choice == 3:
        return '{"offsetTable":' + rng.choice(["[1,2]", "5", '"x"', "null", '{"9":{"0":1}}',
                                               '{"%s":1}' % ("9" * 5000)]) + "}"
    return mutate(rng, text.encode(), [text.encode()]).decode("utf-8", errors="replace")


class Harness:
    def __init__(self, rng: random.Random, scratch: Path):
        self.rng = rng
        self.scratch = scratch
        self.counts: Counter = Counter()
        self.uncaught: Counter = Counter()
        self.examples: dict[str, str] = {}
        commitlog = sorted((STORE / "commitlog").iterdir())[0].read_bytes()
        self.commitlog = commitlog[:4096]
        queue = next(p for p in sorted((STORE / "consumequeue").rglob("*")) if p.is_file())
        self.queue = queue.read_bytes().rstrip(b"\0")[:2000]
        index = sorted((STORE / "index").iterdir())[0].read_bytes()
        self.index = index
        self.checkpoint = (STORE / "checkpoint").read_bytes()
        configs = sorted((STORE / "config").glob("*.json"))
        self.config = configs[0].read_text() if configs else '{"offsetTable":{1:2}}'
        self.donors = [self.commitlog, self.queue, self.checkpoint, self.index[:2000]]

    def run_one(self, name: str, func, allowed=(MqtoolError,)) -> None:
        self.counts[name] += 1
        try:
            result = func()
            if hasattr(result, "__next__"):
                for n, _ in enumerate(result):
                    if n > 50_000:
                        break
        except allowed:
            pass
        except RecursionError as err:
            self._record(name, err)
        except Exception as err:  # noqa: BLE001 - counting them is the point
            self._record(name, err)

    def _record(self, name: str, err: BaseException) -> None:
        frame = traceback.extract_tb(err.__traceback__)[-1]
        key = f"{name}: {type(err).__name__} at {Path(frame.filename).name}:{frame.lineno}"
        self.uncaught[key] += 1
        self.examples.setdefault(key, str(err)[:200])

    def _file(self, name: str, data: bytes, parent: str = "") -> Path:
        directory = self.scratch / parent
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / name
        path.write_bytes(data)
        return path

    def step(self) -> None:
        rng = self.rng
        target = rng.randrange(12)
        if target == 0:
            decl = rng.choice(DECLARATIONS)
            data = mutate(rng, rng.choice(self.donors), self.donors)
            self.run_one("parse_at", lambda: parse_at(decl, data, rng.randrange(64), file="fuzz"))
        elif target in (1, 2):
            data = mutate(rng, self.commitlog, self.donors)
            resync, crc = rng.random() < 0.5, rng.random() < 0.5
            self.run_one("scan_buffer", lambda: scan.scan_buffer(
                data, rng.choice((0, 1 << 30, (1 << 62))), name="fuzz", check_crc=crc,
                resync=resync))
        elif target == 3:
            data = mutate(rng, self.commitlog, self.donors)
            pos = rng.randrange(max(1, min(len(data), 600)))
            self.run_one("decode_message", lambda: scan.decode_message(
                data, pos, len(data), 0, rng.random() < 0.5))
        elif target == 4:
            data = mutate(rng, self.checkpoint, self.donors)
            self.run_one("checkpoint_dict", lambda: checkpoint_dict(data, "checkpoint"))
        elif target == 5:
            text = json_mutate(rng, self.config)
            name = rng.choice(("topics.json", "consumerOffset.json", "delayOffset.json",
                               "subscriptionGroup.json", "x.json"))
            path = self._file(name, text.encode("utf-8", errors="replace"), "config")

            def config_paths():
                try:
                    data = read_fastjson(path)
                except ValueError:
                    data = None
                summary = _config_summary(name, data)
                try:
                    json.dumps(summary)
                except ValueError:
                    pass
                return config_dict(path)
            self.run_one("config", config_paths)
        elif target == 6:
            raw = mutate(rng, bytes.fromhex("7F0000010F2C18B4AAC24C3EBC650000"), self.donors)
            key = raw.hex().upper()[:rng.choice((32, 56, 32, 40))]
            now = rng.choice((rng.randrange(-(2**63), 2**63), rng.randrange(0, 2**45),
                              253402300800000, -1, 0))

            def uniq():
                describe_uniq_key(key, now_ms=now)
                # a whole 1970..9999 span walks ~96,000 months (0.3 s): now and then only
                span = (1 << 62) if rng.random() < 0.02 else rng.randrange(1 << 36)
                uniq_key_windows(key, now - span, now)
                codecs.decode_uniq_key(key, now_ms=now)
            self.run_one("uniq_key", uniq, (MqtoolError, ValueError))
        elif target in (7, 8):
            data = mutate(rng, self.queue, self.donors)
            batch = target == 8
            parent = "batchconsumequeue/T/0" if batch else "consumequeue/T/0"
            path = self._file("00000000000000000000", data, parent)
            if rng.random() < 0.05:
                with open(path, "r+b") as fh:
                    fh.truncate(rng.choice((1 << 31, 6_000_000, 1 << 26)))
            reader = iter_batch_consume_queue_file if batch else iter_consume_queue_file
            self.run_one("queue_file", lambda: reader(path))
            self.run_one("read_cq_units", lambda: read_cq_units(path, rng.choice((None, 300_000))))
            kind = BATCH_CONSUME_QUEUE if batch else CONSUME_QUEUE
            queue = ConsumeQueue("T", 0, path.parent, [Segment(path, 0, path.stat().st_size)],
                                 kind.unit_size)
            upf, cut = rng.choice((300, 300_000)), rng.randrange(1 << 22)
            self.run_one("queue_recovery", lambda: (recover_consume_queue(queue, upf, kind),
                                                    truncate_dirty_logic(queue, cut, upf, kind)))
        elif target in (9, 10):
            data = mutate(rng, self.index[:40] + self.index[40:].rstrip(b"\0")[:4000]
                          + bytes(max(0, len(self.index) - 4040)), self.donors)
            path = self._file("20240101000000000", data, "index")
            follow = rng.choice((None, 0, 1, rng.randrange(5_000_000)))
            self.run_one("index_file", lambda: iter_index_file(path, follow_slot=follow))
        else:
            data = mutate(rng, rng.choice((b"", b"12345", b"9" * 5000, b"lock")), self.donors)
            path = self._file(rng.choice(("abort", "abort.bak")), data)
            self.run_one("abort", lambda: small_file_dict(path, "abort"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=900)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if not STORE.is_dir():
        print(f"{STORE}: the fixture store is missing", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    started = time.perf_counter()
    # memory-backed scratch when there is one: the harness writes a small file per input
    shm = Path("/dev/shm")
    where = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="mqtool-fuzz-", dir=where) as scratch:
        harness = Harness(rng, Path(scratch))
        done = 0
        while done < args.count and time.perf_counter() - started < args.seconds:
            harness.step()
            done += 1
            if done % 10_000 == 0:
                print(f"{done} inputs, {sum(harness.uncaught.values())} uncaught, "
                      f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
    elapsed = time.perf_counter() - started
    summary = {"inputs": done, "calls": sum(harness.counts.values()), "seconds": round(elapsed, 1),
               "seed": args.seed, "per_target": dict(harness.counts),
               "uncaught_exceptions": sum(harness.uncaught.values()),
               "uncaught_by_kind": dict(harness.uncaught), "examples": harness.examples}
    print(json.dumps(summary, indent=1))
    return 0 if not harness.uncaught else 1


if __name__ == "__main__":
    sys.exit(main())
