"""``mqtool failover``: argument parsing and rendering of :func:`mqtool.failover.failover_report`."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..errors import EXIT_FINDINGS
from . import options as opt
from .common import (Commands, emit_json_document, error_boundary, grid, stdout_console,
                     warn_if_live)

commands = Commands()


@commands.command("failover")
@error_boundary
def failover_command(
    old_store: Path = typer.Argument(..., metavar="OLD_MASTER_STORE", help="The store of the "
                                     "broker that was master before the switch (before it "
                                     "rejoins as a slave)."),
    new_store: Path = typer.Argument(..., metavar="NEW_MASTER_STORE", help="The store of the "
                                     "broker that took over (a copy is fine)."),
    json_output: bool = opt.json_output("One JSON document on stdout: both sides' epochs and max "
                                        "offsets, the consistent point, every old-master message "
                                        "past it marked resent or lost."),
    export: Optional[Path] = typer.Option(None, "--export", metavar="FILE.jsonl", help="Write the "
                                          "lost messages here as mqtool export writes them "
                                          "(replayable JSON lines; '-' for stdout). Never "
                                          "inside either store."),
    body: Optional[str] = opt.body("base64"),
    limit: int = typer.Option(50, "--limit", help="List at most N messages in the table "
                              "(--json lists all)."),
):
    """List the old master's messages the new master never got (5.x controller mode).

    Computes the consistent point from both stores' epochFileCheckpoint as the old master's
    rejoin computes it (the newest epoch both have with the same start offset, cut at the
    smaller end), lists the old master's messages past it, and marks each 'resent' (the new
    master holds its UNIQ_KEY) or 'lost'. Exit 0 when nothing is lost, 1 when messages are lost.
    Read-only."""
    from ..failover import export_lost, failover_report
    from ..store import Store
    from .query_cmds import _output, _writer

    opt.check_not_negative(limit, "--limit")
    body_mode = opt.body_mode(body, "base64")
    old, new = Store(old_store), Store(new_store)
    warn_if_live(old_store)
    warn_if_live(new_store)
    report = failover_report(old, new)
    if export is not None:
        from ..salvage import check_output_outside
        if str(export) != "-":
            check_output_outside(new, export)
        with _output(export, old) as stream:
            written = export_lost(old, report, _writer(stream), body_mode=body_mode)
        sys.stderr.write(f"mqtool: exported {written} lost message(s)\n")
    if json_output:
        if export is None or str(export) != "-":
            emit_json_document(report.to_dict())
    elif export is None or str(export) != "-":
        _render(report.to_dict(), limit)
    if report.lost:
        raise typer.Exit(EXIT_FINDINGS)


def _render(doc: dict, limit: int) -> None:
    out = stdout_console()
    if not out.is_terminal:
        out = stdout_console(width=240)
    for side in ("old", "new"):
        epochs = ", ".join(f"{e['epoch']}@{e['start_offset']:,}" for e in doc[f"{side}_epochs"])
        out.print(f"{side} master: {doc[f'{side}_store']}  max offset "
                  f"{doc[f'{side}_max_offset']:,}  epochs {epochs}", markup=False,
                  soft_wrap=True)
    out.print(f"consistent point: {doc['consistent_point']:,} (epoch {doc['shared_epoch']}); "
              f"the rejoin truncates {doc['truncated_bytes']:,} byte(s) of the old master",
              markup=False)
    s = doc["summary"]
    out.print(f"past it: {s['past_consistent_point']} message(s): {s['resent']} resent, "
              f"{s['lost']} lost", markup=False)
    table = grid("offset", "topic", "queue", "q-offset", "UNIQ_KEY", "keys", "status",
                 "new master at")
    for m in doc["messages"][:limit]:
        table.add_row(str(m["commitlog_offset"]), m["topic"], str(m["queue_id"]),
                      str(m["queue_offset"]), str(m["uniq_key"] or "-"), str(m["keys"] or "-"),
                      m["failover"], ",".join(map(str, m["new_master_offsets"])) or "-")
    out.print(table)
    if len(doc["messages"]) > limit:
        out.print(f"... {len(doc['messages']) - limit} more (--json lists all)", markup=False)
