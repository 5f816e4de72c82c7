"""``mqtool query``, ``salvage``, ``export`` and ``diff``: argument parsing and rendering of
mqtool.query, mqtool.salvage and mqtool.diff."""
from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from ..errors import EXIT_FINDINGS, MqtoolError
from ..vocabulary import BROKER_VERSIONS
from . import options as opt
from .. import jsontext
from .common import (Commands, emit_json, emit_json_document, error_boundary, flush_stdout,
                     progress_bar, stdout_console, warn_if_live)

if TYPE_CHECKING:
    from ..store import Store

commands = Commands()


def _check_version(broker_version: str) -> str:
    if broker_version != "auto" and broker_version not in BROKER_VERSIONS:
        raise MqtoolError(f"--broker-version must be auto or one of "
                          f"{', '.join(BROKER_VERSIONS)}, not {broker_version!r}")
    return broker_version


def _note(text: str) -> None:
    sys.stderr.write(f"mqtool: note: {text}\n")


# --- query ---------------------------------------------------------------------------------------

def _query_mode(msg_id, uniq_key, key, offset, time) -> str:
    chosen = [name for name, value in (("--msg-id", msg_id), ("--uniq-key", uniq_key),
                                       ("--key", key), ("--offset", offset), ("--time", time))
              if value is not None]
    if len(chosen) != 1:
        raise MqtoolError("give exactly one of --msg-id, --uniq-key, --key, --offset, --time"
                          + (f" (got {', '.join(chosen)})" if chosen else ""))
    return chosen[0]


def _render_explanation(explanation: dict, console) -> None:
    console.print("Why the broker's own query differs:", markup=False)
    recovery = explanation["recovery"]
    console.print(f"  the broker's next start: {recovery['mode']} recovery "
                  f"({recovery['broker_version']} rules), CommitLog readable up to "
                  f"{recovery['process_offset']}", markup=False, soft_wrap=True)
    for topic, offsets in explanation.get("broker_offsets", {}).items():
        console.print(f"  queryMessage({topic}) returns {len(offsets)} offset(s): "
                      f"{', '.join(map(str, offsets[:12]))}{' ...' if len(offsets) > 12 else ''}",
                      markup=False, soft_wrap=True)
    if "transaction" in explanation:
        console.print(f"  transaction: {explanation['transaction']['detail']}", markup=False,
                      soft_wrap=True)
    if not explanation["reasons"]:
        console.print("  no difference: the broker finds the same messages", markup=False)
    for reason in explanation["reasons"]:
        offsets = reason["offsets"]
        where = (f" [{', '.join(map(str, offsets[:8]))}{' ...' if len(offsets) > 8 else ''}]"
                 if offsets else "")
        console.print(f"  {reason['reason']}: {reason['detail']}{where}", markup=False,
                      soft_wrap=True)


@commands.command("query")
@error_boundary
def query_command(
    store_path: Path = opt.store(),
    msg_id: Optional[str] = typer.Option(None, "--msg-id", metavar="ID",
                                         help="offsetMsgId (32 or 56 hex "
                                              "digits: store host + CommitLog offset)."),
    uniq_key: Optional[str] = typer.Option(None, "--uniq-key", metavar="ID",
                                           help="UNIQ_KEY, the client's "
                                                "message id (32 or 56 hex digits)."),
    key: Optional[str] = typer.Option(None, "--key", metavar="KEY",
                                     help="One item of the messages' KEYS."),
    topic: Optional[str] = opt.topic("Topic (needed with --offset, --time and "
                                     "--broker-compatible; without it --key and --uniq-key "
                                     "search every topic the store knows)."),
    queue: Optional[int] = opt.queue("Queue id (with --offset or --time)."),
    offset: Optional[int] = typer.Option(None, "--offset", metavar="N",
                                         help="Queue offset: the message the "
                                              "ConsumeQueue unit points at (on a BatchCQ queue the "
                                              "whole batch record holding that offset)."),
    time: Optional[str] = typer.Option(None, "--time", metavar="TIME",
                                       help="Store time (epoch ms or ISO-8601): "
                                            "the queue offset nearest it, as the broker's "
                                            "getOffsetInQueueByTime."),
    since: Optional[str] = opt.since(only_with="--key"),
    until: Optional[str] = opt.until(only_with="--key"),
    max_results: Optional[int] = typer.Option(None, "--max", help="--key: at most N messages, "
                                              "the most recent (default: no limit)."),
    explain_flag: bool = typer.Option(False, "--explain", help="Also say why the broker's own "
                                      "query would fail or return something else."),
    broker_compatible: bool = typer.Option(False, "--broker-compatible", help="Answer exactly "
                                           "as the broker's queryMessage (IndexFiles only, at "
                                           "most 64, no collision filter, duplicates kept)."),
    scan: bool = typer.Option(False, "--scan", help="Ignore the IndexFiles: scan the whole "
                              "CommitLog."),
    traces: bool = typer.Option(False, "--traces", help="Also list the trace records of the "
                                "messages found (RMQ_SYS_TRACE_TOPIC messages whose KEYS name "
                                "their UNIQ_KEY or offsetMsgId), decoded; found_by says 'trace'."),
    trace_topic: str = typer.Option("RMQ_SYS_TRACE_TOPIC", "--trace-topic", help="--traces: "
                                    "the trace topic the clients were configured with."),
    json_output: bool = opt.json_output("JSON lines: one object per message, then a "
                                        "query/summary object (and query/explanation)."),
    body: Optional[str] = opt.body("text in the table, base64 in JSON"),
    max_body_bytes: Optional[int] = opt.max_body_bytes(),
    broker_version: str = opt.broker_version(),
    force_verify_prop_crc: bool = opt.force_verify_prop_crc(),
    commitlog_file_size: Optional[int] = opt.commitlog_file_size(),
    commitlog_dirs: Optional[str] = opt.commitlog_dirs(),
    broker_config: Optional[Path] = opt.broker_config(),
    cq_units: Optional[int] = opt.cq_units(),
    index_slots: Optional[int] = opt.index_slots(),
    index_entries: Optional[int] = opt.index_entries(),
):
    """Find messages without a broker: by offsetMsgId, UNIQ_KEY, key, or queue offset/time.
    Read-only."""
    from .. import inspect as lib

    mode = _query_mode(msg_id, uniq_key, key, offset, time)
    _check_version(broker_version)
    body_mode = opt.body_mode(body, "base64" if json_output else "text")
    _check_query_options(mode, topic, queue, since, until, max_results, max_body_bytes,
                         broker_compatible)
    store = opt.open_store(store_path, commitlog_file_size, cq_units, index_slots, index_entries,
                           commitlog_dirs=commitlog_dirs, broker_config=broker_config)
    since_ms = lib.parse_time(since) if since is not None else None
    until_ms = lib.parse_time(until) if until is not None else None
    plan = _LazyPlan(store, broker_version, force_verify_prop_crc)
    out = _QueryOutput(store, json_output, body_mode, max_body_bytes)
    if broker_compatible:
        _broker_compatible_query(store, out, plan, topic, key, uniq_key, since_ms, until_ms)
        return
    result = _run_query(store, mode, msg_id=msg_id, uniq_key=uniq_key, key=key, topic=topic,
                        queue=queue, offset=offset, time=time, since_ms=since_ms,
                        until_ms=until_ms, max_results=max_results, scan=scan)
    for found in result.found:
        out.show(found.record, found.annotations(), found.inner_position)
    trace_found = _show_traces(store, out, result, uniq_key, trace_topic) if traces else []
    _finish_query(store, out, result, plan if explain_flag else None, traces, trace_found)


def _check_query_options(mode, topic, queue, since, until, max_results, max_body_bytes,
                         broker_compatible) -> None:
    """The option combinations query refuses (exit 2)."""
    opt.check_not_negative(max_body_bytes, "--max-body-bytes")
    opt.check_not_negative(max_results, "--max")
    if mode in ("--offset", "--time") and (topic is None or queue is None):
        raise MqtoolError(f"{mode} needs --topic and --queue")
    if mode not in ("--offset", "--time") and queue is not None:
        raise MqtoolError("--queue goes with --offset or --time")
    if (since is not None or until is not None or max_results is not None) and mode != "--key":
        raise MqtoolError("--since, --until and --max go with --key")
    if broker_compatible and (mode not in ("--key", "--uniq-key") or topic is None):
        raise MqtoolError("--broker-compatible needs --key or --uniq-key, and --topic")


class _LazyPlan:
    """The recovery prediction, made the first time a query needs it."""

    def __init__(self, store, broker_version: str, force_verify_prop_crc: bool):
        self.store, self.broker_version = store, broker_version
        self.force_verify_prop_crc = force_verify_prop_crc
        self.plan = None

    def __call__(self):
        from ..recovery import predict_recovery
        if self.plan is None:
            self.plan = predict_recovery(self.store, broker_version=self.broker_version,
                                         force_verify_prop_crc=self.force_verify_prop_crc)
        return self.plan


class _QueryOutput:
    """Where the messages found go: JSON lines, or the table."""

    def __init__(self, store, json_output: bool, body_mode: str, max_body_bytes: int | None):
        from .. import query as q
        from .inspect_view import TableRenderer
        self.store, self.body_mode = store, body_mode
        self.renderer = None if json_output else TableRenderer(stdout_console())
        self.max_body = max_body_bytes if (json_output or body_mode == "none"
                                           or max_body_bytes is not None) else 256
        self.reader = q.RecordReader(store.commitlog)

    def add(self, row: dict) -> None:
        if self.renderer is None:
            emit_json(row)
        else:
            self.renderer.add(row)

    def show(self, record, extra: dict, inner_position: int | None = None) -> None:
        from .. import inspect as lib
        stored = self.reader.body(record)
        seg = self.store.commitlog.segment_for(record.offset)
        out = lib.message_to_dict(record, stored, file=self.store.relative(seg.path),
                                  file_offset=record.offset - seg.base_offset,
                                  body_mode=self.body_mode, max_body_bytes=self.max_body)
        if inner_position is not None:
            out = next(d for d in lib.unwrap_message_dict(out, record, stored,
                                                          body_mode=self.body_mode,
                                                          max_body_bytes=self.max_body)
                       if d.get("inner_batch", {}).get("position") == inner_position)
        out.update(extra)
        self.add(out)

    def flush(self) -> None:
        if self.renderer is not None:
            self.renderer.flush()


def _broker_compatible_query(store, out: _QueryOutput, plan: _LazyPlan, topic, key, uniq_key,
                             since_ms, until_ms) -> None:
    """--broker-compatible: the offsets of the broker's own queryMessage, and their messages."""
    from .. import query as q
    value = key if key is not None else q.check_hex_id(uniq_key, "UNIQ_KEY")
    begin = since_ms if since_ms is not None else 0
    end = until_ms if until_ms is not None else q.JAVA_LONG_MAX
    offsets = q.broker_query_message(store, topic, value, q.MAX_MSGS_NUM_BATCH, begin, end,
                                     max_offset=plan().process_offset)
    records = [(o,) + out.reader.at(o) for o in offsets]
    for o, record, why in records:
        if record is None:
            out.add({"record_type": "query/unreadable", "commitlog_offset": o, "detail": why})
        else:
            out.show(record, {"found_by": "broker-compatible"})
    out.flush()
    summary = {"record_type": "query/summary", "query": {
        "mode": "broker-compatible", "topic": topic, "key": value, "begin": begin,
        "end": end}, "found": len(offsets), "offsets": offsets,
        "readable_end": plan().process_offset}
    if out.renderer is None:
        emit_json(summary)
    out.reader.close()
    sys.stderr.write(f"mqtool: queryMessage({topic}, {value}) returns {len(offsets)} "
                     f"offset(s)\n")
    if not offsets:
        raise typer.Exit(EXIT_FINDINGS)


def _run_query(store, mode: str, *, msg_id, uniq_key, key, topic, queue, offset, time,
               since_ms, until_ms, max_results, scan):
    """The query the mode asks for (mqtool.query)."""
    from .. import inspect as lib
    from .. import query as q
    if mode == "--msg-id":
        return q.query_msg_id(store, msg_id)
    if mode == "--uniq-key":
        return q.query_uniq_key(store, uniq_key, topic, use_index=not scan)
    if mode == "--key":
        return q.query_key(store, key, topic, since=since_ms, until=until_ms,
                           max_results=max_results, use_index=not scan)
    if mode == "--offset":
        return q.query_queue_offset(store, topic, queue, offset)
    return q.query_queue_time(store, topic, queue, lib.parse_time(time))


def _show_traces(store, out: _QueryOutput, result, uniq_key, trace_topic) -> list:
    """--traces: the trace records of the messages found, shown after them."""
    from .. import query as q
    ids = [uniq_key] if uniq_key else []
    for found in result.found:
        if found.record.topic != trace_topic:
            ids += q.trace_ids(found.record)
    trace_found = q.query_traces(store, ids, trace_topic, out.reader)
    for found in trace_found:
        out.show(found.record, found.annotations())
    result.details["traces"] = [f.record.offset for f in trace_found]
    return trace_found


def _finish_query(store, out: _QueryOutput, result, plan: _LazyPlan | None, traces: bool,
                  trace_found: list) -> None:
    """The summary (and --explain's explanation), the notes, the exit status."""
    from .. import query as q
    out.reader.close()
    out.flush()
    explanation = q.explain(store, result, plan=plan()) if plan is not None else None
    if out.renderer is None:
        emit_json({"record_type": "query/summary", **result.summary()})
        if explanation is not None:
            emit_json({"record_type": "query/explanation", **explanation})
    elif explanation is not None:
        _render_explanation(explanation, stdout_console())
    flush_stdout()
    for text in result.notes:
        _note(text)
    if result.collisions:
        _note(f"{len(set(result.collisions))} index entr(ies) with the key's hash belong to other "
              f"keys (hash collisions); left out")
    sys.stderr.write(f"mqtool: {len(result.found)} message(s) found"
                     + (f", {len(trace_found)} trace record(s)" if traces else "") + "\n")
    if not result.found:
        raise typer.Exit(EXIT_FINDINGS)


# --- salvage -------------------------------------------------------------------------------------

@contextmanager
def _output(path: Path | None, store: Store):
    """A text stream for JSON lines: the file (refused inside the store) or stdout for '-'."""
    if path is None or str(path) == "-":
        yield sys.stdout
        return
    from ..salvage import check_output_outside

    from ..writer import output_file

    check_output_outside(store, path)
    with output_file(path, "w", encoding="utf-8") as fh:
        yield fh


def _writer(stream):
    """JSON lines as emit_json writes them; one reused encoder (json.dumps with options builds
    a new one per call, which doubles the cost for millions of messages)."""
    encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"),
                              check_circular=False).encode

    def write(obj: dict) -> None:
        stream.write(encode(obj) + "\n")
    return write


@commands.command("salvage")
@error_boundary
def salvage_command(
    store_path: Path = opt.store(),
    out: Path = typer.Option(..., "--out", metavar="FILE.jsonl", help="Where the messages go, "
                             "one JSON object per line ('-' for stdout). Never inside the "
                             "store."),
    map_path: Optional[Path] = typer.Option(None, "--map", metavar="FILE.json",
                                            help="Write the island/hole map here (default: "
                                                 "stdout, unless --out is '-')."),
    beyond_truncation: bool = typer.Option(False, "--beyond-truncation", help="Write only the "
                                           "messages at or past the point where the broker's "
                                           "next start truncates the CommitLog."),
    include_damaged: bool = typer.Option(False, "--include-damaged", help="Also write records "
                                         "that decode but fail a check (body CRC, offset), "
                                         "marked with 'damage'."),
    open_transactions: bool = typer.Option(False, "--open-transactions", help="Only the "
                                           "transactions the store shows neither committed nor "
                                           "rolled back: the newest half copy of each, with its "
                                           "real topic and what the next check does (see mqtool "
                                           "transactions)."),
    unconsumed_by: Optional[str] = typer.Option(None, "--unconsumed-by", metavar="GROUP",
                                                help="Write only the messages GROUP has not "
                                                     "consumed (at or after its committed "
                                                     "offset in each of its queues)."),
    body: Optional[str] = opt.body("base64"),
    no_decompress: bool = opt.no_decompress(),
    no_unwrap: bool = opt.no_unwrap(),
    broker_version: str = opt.broker_version(),
    force_verify_prop_crc: bool = opt.force_verify_prop_crc(),
    commitlog_file_size: Optional[int] = opt.commitlog_file_size(),
    commitlog_dirs: Optional[str] = opt.commitlog_dirs(),
    broker_config: Optional[Path] = opt.broker_config(),
):
    """Get every intact message off a damaged store, past any damage, with a map of what is
    lost. Read-only."""
    from ..salvage import check_output_outside, salvage

    _check_version(broker_version)
    body_mode = opt.body_mode(body, "base64")
    store = opt.open_store(store_path, commitlog_file_size,
                           commitlog_dirs=commitlog_dirs, broker_config=broker_config)
    if map_path is not None:
        check_output_outside(store, map_path)
    positions = None
    if unconsumed_by is not None:
        from ..consumers import committed_offsets
        positions = committed_offsets(store, unconsumed_by)
    total = sum(s.length for s in store.commitlog.segments)
    with _output(out, store) as stream, progress_bar(total, "salvaging") as bar:
        report = salvage(store, _writer(stream), beyond_truncation_only=beyond_truncation,
                         include_damaged=include_damaged, body_mode=body_mode,
                         decompress=not no_decompress, unwrap=not no_unwrap,
                         broker_version=broker_version,
                         force_verify_prop_crc=force_verify_prop_crc, progress=bar,
                         unconsumed=positions)
    document = report.to_dict()
    if map_path is not None:
        from ..writer import output_file

        with output_file(map_path, "w", encoding="utf-8") as fh:
            fh.write(jsontext.dumps(document, indent=2) + "\n")
    elif str(out) != "-":
        emit_json_document(document)
    t = report.truncation
    sys.stderr.write(
        f"mqtool: {report.messages_written} message(s) written ({report.messages_intact} intact, "
        f"{report.messages_damaged} damaged, {report.messages_beyond_truncation} beyond the "
        f"broker's truncation point {t['process_offset']}); {len(report.islands)} island(s), "
        f"{len(report.holes)} hole(s), {report.bytes_lost:,} byte(s) lost\n")


# --- export --------------------------------------------------------------------------------------

EXPORT_FORMATS = ("jsonl",)


@commands.command("export")
@error_boundary
def export_command(
    store_path: Path = opt.store(),
    output_format: str = typer.Option("jsonl", "--format", metavar="FORMAT",
                                      help="jsonl (one JSON object per "
                                           "message)."),
    topic: Optional[List[str]] = opt.topic("Only this topic (stored or real topic of a "
                                           "delayed/half message); repeatable."),
    since: Optional[str] = opt.since(),
    until: Optional[str] = opt.until(),
    live_only: bool = typer.Option(False, "--live-only", help="Leave out messages the broker's "
                                   "next start would truncate."),
    pending_timers: bool = typer.Option(False, "--pending-timers", help="Only the 5.x timer "
                                        "messages still pending in the timer wheel (see mqtool "
                                        "timers), each with its due time, for replay elsewhere."),
    open_transactions: bool = typer.Option(False, "--open-transactions", help="Only the "
                                           "transactions the store shows neither committed nor "
                                           "rolled back: the newest half copy of each, with its "
                                           "real topic and what the next check does (see mqtool "
                                           "transactions)."),
    unconsumed_by: Optional[str] = typer.Option(None, "--unconsumed-by", metavar="GROUP",
                                                help="Only the messages at or after GROUP's "
                                                     "committed offset in each of its queues "
                                                     "(config/consumerOffset.json, or its .bak "
                                                     "as the broker would load it)."),
    out: Optional[Path] = typer.Option(None, "--out", metavar="FILE.jsonl", help="Write here "
                                       "instead of stdout (never inside the store)."),
    body: Optional[str] = opt.body("base64"),
    no_decompress: bool = opt.no_decompress(),
    no_unwrap: bool = opt.no_unwrap(),
    broker_version: str = opt.broker_version(),
    commitlog_file_size: Optional[int] = opt.commitlog_file_size(),
    commitlog_dirs: Optional[str] = opt.commitlog_dirs(),
    broker_config: Optional[Path] = opt.broker_config(),
):
    """Export every intact message for replay (JSON lines), delayed, timer and transaction-half
    messages marked with their real topic. Read-only."""
    from ..inspect import parse_time
    from ..salvage import export_messages

    if output_format not in EXPORT_FORMATS:
        raise MqtoolError(f"--format must be one of {', '.join(EXPORT_FORMATS)}, not "
                          f"{output_format!r}")
    _check_version(broker_version)
    body_mode = opt.body_mode(body, "base64")
    store = opt.open_store(store_path, commitlog_file_size,
                           commitlog_dirs=commitlog_dirs, broker_config=broker_config)
    since_ms = parse_time(since) if since is not None else None
    until_ms = parse_time(until) if until is not None else None
    positions = None
    if unconsumed_by is not None:
        from ..consumers import committed_offsets
        positions = committed_offsets(store, unconsumed_by)
    total = sum(s.length for s in store.commitlog.segments)
    with _output(out, store) as stream, progress_bar(total, "exporting") as bar:
        stats = export_messages(store, _writer(stream), topics=topic or None, since=since_ms,
                                until=until_ms, live_only=live_only, body_mode=body_mode,
                                decompress=not no_decompress, unwrap=not no_unwrap,
                                broker_version=broker_version, pending_timers=pending_timers,
                                open_transactions=open_transactions, progress=bar,
                                unconsumed=positions)
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(stats.by_kind.items())) or "none"
    sys.stderr.write(f"mqtool: exported {stats.exported} message(s) ({kinds})\n")
    if stats.damaged_skipped:
        sys.stderr.write(f"mqtool: warning: {stats.damaged_skipped} damaged record(s) left out "
                         f"(see mqtool salvage --include-damaged)\n")


# --- diff ----------------------------------------------------------------------------------------

def _render_diff(result: dict) -> None:
    console = stdout_console()
    cl = result["commitlog"]
    console.print(f"a: {result['a']}\nb: {result['b']}", markup=False, soft_wrap=True)
    if result["identical"]:
        console.print("identical: same CommitLog records, same ConsumeQueue units",
                      markup=False)
    first = cl["first_divergent_offset"]
    console.print(f"CommitLog: first divergent offset "
                  f"{first if first is not None else '- (none)'}; {cl['records_same']:,} "
                  f"record(s) the same, {cl['records_different']['count']:,} different, "
                  f"{cl['records_only_in_a']['count']:,} only in a "
                  f"({cl['records_only_in_a']['bytes']:,} bytes), "
                  f"{cl['records_only_in_b']['count']:,} only in b "
                  f"({cl['records_only_in_b']['bytes']:,} bytes)", markup=False, soft_wrap=True)
    for label, key in (("only in a", "records_only_in_a"), ("only in b", "records_only_in_b"),
                       ("different", "records_different")):
        for r in cl[key]["first"][:5]:
            console.print(f"  {label}: offset {r['commitlog_offset']} {r['topic']}/"
                          f"{r['queue_id']} queue offset {r['queue_offset']} "
                          f"({r['size']} bytes)", markup=False, soft_wrap=True)
    cq = result["consume_queues"]
    console.print(f"ConsumeQueues: {cq['queues_different']} queue(s) differ ({cq['queues_a']} "
                  f"in a, {cq['queues_b']} in b)" if cq["queues_different"] else
                  f"ConsumeQueues: all {cq['queues_a']} queue(s) the same", markup=False)
    for x in cq["queues"]:
        console.print(f"  {x['topic']}/{x['queue_id']}: a {x['a']}, b {x['b']}, first divergent "
                      f"queue offset {x['first_divergent_queue_offset']} "
                      f"({x['units_only_in_a']} only in a, {x['units_only_in_b']} only in b, "
                      f"{x['units_different']} different)", markup=False, soft_wrap=True)
    for note in result["notes"]:
        console.print(f"note: {note}", markup=False, soft_wrap=True)


@commands.command("diff")
@error_boundary
def diff_command(
    store_a: Path = typer.Argument(..., metavar="STORE_A", help="First store (e.g. the master "
                                   "or the backup)."),
    store_b: Path = typer.Argument(..., metavar="STORE_B", help="Second store (e.g. the slave "
                                   "or the live store)."),
    json_output: bool = opt.json_output(),
    limit: int = typer.Option(20, "--limit", help="List at most N records per kind of "
                              "difference."),
):
    """Compare two stores: first divergent CommitLog offset, records on one side only, per-queue
    ConsumeQueue divergence. Exit 0 identical, 1 different. Read-only."""
    from ..diff import diff_stores
    from ..store import Store

    opt.check_not_negative(limit, "--limit")
    a, b = Store(store_a), Store(store_b)
    warn_if_live(store_a)
    warn_if_live(store_b)
    total = sum(s.length for s in a.commitlog.segments) + sum(s.length for s in
                                                              b.commitlog.segments)
    with progress_bar(total, "comparing") as bar:
        result = diff_stores(a, b, list_limit=limit, progress=bar)
    if json_output:
        emit_json_document(result)
    else:
        _render_diff(result)
    if not result["identical"]:
        raise typer.Exit(EXIT_FINDINGS)
