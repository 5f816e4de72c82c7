"""The store passport: which geometry the files show and which broker family wrote them.

Before any broker's rules are applied to a store (recovery prediction, repair), an operator
needs to know what wrote it. Each claim comes with the evidence that supports it, and what the
files disagree on is listed as an inconsistency rather than silently averaged away.

The passport also names the CommitLog's layout: plain, DLedger mode (``dledger-<selfId>/``), or a
plain CommitLog upgraded to DLedger, with the DLedger ledger (first and last entry, term,
committed index and how far the on-disk checkpoint lags the data), and a controller-mode store's
epochs and broker identity (:mod:`mqtool.controller`)."""
from __future__ import annotations

from collections import Counter

import numpy as np

from . import codec as _codec
from .errors import ParseError
from .formats import consumequeue as cq_fmt
from .formats import indexfile as idx_fmt
from .formats import dledger as dl_fmt
from .formats.commitlog import INNER_BATCH_FLAG
from .vocabulary import VERSION_49, VERSION_532, VERSION_534
from .controller import controller_claim, controller_section
from .dledger import ledger_extent
from .store import (COMBINE_CQ, ROCKSDB_CQ, ROCKSDB_METADATA, UPGRADED_LAYOUT, Store,
                    properties_int)

FAMILY_4 = "4.x"
FAMILY_5 = "5.x"
#: what each kind of RocksDB database says about the writer
ROCKSDB_CLAIMS = {
    ROCKSDB_CQ: "5.2+ RocksDB ConsumeQueue (storeType=defaultRocksDB): queue units are RocksDB "
                "keys, not files",
    COMBINE_CQ: "5.3.2+ CombineConsumeQueue (rocksdbCQDoubleWriteEnable): file and RocksDB "
                "ConsumeQueues",
    ROCKSDB_METADATA: "5.x RocksDB metadata under config/",
}

#: topics the broker writes to itself (timer, transaction, schedule, pop revive...): no
#: SendMessageProcessor sets CLUSTER on their records, so they are no evidence either way
_BROKER_TOPIC_PREFIXES = ("rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC_XXXX")


def own_property_batch_record(topic: str, sys_flag: int, has_uniq_key: bool,
                              has_cluster: bool) -> bool:
    """A record that only the store code after 5.3.3 writes: a producer's message (it has its
    UNIQ_KEY) without the CLUSTER the broker sets on every send. Single sends carry CLUSTER in
    every family; 5.3.3 and before append the batch's CLUSTER (and WAIT, UNIQ_KEY) to each
    message of a classic batch; the newest code stores each message's own properties only.
    Inner batches (one record per batch) keep the batch's properties in every family."""
    return (has_uniq_key and not has_cluster and not sys_flag & INNER_BATCH_FLAG
            and not topic.startswith(_BROKER_TOPIC_PREFIXES))


#: the property names :func:`own_property_batch_rows` reads
EVIDENCE_PROPERTIES = ("UNIQ_KEY", "CLUSTER")


def own_property_batch_rows(batch, values: dict | None = None) -> int:
    """How many records of a scanner ``RecordBatch`` :func:`own_property_batch_record`
    accepts, at once; ``values`` are the batch's ``codec.property_values`` spans when the
    caller already has them for :data:`EVIDENCE_PROPERTIES`."""
    if len(batch) == 0:
        return 0
    if values is None:
        values = _codec.property_spans(*batch.properties_source(), EVIDENCE_PROPERTIES)[2]
    broker_topic = np.array([name.startswith(_BROKER_TOPIC_PREFIXES)
                             for name in batch.topics.names] or [False], dtype=bool)
    hits = ((values["UNIQ_KEY"][0] >= 0) & (values["CLUSTER"][0] < 0)
            & ((batch.sys_flag & INNER_BATCH_FLAG) == 0) & ~broker_topic[batch.topic_id])
    return int(np.count_nonzero(hits))


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
    if not cl.segments and not getattr(store, "commitlog_dirs_given", False) and any(
            q.segments for q in store.consume_queues):
        problems.append("no CommitLog file in commitlog/ but ConsumeQueues point into one: a "
                        "CommitLog kept elsewhere (storePathCommitLog)? give --broker-config or "
                        "--commitlog-dirs")
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


def dledger_section(store: Store) -> tuple[dict | None, list[str]]:
    """(the DLedger ledger and its bookkeeping, inconsistencies) of a DLedger-mode store;
    (None, []) for a plain one."""
    dledger = store.dledger
    if dledger is None:
        return None, []
    problems = []
    ledger = ledger_extent(dledger)
    checkpoint, checkpoint_source, checkpoint_error = dledger.checkpoint()
    currterm, currterm_source, currterm_error = dledger.currterm()
    committed = properties_int(checkpoint, dl_fmt.COMMITTED_INDEX_KEY)
    end_index = properties_int(checkpoint, dl_fmt.END_INDEX_KEY)
    term = properties_int(currterm, dl_fmt.CURR_TERM_KEY)
    last = ledger["last"]
    lag = last["index"] - committed if last is not None and committed is not None else None
    for name, error in (("checkpoint", checkpoint_error), ("currterm", currterm_error)):
        if error:
            problems.append(f"{dledger.directory.name}/{name}: {error}")
    if checkpoint is not None and (committed is None or end_index is None):
        problems.append(f"{dledger.directory.name}/{checkpoint_source} does not hold "
                        "committedIndex and endIndex as numbers")
    if currterm is not None and term is None:
        problems.append(f"{dledger.directory.name}/{currterm_source} does not hold currTerm as a "
                        "number")
    if lag is not None and lag < 0:
        problems.append(f"DLedger checkpoint committedIndex {committed} is past the last entry "
                        f"({last['index']})")
    if last is not None and term is not None and last["term"] > term:
        problems.append(f"the last DLedger entry has term {last['term']}, currterm says {term}")
    if ledger["first"] is None and dledger.data_segments:
        problems.append(f"{dledger.directory.name}/data: the first data file does not start "
                        "with a DLedger entry")
    sizes = _sizes(s.length for s in dledger.data_segments)
    if len(sizes) > 1:
        problems.append(f"DLedger data files of {len(sizes)} sizes: "
                        + ", ".join(f"{n} x {size:,}" for size, n in sizes.items()))
    divided = store.commitlog.divided_offset
    plain = store.commitlog.plain_segments
    if divided is not None:
        plain_end = plain[-1].base_offset + plain[-1].length
        if plain_end != divided:
            problems.append(f"commitlog/ ends at {plain_end:,} but the DLedger data begins at "
                            f"{divided:,} (dividedCommitlogOffset)")
        if ledger["first"] is not None and ledger["first"]["pos"] != divided:
            problems.append(f"the first DLedger entry lies at {ledger['first']['pos']:,}, not at "
                            f"dividedCommitlogOffset {divided:,}")
    section = {
        "directory": store.relative(dledger.directory), "self_id": dledger.self_id,
        "data_files": len(dledger.data_segments),
        "data_file_size": _most_common_size(sizes),
        "index_files": len(dledger.index_files), "index_file_size": dledger.index_file_size,
        "ledger": ledger,
        "divided_commitlog_offset": divided,
        "checkpoint": {"source": checkpoint_source, "committed_index": committed,
                       "end_index": end_index},
        "current_term": term,
        "vote_leader": currterm.get(dl_fmt.VOTE_LEADER_KEY) if currterm else None,
        "checkpoint_lag": lag,
    }
    return section, problems


def _most_common_size(sizes: dict[int, int]) -> int | None:
    return max(sizes, key=sizes.get) if sizes else None


def _dledger_claim(layout: str, section: dict) -> dict:
    ledger = section["ledger"]
    first, last = ledger["first"], ledger["last"]
    span = (f"entries {first['index']:,}..{last['index']:,}, term {last['term']}"
            if first and last else "no readable entry")
    committed = section["checkpoint"]["committed_index"]
    bookkeeping = (f", checkpoint committedIndex {committed:,} ({section['checkpoint_lag']:,} "
                   "behind the data)" if committed is not None and section["checkpoint_lag"]
                   is not None else ", no usable DLedger checkpoint")
    kind = "upgraded from a plain CommitLog to DLedger mode" if layout == UPGRADED_LAYOUT \
        else "DLedger mode"
    upgrade = (f"; commitlog/ below dividedCommitlogOffset {section['divided_commitlog_offset']:,}"
               if layout == UPGRADED_LAYOUT else "")
    return {"claim": kind, "evidence": f"{section['directory']}/: {span}{bookkeeping}, "
            f"currTerm {section['current_term']}{upgrade}; records sit in DLedger entries "
            "(commitLogOffset = entry pos + 48) and DLedger's own recovery applies"}


def store_passport(store: Store, *, v2_records: int | None = None,
                   prop_crc_records: int | None = None,
                   own_property_batch_records: int | None = None,
                   max_offset: int | None = None) -> dict:
    """Geometry, writer family with evidence, the recovery rules that fit, inconsistencies.

    ``v2_records``/``prop_crc_records``/``own_property_batch_records`` (records
    :func:`own_property_batch_record` accepts) come from a CommitLog scan when the caller made
    one (None: not scanned, so those claims are not made). ``max_offset`` (the end of the
    scanned data) closes a controller-mode store's last epoch."""
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
    if own_property_batch_records:
        claims.append({"claim": VERSION_534, "evidence": f"{own_property_batch_records:,} "
                       "records carry their own UNIQ_KEY and no CLUSTER: classic-batch messages "
                       "as the store code after 5.3.3 writes them (5.3.3 appends the batch's "
                       "CLUSTER and WAIT to each)"})
    if evidence:
        claims.append({"claim": FAMILY_5, "evidence": "; ".join(evidence)})
    rocksdb = [{"kind": part.kind, "folder": part.folder + "/", "evidence": part.evidence}
               for part in store.rocksdb]
    for part in store.rocksdb:
        claims.insert(0, {"claim": ROCKSDB_CLAIMS[part.kind], "evidence":
                          f"{part.folder}/: {part.evidence}"})
    family = FAMILY_5 if claims else FAMILY_4
    if family == FAMILY_4:
        claims.append({"claim": FAMILY_4, "evidence": "no 5.x-only file, field or record"
                       + ("" if v2_records is not None else " (records not scanned)")})
    # nothing on disk tells 5.0-5.3.1 from 5.3.2+, nor 5.3.2+ from 5.3.4+ unless the records
    # show the newest classic batches; the newer rules are the likelier writer
    if own_property_batch_records:
        rules = VERSION_534
    else:
        rules = VERSION_532 if family == FAMILY_5 else VERSION_49
    if store.abort_exists and family == FAMILY_4 and store.abort_content():
        problems.append("abort holds text although nothing else says 5.x")
    dledger, dledger_problems = dledger_section(store)
    if dledger is not None:
        claims.insert(0, _dledger_claim(store.layout, dledger))
        problems += dledger_problems
    controller = controller_section(store, max_offset)
    if controller is not None:
        claims.insert(0, controller_claim(controller))
        if controller["epoch_problem"]:
            problems.append(controller["epoch_problem"])
        for name, ident in (controller["broker_identity"] or {}).items():
            if ident.get("problem"):
                problems.append(f"{name}: {ident['problem']}")
    passport = {"family": family, "claims": claims, "recovery_rules": rules,
                "geometry": geometry, "inconsistencies": problems, "layout": store.layout}
    if dledger is not None:
        passport["dledger"] = dledger
    if controller is not None:
        passport["controller"] = controller
    if rocksdb:
        passport["rocksdb"] = rocksdb
    return passport
