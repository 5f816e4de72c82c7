"""Key lookups in a full-size IndexFile, and salvage throughput against verify.

    python benchmarks/query_speed.py [--messages 4800000] [--lookups 300] [--skip-salvage]

Makes (once, under benchmarks/.stores/) a store with the broker's default IndexFile geometry,
5,000,000 hash slots and 20,000,000 entries (a 420,000,040-byte file), and enough messages to
fill most of it (~2.5 entries per message: the UNIQ_KEY and 0-3 KEYS). Then:

* warm key lookups: the IndexFiles are mapped once (read-only mmap) and looked up again and
  again; each lookup reads the header, one slot and one hash chain, and every hit is checked
  against its CommitLog record. Goal: <= 20 ms per lookup. The peak RSS shows the index is not
  loaded (a loaded file alone would add 420 MB);
* one ``mqtool query --key`` end to end (interpreter start included);
* salvage (every message to a JSON-lines file) against verify on the same store, each in a fresh
  process. Goal: salvage within 1.5x of verify.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import time

from _common import STORES, ensure_store, fmt_bytes, run_child

from mqtool import query as q
from mqtool.formats import codecs
from mqtool.scan import Scanner
from mqtool.store import Store

SLOTS, ENTRIES = 5_000_000, 20_000_000
MAPPING_LINE = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")


def sample_keys(store: Store, count: int, seed: int = 1) -> list[tuple[str, str, str]]:
    """(kind, topic, value) of random records: their UNIQ_KEY or one of their KEYS."""
    rng = random.Random(seed)
    segments = [s for s in store.commitlog.segments if s.length]
    picks = []
    scanner = Scanner(store.commitlog, check_crc=False, resync=True)
    while len(picks) < count:
        seg = rng.choice(segments)
        start = seg.base_offset + rng.randrange(max(1, seg.length // 2))
        for record in scanner.messages(start, start + 64 * 1024):
            if record.sys_flag & 0xC == 0xC:
                continue   # ROLLBACK records are never indexed
            props = codecs.decode_properties(record.properties_raw)
            keys = [k for k in codecs.message_keys(props) if not k.startswith("hotkey-")]
            if keys and rng.random() < 0.5:
                picks.append(("key", record.topic, rng.choice(keys)))
            elif props.get("UNIQ_KEY"):
                picks.append(("uniq", record.topic, props["UNIQ_KEY"]))
            break
    return picks


def index_mapping_kib(fields=("Rss", "FilePmdMapped")) -> dict[str, int]:
    """Resident KiB of this process's IndexFile mappings (from /proc/self/smaps)."""
    totals = dict.fromkeys(fields, 0)
    inside = False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            if MAPPING_LINE.match(line):
                inside = "/index/" in line
            elif inside and line.split(":", 1)[0] in totals:
                totals[line.split(":", 1)[0]] += int(line.split()[1])
    return totals


def time_lookups(store: Store, keys, rounds: int = 2) -> tuple[list[float], int, dict]:
    """Seconds per lookup on the last (warm) round, hits found, and what the lookups touched:
    entries read, and the resident part of the IndexFile mappings."""
    hits = 0
    times: list[float] = []
    with q.IndexSet(store) as index, q.RecordReader(store.commitlog) as reader:
        for round_no in range(rounds):
            times = []
            for kind, topic, value in keys:
                started = time.perf_counter()
                found, _problems = index.lookup(codecs.index_key(topic, value))
                real = 0
                for hit in found:
                    record, _ = reader.at(hit.phy_offset)
                    if record is not None and record.topic == topic:
                        props = codecs.decode_properties(record.properties_raw)
                        if (props.get("UNIQ_KEY") == value if kind == "uniq"
                                else value in codecs.message_keys(props)):
                            real += 1
                times.append(time.perf_counter() - started)
                if round_no == rounds - 1:
                    hits += real > 0
        touched = {"entries_read": sum(f.entries_read for f in index.files) // rounds,
                   **index_mapping_kib(),
                   "index_bytes": sum(f.size for f in index.files)}
    return times, hits, touched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=4_800_000)
    parser.add_argument("--lookups", type=int, default=300)
    parser.add_argument("--skip-salvage", action="store_true")
    args = parser.parse_args()
    root = ensure_store(f"query-{args.messages}", [
        "--messages", str(args.messages), "--seed", "7", "--body-size", "64/256",
        "--commitlog-file-size", "1g", "--cq-units", "300000", "--index-slots", str(SLOTS),
        "--index-entries", str(ENTRIES)])
    store = Store(root)
    cl_bytes = sum(s.length for s in store.commitlog.segments)
    with q.IndexSet(store) as index:
        files = [(f.name, f.size, f.index_count) for f in index.files]
    print(f"store: {root}")
    print(f"  CommitLog {fmt_bytes(cl_bytes)} in {len(store.commitlog.segments)} file(s); "
          f"geometry {store.index_slots:,} slots x {store.index_entries:,} entries")
    for name, size, count in files:
        print(f"  IndexFile {name}: {size:,} bytes, {count - 1:,} entries "
              f"({(count - 1) / (ENTRIES - 1):.0%} full)")

    keys = sample_keys(store, args.lookups)
    times, hits, touched = time_lookups(store, keys)
    times_ms = sorted(t * 1000 for t in times)
    print(f"warm lookups ({len(keys)} keys, chain walk + record check, maps kept open):")
    print(f"  median {statistics.median(times_ms):7.3f} ms   p95 "
          f"{times_ms[int(len(times_ms) * 0.95) - 1]:7.3f} ms   max {times_ms[-1]:7.3f} ms   "
          f"(goal <= 20 ms)")
    print(f"  {hits}/{len(keys)} found; {touched['entries_read']:,} chain entries read "
          f"({touched['entries_read'] / len(keys):.1f} per lookup, "
          f"{fmt_bytes(touched['entries_read'] * 20 + len(keys) * 4)} of the "
          f"{fmt_bytes(touched['index_bytes'])} IndexFile)")
    print(f"  resident IndexFile pages afterwards: {fmt_bytes(touched['Rss'] * 1024)} "
          f"({fmt_bytes(touched['FilePmdMapped'] * 1024)} of it mapped as 2 MiB page-cache "
          f"folios: the kernel maps whole folios on a fault; nothing else is read)")

    kind, topic, value = keys[0]
    flag = "--uniq-key" if kind == "uniq" else "--key"
    seconds, rss, proc = run_child(["query", "--json", flag, value, "--topic", topic, str(root)])
    print(f"mqtool query {flag} (one process, interpreter start included): {seconds:.2f} s, "
          f"peak RSS {fmt_bytes(rss)}, exit {proc.returncode}")

    if args.skip_salvage:
        return
    out = STORES / "query-bench-salvage.jsonl"
    verify_s, verify_rss, vproc = run_child(["verify", "--json", str(root)])
    salvage_s, salvage_rss, sproc = run_child(["salvage", str(root), "--out", str(out),
                                               "--map", str(STORES / "query-bench-map.json")])
    written = out.stat().st_size if out.exists() else 0
    for path in (out, STORES / "query-bench-map.json"):
        if path.exists():
            os.unlink(path)
    print(f"verify   {verify_s:8.2f} s  ({cl_bytes / verify_s / 2**20:6.1f} MiB/s)  peak RSS "
          f"{fmt_bytes(verify_rss)}  exit {vproc.returncode}")
    print(f"salvage  {salvage_s:8.2f} s  ({cl_bytes / salvage_s / 2**20:6.1f} MiB/s)  peak RSS "
          f"{fmt_bytes(salvage_rss)}  exit {sproc.returncode}  wrote {fmt_bytes(written)}")
    print(f"salvage / verify  {salvage_s / verify_s:5.2f} x   (goal <= 1.5)")
    if sproc.returncode:
        sys.stderr.write(sproc.stderr)


if __name__ == "__main__":
    main()
