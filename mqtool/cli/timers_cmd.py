"""``mqtool timers``: argument parsing and rendering of :func:`mqtool.timers.timer_report`."""
from __future__ import annotations

import datetime
from pathlib import Path
from typing import Optional

import typer

from ..errors import EXIT_FINDINGS
from . import options as opt
from .common import (Commands, emit_json_document, error_boundary, grid, stderr_console,
                     stdout_console)

commands = Commands()


def _utc(ms: int | None) -> str:
    if ms is None:
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + (f".{ms % 1000:03d}" if ms % 1000 else "")


@commands.command("timers")
@error_boundary
def timers_command(
    store_path: Path = opt.store(),
    json_output: bool = opt.json_output("One JSON document on stdout: checkpoint, TimerLog "
                                        "files, pending slots with their timers, delivered "
                                        "timers, the next start's prediction."),
    at: Optional[str] = typer.Option(None, "--at", metavar="TIME",
                                     help="When the broker is assumed to start "
                                          "again (epoch ms or ISO-8601; default: now): decides "
                                          "which pending timers are overdue and which slots are "
                                          "skipped."),
    show_delivered: bool = typer.Option(False, "--delivered", help="Also list the delivered "
                                        "timers in the table (always in --json)."),
    broker_version: str = opt.broker_version(),
    commitlog_file_size: Optional[int] = opt.commitlog_file_size(),
    commitlog_dirs: Optional[str] = opt.commitlog_dirs(),
    broker_config: Optional[Path] = opt.broker_config(),
):
    """Pending and delivered 5.x timer messages, and what the broker's next start does to them.

    The timer checkpoint, per wheel slot the pending timers (due time, real topic/queue,
    UNIQ_KEY, keys, CommitLog offset), the delivered ones with their copies, and each pending
    timer's fate at the next start (lost timers named). Read-only."""
    from ..inspect import parse_time
    from ..timers import timer_report

    opt.check_broker_version(broker_version)
    store = opt.open_store(store_path, commitlog_file_size,
                           commitlog_dirs=commitlog_dirs, broker_config=broker_config)
    start_ms = parse_time(at) if at is not None else None
    report = timer_report(store, start_ms=start_ms, broker_version=broker_version)
    if json_output:
        emit_json_document(report)
    else:
        _render(report, show_delivered)
    nxt = report["next_start"]
    if nxt["lost"] or nxt["refuses_to_start"]:
        raise typer.Exit(EXIT_FINDINGS)


def _grid(title: str, *columns: str):
    return grid(*columns, title=title, title_justify="left")


def _render(report: dict, show_delivered: bool) -> None:
    out = stdout_console()
    if not out.is_terminal:  # a pipe gets whole rows, not rows squeezed into 80 columns
        out = stdout_console(width=240)
    ckpt = report["checkpoint"]
    if ckpt is None:
        out.print("Timer checkpoint: missing or unreadable", markup=False)
    else:
        out.print(f"Timer checkpoint: lastReadTimeMs {ckpt['last_read_time_ms']} "
                  f"({_utc(ckpt['last_read_time_ms'])}), lastTimerLogFlushPos "
                  f"{ckpt['last_timer_log_flush_pos']}, lastTimerQueueOffset "
                  f"{ckpt['last_timer_queue_offset']}, masterTimerQueueOffset "
                  f"{ckpt['master_timer_queue_offset']}", markup=False, highlight=False)
    log = report["timerlog"]
    out.print(f"TimerLog: {len(log['files'])} file(s), {log['units']} unit(s), ends at "
              f"{log['end']}; wheel: {report['wheel']['used_slots']} used slot(s)", markup=False)
    out.print(f"Pending: {report['pending_count']} timer(s) in {len(report['pending_slots'])} "
              f"slot(s); delivered: {report['delivered_count']} (copies found: "
              f"{report['delivered_copies_found']})", markup=False)
    table = _grid("Pending timers", "due (UTC)", "slot", "real topic", "queue", "UNIQ_KEY",
                  "keys", "CommitLog offset", "next start")
    for slot in report["pending_slots"]:
        for t in slot["timers"]:
            table.add_row(_utc(slot["slot_time_ms"]), str(slot["slot"]),
                          str(t.get("real_topic") or "-"), str(t.get("real_queue_id", "-")),
                          str(t.get("uniq_key") or "-"), str(t.get("keys") or "-"),
                          str(t["commitlog_offset"]), t["next_start"])
    out.print(table)
    if show_delivered and report["delivered"]:
        done = _grid("Delivered timers", "due (UTC)", "real topic", "queue", "UNIQ_KEY",
                     "copy at")
        for t in report["delivered"]:
            copy = t.get("delivered_copy")
            done.add_row(_utc(t["slot_time_ms"]), str(t.get("real_topic") or "-"),
                         str(t.get("real_queue_id", "-")), str(t.get("uniq_key") or "-"),
                         "not found" if copy is None else str(copy["commitlog_offset"]))
        out.print(done)
    nxt = report["next_start"]
    err = stderr_console()
    fates = ", ".join(f"{n} {k}" for k, n in sorted(nxt["fates"].items())) or "nothing pending"
    err.print(f"Next start (assumed at {_utc(nxt['assumed_start_ms'])}): {fates}", markup=False)
    for why in nxt["refuses_to_start"]:
        err.print(f"  the broker refuses to start: {why}", markup=False, style="red")
    for t in nxt["lost"]:
        err.print(f"  lost: UNIQ_KEY {t.get('uniq_key')} due {_utc(t['deliver_time_ms'])} "
                  f"({t['next_start']}: {t['next_start_detail']})", markup=False, style="red")
    for problem in report["problems"]:
        err.print(f"  problem: {problem}", markup=False, style="yellow")
