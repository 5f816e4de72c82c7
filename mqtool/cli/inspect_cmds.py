"""``mqtool info`` and ``mqtool dump``: argument parsing of mqtool.inspect; the rendering is in
inspect_view."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Optional

import typer

from ..vocabulary import FILE_KINDS
from . import options as opt
from .common import (SETTINGS, Commands, emit_json, emit_json_document, error_boundary,
                     flush_stdout, progress_bar, stdout_console, warn_if_live)

commands = Commands()


@commands.command("info")
@error_boundary
def info_command(
    store_path: Path = opt.store(),
    json_output: bool = opt.json_output(),
    queues: bool = typer.Option(False, "--queues", help="One row per topic queue "
                                "(default: one per topic)."),
    check_crc: bool = typer.Option(False, "--check-crc", help="Also verify body/property "
                                   "CRCs while scanning (slower)."),
    commitlog_file_size: Optional[int] = opt.commitlog_file_size(),
    commitlog_dirs: Optional[str] = opt.commitlog_dirs(),
    broker_config: Optional[Path] = opt.broker_config(),
    cq_units: Optional[int] = opt.cq_units(),
    index_slots: Optional[int] = opt.index_slots(),
    index_entries: Optional[int] = opt.index_entries(),
):
    """One screen about a store: files, CommitLog extent and message counts, topics x queues
    (CommitLog vs ConsumeQueue), IndexFiles, checkpoint, abort/lock, configs, geometry."""
    from .. import inspect as lib
    from .inspect_view import render_info

    store = opt.open_store(store_path, commitlog_file_size, cq_units, index_slots, index_entries,
                           commitlog_dirs=commitlog_dirs, broker_config=broker_config)
    with progress_bar(sum(seg.length for seg in store.commitlog.segments), "scanning") as bar:
        info = lib.store_info(store, check_crc=check_crc, progress=bar)
    for item in info["repair_leftovers"]:
        sys.stderr.write(f"mqtool: warning: {item['code']}: {item['path']}: {item['detail']}\n")
    if json_output:
        emit_json_document(info)
    else:
        render_info(info, stdout_console(), queues)


# --- dump ----------------------------------------------------------------------------------------

def _scan_size(path: Path) -> int:
    """Bytes the progress bar will see: the CommitLog of a store, or the file itself."""
    if path.is_file():
        return path.stat().st_size
    commitlog = path / "commitlog"
    directory = commitlog if commitlog.is_dir() else path
    try:
        return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
    except OSError:
        return 0


@commands.command("dump")
@error_boundary
def dump_command(
    path: Path = typer.Argument(..., metavar="PATH",
                                help="A store root (dumps its CommitLog) or one store file: "
                                     "CommitLog segment, ConsumeQueue/BatchConsumeQueue file, "
                                     "IndexFile, checkpoint, abort, lock, config."),
    json_output: bool = opt.json_output("JSON lines on stdout, one object per record "
                                        "(record_type says which kind)."),
    topic: Optional[str] = opt.topic(),
    queue: Optional[int] = opt.queue(),
    from_offset: Optional[int] = typer.Option(None, "--from", metavar="OFFSET",
                                              help="CommitLog offset: records "
                                                   "starting at or after it."),
    to_offset: Optional[int] = typer.Option(None, "--to", metavar="OFFSET",
                                            help="CommitLog offset: records "
                                                 "starting before it."),
    since: Optional[str] = opt.since(),
    until: Optional[str] = opt.until(),
    key: Optional[str] = typer.Option(None, "--key", metavar="KEY",
                                      help="Only messages with this item in "
                                           "KEYS."),
    uniq_key: Optional[str] = typer.Option(None, "--uniq-key", metavar="ID",
                                           help="Only messages with this "
                                                "UNIQ_KEY."),
    body: Optional[str] = opt.body("text in the table, base64 in JSON"),
    max_body_bytes: Optional[int] = opt.max_body_bytes(),
    no_decompress: bool = opt.no_decompress(),
    resync: bool = typer.Option(False, "--resync", help="Continue past a corrupt region at the "
                                "next plausible record instead of ending that file."),
    messages_only: bool = typer.Option(False, "--messages-only", help="Leave out blank, "
                                       "unwritten and corrupt regions."),
    no_unwrap: bool = opt.no_unwrap(),
    follow_slot: Optional[int] = typer.Option(None, "--follow-slot", metavar="SLOT",
                                              help="IndexFile: walk "
                                                   "this hash slot's chain only."),
    kind: Optional[str] = typer.Option(None, "--kind", metavar="KIND", help="Force the kind of "
                                       f"a single file: {', '.join(FILE_KINDS)}."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Stop after N records."),
    commitlog_file_size: Optional[int] = opt.commitlog_file_size(),
    commitlog_dirs: Optional[str] = opt.commitlog_dirs(),
    broker_config: Optional[Path] = opt.broker_config(),
    cq_units: Optional[int] = opt.cq_units(),
    index_slots: Optional[int] = opt.index_slots(),
    index_entries: Optional[int] = opt.index_entries(),
):
    """Print the records of a store or a store file: messages (with filters), CQ units, index
    header/slots/entries, checkpoint fields. Read-only."""
    body_mode = opt.body_mode(body, "base64" if json_output else "text")
    options = _dump_options(
        body_mode, json_output=json_output, max_body_bytes=max_body_bytes, limit=limit,
        topic=topic, queue=queue, from_offset=from_offset, to_offset=to_offset, since=since,
        until=until, key=key, uniq_key=uniq_key, no_decompress=no_decompress, resync=resync,
        messages_only=messages_only, no_unwrap=no_unwrap, follow_slot=follow_slot, kind=kind,
        commitlog_file_size=commitlog_file_size, commitlog_dirs=commitlog_dirs,
        broker_config=broker_config, cq_units=cq_units, index_slots=index_slots,
        index_entries=index_entries)
    warn_if_live(path)
    _report_dump(_dump_records(path, options, json_output, limit))


def _dump_options(body_mode: str, *, json_output: bool, max_body_bytes, limit, topic, queue,
                  from_offset, to_offset, since, until, key, uniq_key, no_decompress, resync,
                  messages_only, no_unwrap, follow_slot, kind, commitlog_file_size,
                  commitlog_dirs, broker_config, cq_units, index_slots, index_entries):
    """dump's options checked (exit 2 on a bad one) and gathered into lib.DumpOptions."""
    from .. import inspect as lib
    from ..brokerconf import resolve_commitlog_dirs
    opt.check_not_negative(max_body_bytes, "--max-body-bytes")
    opt.check_not_negative(limit, "--limit")
    for value, name in ((from_offset, "--from"), (to_offset, "--to"), (queue, "--queue"),
                        (follow_slot, "--follow-slot")):
        opt.check_not_negative(value, name)
    if not json_output and max_body_bytes is None and body_mode != "none":
        max_body_bytes_effective = 256  # the table shows a preview only
    else:
        max_body_bytes_effective = max_body_bytes
    filters = lib.MessageFilter(
        topic=topic, queue_id=queue, from_offset=from_offset, to_offset=to_offset,
        since=lib.parse_time(since) if since is not None else None,
        until=lib.parse_time(until) if until is not None else None,
        key=key, uniq_key=uniq_key)
    opt.check_geometry(commitlog_file_size, cq_units, index_slots, index_entries)
    options = lib.DumpOptions(
        body=body_mode, max_body_bytes=max_body_bytes_effective, decompress=not no_decompress,
        resync=resync, messages_only=messages_only, unwrap=not no_unwrap, filters=filters,
        follow_slot=follow_slot, kind=kind, commitlog_file_size=commitlog_file_size,
        cq_units=cq_units, index_slots=index_slots, index_entries=index_entries,
        commitlog_dirs=resolve_commitlog_dirs(commitlog_dirs, broker_config))
    return options


def _dump_records(path: Path, options, json_output: bool, limit: int | None) -> Counter:
    """Every record dump_path yields, as JSON lines or the table, up to ``limit``; the count
    per record type."""
    from .. import inspect as lib
    from .inspect_view import TableRenderer
    counts: Counter = Counter()
    renderer = None if json_output else TableRenderer(stdout_console())
    with progress_bar(_scan_size(path), "dumping") as bar:
        options.progress = bar
        for record in lib.dump_path(path, options):
            if limit is not None and sum(counts.values()) >= limit:
                break
            if SETTINGS.stdout_gone:
                break       # the reader went away: nothing more to read the store for
            counts[record["record_type"]] += 1
            if renderer is None:
                emit_json(record)
            else:
                renderer.add(record)
    if renderer is not None:
        renderer.flush()
    return counts


def _report_dump(counts: Counter) -> None:
    """The summary line on stderr, and a warning where the input is damaged."""
    from .. import inspect as lib
    flush_stdout()
    summary = ", ".join(f"{n} {kind_name}" for kind_name, n in counts.items()) or "no records"
    sys.stderr.write(f"mqtool: dumped {summary}\n")
    for warning_kind in (lib.RT_CORRUPT, lib.RT_CQ_PARTIAL, lib.RT_BCQ_PARTIAL):
        if counts.get(warning_kind):
            sys.stderr.write(f"mqtool: warning: {counts[warning_kind]} {warning_kind} record(s): "
                             f"the input is damaged\n")
