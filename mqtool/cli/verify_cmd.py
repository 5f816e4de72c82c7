"""``mqtool verify STORE``: check a store and predict the broker's next start (rendering only;
the checks are :mod:`mqtool.verify`, the prediction :mod:`mqtool.recovery`)."""
from __future__ import annotations

import collections
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..errors import EXIT_FINDINGS, EXIT_OK
from ..vocabulary import CODES
from . import options as opt
from .common import (Commands, emit_json_document, error_boundary, fail, progress_bar,
                     render_passport, stdout_console)

if TYPE_CHECKING:
    from ..verify import VerifyReport

commands = Commands()

_FIRST_OFFSETS = 3
_DETAIL_LINES = 20


def _geometry_line(report: VerifyReport) -> str:
    g = report.geometry
    return (f"geometry: CommitLog {g['commitlog_files']} file(s) of {g['commitlog_file_size']:,} "
            f"bytes from offset {g['commitlog_min_offset']:,}; ConsumeQueue {g['consume_queues']} "
            f"queue(s), {g['cq_files']} file(s) of {g['cq_units_per_file']:,} units; IndexFile "
            f"{g['index_files']} file(s) of {g['index_slots']:,} slots x {g['index_entries']:,} "
            f"entries; broker rules {g['broker_version']}")


def _render(report: VerifyReport, passport: dict) -> None:
    out = stdout_console()
    summary = report.summary
    out.print(f"store: {report.store}", markup=False, soft_wrap=True)
    out.print(_geometry_line(report), markup=False, soft_wrap=True)
    render_passport(passport, out)
    out.print(f"scanned: {summary['messages_scanned']:,} records in "
              f"{summary['commitlog_bytes']:,} CommitLog bytes", markup=False)
    out.print()
    out.print(f"findings: {summary['errors']} error(s), {summary['warnings']} warning(s), "
              f"{summary['infos']} info", markup=False)
    if report.findings:
        from rich.table import Table

        by_code = collections.OrderedDict()
        for f in sorted(report.findings, key=lambda f: (f.code, f.file, f.offset)):
            by_code.setdefault(f.code, []).append(f)
        table = Table(show_edge=False, pad_edge=False, box=None)
        for column in ("code", "severity", "count", "first locations (file:offset)"):
            table.add_column(column, overflow="fold")
        for code, items in by_code.items():
            severities = sorted({f.severity for f in items})
            where = ", ".join(f"{f.file}:{f.offset}" for f in items[:_FIRST_OFFSETS])
            if len(items) > _FIRST_OFFSETS:
                where += ", ..."
            table.add_row(code, "/".join(severities), str(summary["by_code"].get(code, len(items))),
                          where)
        out.print(table)
        out.print()
        ordered = sorted(report.findings, key=lambda f: ({"error": 0, "warning": 1}.get(f.severity, 2),
                                                         f.file, f.offset))
        for f in ordered[:_DETAIL_LINES]:
            out.print(f"  {f.severity:7} {f.code} {f.file}:{f.offset}: {f.message}", markup=False,
                      soft_wrap=True)
        if len(ordered) > _DETAIL_LINES:
            out.print(f"  ... {len(ordered) - _DETAIL_LINES} more (--json lists them all)",
                      markup=False)
    out.print()
    _render_plan(out, report)


def _render_plan(out, report: VerifyReport) -> None:
    plan = report.recovery
    out.print(f"What the broker would do on next start ({plan.broker_version} rules, {plan.mode} "
              f"recovery{'' if plan.last_exit_ok else ', abort file present'}):", markup=False,
              soft_wrap=True)
    lines = []
    if plan.refuses_to_start:
        lines.append("refuses to start: " + "; ".join(plan.refuses_to_start))
    if plan.start_file is None:
        lines.append("no CommitLog file: every ConsumeQueue is destroyed")
    else:
        lines.append(f"start file: {plan.start_file} ({plan.start_reason})")
        lines.append(f"processOffset: {plan.process_offset:,} (scan stops in {plan.stop_file} at "
                     f"position {plan.stop_position:,}: {plan.stop_reason})")
        crc = "" if plan.crc_verified else " (CRCs not checked: --quick)"
        lines.append(f"drops: {plan.messages_lost:,} message(s), {plan.bytes_dropped:,} bytes{crc}")
        deleted = ", ".join(plan.commitlog_files_deleted) or "none"
        lines.append(f"CommitLog files deleted: {deleted}; cut: {plan.cut_file} at "
                     f"{plan.stop_position:,}")
        queues = sum(1 for t in plan.cq_truncations if t.units)
        lines.append(f"ConsumeQueue: max physical offset {plan.max_phy_offset_of_consume_queue:,}; "
                     f"{plan.cq_units_truncated:,} unit(s) truncated in {queues} queue(s)"
                     + ("" if plan.cq_truncate_called else " (queues end before processOffset: "
                                                          "not truncated)"))
        if plan.redispatch_from is not None:
            lines.append(f"re-dispatch: from {plan.redispatch_from:,} ({plan.redispatch_rule})")
        else:
            lines.append(f"re-dispatch: none ({plan.redispatch_rule})")
        lines.append(f"IndexFiles deleted: {', '.join(plan.index_files_deleted) or 'none'}; "
                     f"kept entries pointing at or past processOffset: {plan.index_entries_stale:,}")
        if plan.confirm_offset is not None:
            lines.append(f"confirmOffset: {plan.confirm_offset:,}")
        if plan.rocksdb is not None:
            r = plan.rocksdb
            stale = ", ".join(r["queues_with_stale_units"][:5]) or "none"
            lines.append(f"RocksDB ConsumeQueue: now {r['units_now']:,} units (CQ checkpoint "
                         f"{r['checkpoint'] if r['checkpoint'] is not None else 'absent'}); the "
                         f"start dispatches {r['redispatched_units']:,} again and leaves "
                         f"{r['units_after_start']:,} served, {r['stale_units_after_start']:,} "
                         f"stale (queues: {stale}), CQ checkpoint "
                         f"{r['cq_checkpoint_after_start']:,}")
    for note in plan.notes:
        lines.append(f"note: {note}")
    for line in lines:
        out.print(f"  {line}", markup=False, soft_wrap=True)


def _load_expectation(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        fail(f"{path}: no such file")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        fail(f"{path}: not a JSON expectation file ({err})")


_SUMMARY = ("Check every file of a store (CommitLog records and CRCs, ConsumeQueue units, "
            "IndexFile headers, entries and hash chains, checkpoint) and predict what the "
            "broker's next start does to it.")
_HELP = (_SUMMARY + "\n\nExit status: 0 no error, 1 errors found (or an --expect mismatch), 2 "
         f"bad usage or unreadable input.\n\nFinding codes: {', '.join(CODES)}.")


@commands.command("verify", help=_HELP)
@error_boundary
def verify(
    store_path: Path = opt.store(),
    json_output: bool = opt.json_output(),
    quick: bool = typer.Option(False, "--quick", help="Skip CRC checks (the prediction then "
                                                     "assumes every CRC is good)."),
    broker_version: str = opt.broker_version(),
    mode: str = opt.mode(),
    force_verify_prop_crc: bool = opt.force_verify_prop_crc(),
    message_index_safe: bool = opt.message_index_safe(),
    expect: Path = typer.Option(None, "--expect", metavar="EXPECTED.json",
                                help="Exit 0 exactly when the findings (code, file, offset) match "
                                     "this file (a --json document or a list of findings)."),
    commitlog_file_size: int = opt.commitlog_file_size(min=1),
    commitlog_dirs: Optional[str] = opt.commitlog_dirs(),
    broker_config: Optional[Path] = opt.broker_config(),
    cq_units: int = opt.cq_units(min=1),
    index_slots: int = opt.index_slots(min=1),
    index_entries: int = opt.index_entries(min=1),
    workers: int = typer.Option(None, "--workers", min=1,
                                help="Processes sharing the CommitLog files, a file each at a "
                                     "time (default: one per core this process may use; 1 "
                                     "checks them in this process); workers beyond the number "
                                     "of files are threads of each process's native pass."),
):
    """Check a store and predict the broker's next start (see ``_HELP``)."""
    from ..passport import store_passport
    from ..verify import compare_findings, verify_store

    opt.check_broker_version(broker_version)
    opt.check_mode(mode)
    expectation = _load_expectation(expect) if expect is not None else None
    store = opt.open_store(store_path, commitlog_file_size, cq_units, index_slots, index_entries,
                           commitlog_dirs=commitlog_dirs, broker_config=broker_config)
    total = sum(s.length for s in store.commitlog.segments)
    with progress_bar(total, "verify") as bar:
        report = verify_store(store, quick=quick, progress=bar, broker_version=broker_version,
                              mode=mode, force_verify_prop_crc=force_verify_prop_crc,
                              message_index_safe=message_index_safe, workers=workers)
    # --quick checks no CRC, so it cannot tell whether records carry a property CRC
    passport = store_passport(store, v2_records=report.summary["v2_records"],
                              prop_crc_records=None if quick
                              else report.summary["prop_crc_records_checked"],
                              own_property_batch_records=report.summary[
                                  "own_property_batch_records"],
                              max_offset=report.recovery.process_offset)
    if expectation is not None:
        try:
            missing, unexpected = compare_findings(report, expectation)
        except ValueError as err:
            fail(f"{expect}: {err}")
        if json_output:
            emit_json_document({"expect": str(expect), "match": not missing and not unexpected,
                                "missing": [dict(zip(("code", "file", "offset"), k)) for k in missing],
                                "unexpected": [dict(zip(("code", "file", "offset"), k))
                                               for k in unexpected]})
        else:
            out = stdout_console()
            for code, file, offset in missing:
                out.print(f"missing: {code} {file}:{offset}", markup=False, soft_wrap=True)
            for code, file, offset in unexpected:
                out.print(f"unexpected: {code} {file}:{offset}", markup=False, soft_wrap=True)
        matched = not missing and not unexpected
        sys.stderr.write(f"mqtool: verify: findings {'match' if matched else 'differ from'} "
                         f"{expect} ({len(missing)} missing, {len(unexpected)} unexpected)\n")
        raise typer.Exit(EXIT_OK if matched else EXIT_FINDINGS)
    if json_output:
        emit_json_document({**report.to_dict(), "passport": passport})
    else:
        _render(report, passport)
    summary = report.summary
    sys.stderr.write(f"mqtool: verify: {summary['errors']} error(s), {summary['warnings']} "
                     f"warning(s)\n")
    raise typer.Exit(EXIT_FINDINGS if summary["errors"] else EXIT_OK)

