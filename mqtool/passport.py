"""The store passport: which geometry the files show and which broker family wrote them.

Before any broker's rules are applied to a store (recovery prediction, repair), an operator
needs to know what wrote it. Each claim comes with the evidence that supports it, and what the
files disagree on is listed as an inconsistency rather than silently averaged away."""
from __future__ import annotations

from collections import Counter

from .errors import ParseError
from .formats import consumequeue as cq_fmt
from .formats import indexfile as idx_fmt
from .store import Store

FAMILY_4 = "4.x"
FAMILY_5 = "5.x"


def five_x_evidence(store: Store) -> list[str]:
    """What only a 5.x broker leaves on disk."""
    root = store.root
    evidence = []
    if (root / "abort.bak").exists():
        evidence.append("abort.bak exists (5.x copies the old abort on every start)")
    for name in ("compaction", "timerlog", "timerwheel", "batchconsumequeue",
                 "epochFileCheckpoint", "brokerIdentity"):
        if (root / name).exists():
            evidence.append(f"{name} exists")
    if (root / "config" / "timercheck").exists():
        evidence.append("config/timercheck exists")
    content = store.abort_content()
    if content:
        evidence.append(f"abort holds {content[:20]!r} (5.x writes the broker PID)")
    try:
        ckpt = store.read_checkpoint()
    except ParseError:
        ckpt = None
    if ckpt is not None and ckpt.master_flushed_offset:
        evidence.append(f"checkpoint masterFlushedOffset @24 = {ckpt.master_flushed_offset}")
    if ckpt is not None and ckpt.confirm_phy_offset:
        evidence.append(f"checkpoint confirmPhyOffset @32 = {ckpt.confirm_phy_offset} (5.1.1+)")
    return evidence


def _sizes(lengths) -> dict[int, int]:
    return dict(sorted(Counter(lengths).items()))


def geometry_findings(store: Store) -> tuple[dict, list[str]]:
    """(geometry with where each value came from, inconsistencies among the files)."""
    problems = []
    cl = store.commitlog
    cl_sizes = _sizes(s.length for s in cl.segments)
    other = {size: n for size, n in cl_sizes.items() if size != cl.file_size}
    if other:
        problems.append(f"CommitLog files of {len(cl_sizes)} sizes: "
                        + ", ".join(f"{n} x {size:,}" for size, n in cl_sizes.items()))
    cq_sizes = _sizes(s.length for q in store.consume_queues for s in q.segments)
    not_units = [size for size in cq_sizes if size % cq_fmt.CQ_STORE_UNIT_SIZE]
    if not_units:
        problems.append("ConsumeQueue file sizes not a multiple of 20: "
                        + ", ".join(f"{size:,}" for size in not_units))
    if len(cq_sizes) > 1:
        problems.append(f"ConsumeQueue files of {len(cq_sizes)} sizes: "
                        + ", ".join(f"{n} x {size:,}" for size, n in cq_sizes.items()))
    bcq_sizes = _sizes(s.length for q in store.batch_consume_queues for s in q.segments)
    if any(size % cq_fmt.BATCH_CQ_STORE_UNIT_SIZE for size in bcq_sizes):
        problems.append("BatchConsumeQueue file sizes not a multiple of 46: "
                        + ", ".join(f"{s:,}" for s in bcq_sizes if s % 46))
    index_sizes = _sizes(f.length for f in store.index_files)
    if len(index_sizes) > 1:
        problems.append(f"IndexFiles of {len(index_sizes)} sizes (different geometry): "
                        + ", ".join(f"{n} x {size:,}" for size, n in index_sizes.items()))
    expected_index = idx_fmt.index_file_size(store.index_slots, store.index_entries)
    if index_sizes and expected_index not in index_sizes:
        problems.append(f"no IndexFile has the size of {store.index_slots:,} slots x "
                        f"{store.index_entries:,} entries ({expected_index:,} bytes)")
    geometry = {
        "commitlog_file_size": cl.file_size,
        "commitlog_file_sizes_seen": cl_sizes,
        "cq_units_per_file": store.cq_units_per_file,
        "cq_file_sizes_seen": cq_sizes,
        "bcq_units_per_file": store.bcq_units_per_file if store.batch_consume_queues else None,
        "index_slots": store.index_slots,
        "index_entries": store.index_entries,
        "index_file_sizes_seen": index_sizes,
    }
    return geometry, problems


def store_passport(store: Store, *, v2_records: int | None = None,
                   prop_crc_records: int | None = None) -> dict:
    """Geometry, writer family with evidence, the recovery rules that fit, inconsistencies.

    ``v2_records``/``prop_crc_records`` come from a CommitLog scan when the caller made one
    (None: not scanned, so those claims are not made)."""
    geometry, problems = geometry_findings(store)
    evidence = five_x_evidence(store)
    claims = []
    if v2_records:
        claims.append({"claim": "5.1+", "evidence": f"{v2_records:,} V2 records (magic "
                       "0xDAA320AB, 2-byte topic length; 4.x has only V1)"})
    if prop_crc_records:
        claims.append({"claim": "5.2+ with enabledAppendPropCRC",
                       "evidence": f"{prop_crc_records:,} records end their properties with "
                                   "__CRC32#"})
    if evidence:
        claims.append({"claim": FAMILY_5, "evidence": "; ".join(evidence)})
    family = FAMILY_5 if claims else FAMILY_4
    if family == FAMILY_4:
        claims.append({"claim": FAMILY_4, "evidence": "no 5.x-only file, field or record"
                       + ("" if v2_records is not None else " (records not scanned)")})
    # nothing on disk tells 5.0-5.3.1 from 5.3.2+; the newest rules are the likelier writer
    rules = "5.3.2+" if family == FAMILY_5 else "4.9"
    if store.abort_exists and family == FAMILY_4 and store.abort_content():
        problems.append("abort holds text although nothing else says 5.x")
    return {"family": family, "claims": claims, "recovery_rules": rules,
            "geometry": geometry, "inconsistencies": problems}
