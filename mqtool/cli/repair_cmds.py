"""``recover``, ``truncate``, ``rebuild-queues``, ``rebuild-index`` and ``undo``: argument parsing
and rendering only; planning, backup and apply live in :mod:`mqtool.repair` / :mod:`mqtool.backup`."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..errors import EXIT_FINDINGS, EXIT_OK
from . import options as opt
from .common import (Commands, emit_json_document, error_boundary, fail, progress_bar,
                     render_passport, stdout_console)

if TYPE_CHECKING:
    from ..repair import RepairResult

commands = Commands()

_LISTED_FILES = 40

_SAFETY = (
    "\n\nSafety: refuses (exit 3) a store whose lock file a live process holds; --dry-run prints "
    "the plan (files created, changed with byte ranges, deleted; messages, ConsumeQueue units and "
    "index entries affected; what is lost) and changes nothing. Otherwise every byte that will "
    "change or go away is first copied into STORE/.mqtool-backup/<UTC timestamp>/ (or "
    "--backup-dir), then files are rewritten through temp file + fsync + rename; 'mqtool undo "
    "BACKUP' restores the store byte for byte. A repair that was interrupted is finished by the "
    "next repair command. --out DIR repairs a copy and leaves STORE untouched. A repair in "
    "place holds the store's lock (the one the broker takes) for its whole run, so a broker "
    "started meanwhile refuses to start; a full disk stops it with exit 2 and the store as it "
    "was."
    "\n\nExit status: 0 nothing to do or repaired without loss, 1 repaired (or, with --dry-run, "
    "would repair) with data loss, 2 bad usage or unreadable store, 3 refused (store in use).")

# a repair needs the whole store: no bare CommitLog directory
_STORE_HELP = "Store root (commitlog/, consumequeue/, index/, checkpoint, ...)."
_REBUILD_WORKERS_HELP = ("N processes walk the CommitLog files ahead of the dispatch (default: the "
                         "cores this process may use; 1: everything in one process). The files "
                         "written are the same for every N.")


def _progress(desc: str, total: int):
    return progress_bar(total, desc)


def _render(result: RepairResult, command: str) -> None:
    out = stdout_console()
    plan = result.plan
    if plan is None:
        return
    out.print(f"store: {plan.store}", markup=False, soft_wrap=True)
    if plan.passport is not None:
        render_passport(plan.passport, out)
    summary = plan.summary
    if plan.recovery is not None and command in ("recover", "truncate"):
        rp = plan.recovery
        source = plan.options.get("broker_version_from")
        out.print(f"broker rules {rp.broker_version}"
                  + (f" (from the {source})" if source else "")
                  + f", {rp.mode} recovery: start file {rp.start_file}, processOffset "
                  f"{rp.process_offset:,} ({rp.stop_reason})", markup=False, soft_wrap=True)
    if plan.nothing_to_do:
        out.print("nothing to do: the store already is in the state this command produces",
                  markup=False)
    else:
        verb = {"planned": "would change", "repaired": "changed"}.get(result.status, "changes")
        out.print(f"{verb}: {summary['files_created']} file(s) created, "
                  f"{summary['files_changed']} changed ({summary['bytes_changed']:,} bytes), "
                  f"{summary['files_deleted']} deleted ({summary['bytes_deleted']:,} bytes)",
                  markup=False, soft_wrap=True)
        counts = []
        if "messages_removed" in summary:
            counts.append(f"messages removed {summary['messages_removed']:,}")
        counts.append(f"ConsumeQueue units -{summary['cq_units_removed']:,} "
                      f"+{summary['cq_units_added']:,}")
        counts.append(f"index entries -{summary['index_entries_removed']:,} "
                      f"+{summary['index_entries_added']:,}")
        out.print("; ".join(counts), markup=False, soft_wrap=True)
        ops = plan.ordered_ops()
        for op in ops[:_LISTED_FILES]:
            size = op.old_size if op.action == "delete" else op.new_size
            ranges = ", ".join(f"{s:,}-{e:,}" for s, e in op.ranges[:3])
            if len(op.ranges) > 3:
                ranges += f", ... ({len(op.ranges)} ranges)"
            extra = "".join(f"; {k.replace('_', ' ')} {v:,}" for k, v in op.detail.items()
                            if isinstance(v, int) and v)
            out.print(f"  {op.action:6} {op.path} ({size or 0:,} bytes"
                      + (f"; bytes {ranges}" if ranges and op.action == "change" else "")
                      + f"{extra}): {op.reason}", markup=False, soft_wrap=True)
        if len(ops) > _LISTED_FILES:
            out.print(f"... {len(ops) - _LISTED_FILES} more file(s) (--json lists them all)",
                      markup=False)
    for line in plan.lost:
        out.print(f"lost: {line}", markup=False, soft_wrap=True)
    for line in plan.notes:
        out.print(f"note: {line}", markup=False, soft_wrap=True)


def _report(result: RepairResult, command: str, json_output: bool) -> None:
    for warning in result.warnings:
        sys.stderr.write(f"mqtool: warning: {warning}\n")
    resumed = result.resumed
    if resumed is not None and resumed.get("unreported"):
        loss = "with data loss" if resumed.get("data_loss") else "without data loss"
        sys.stderr.write(f"mqtool: {command}: the last {resumed.get('command')} was stopped "
                         f"after its changes, before it reported: it repaired {loss} (backup: "
                         f"{resumed.get('backup_dir')})\n")
    elif resumed is not None:
        sys.stderr.write(f"mqtool: {command}: finished an interrupted "
                         f"{resumed.get('command')} first (backup: "
                         f"{resumed.get('backup_dir')})\n")
    if resumed is not None:
        for line in resumed.get("lost") or []:
            sys.stderr.write(f"mqtool: {command}: lost by the last {resumed.get('command')}: "
                             f"{line}\n")
    if json_output:
        emit_json_document(result.to_dict())
    else:
        _render(result, command)
    if result.status == "repaired" and result.backup is not None:
        tail = f"; backup: {result.backup}"
    elif result.status == "repaired" and result.out is not None:
        tail = f"; repaired copy: {result.out}"
    else:
        tail = ""
    loss = " with data loss" if result.data_loss else ""
    status = {"planned": f"dry run, nothing changed (the repair would run{loss})",
              "repaired": f"repaired{loss}"}.get(result.status, result.status)
    sys.stderr.write(f"mqtool: {command}: {status}{tail}\n")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass


def _run(command: str, store: Path, *, dry_run: bool, json_output: bool, backup_dir, out,
         broker_version: str, commitlog_dirs: Optional[str] = None,
         broker_config: Optional[Path] = None, **options) -> None:
    from .. import repair
    from ..brokerconf import resolve_commitlog_dirs

    opt.check_broker_version(broker_version)
    repair.refuse_commitlog_dirs(store, command,
                                 resolve_commitlog_dirs(commitlog_dirs, broker_config))
    if dry_run and out is not None:
        fail("--dry-run and --out do not go together")
    result = repair.run_repair(command, store, dry_run=dry_run, backup_dir=backup_dir, out=out,
                               progress=_progress, argv=sys.argv[1:],
                               report=lambda done: _report(done, command, json_output),
                               broker_version=broker_version, **options)
    raise typer.Exit(EXIT_FINDINGS if result.data_loss else EXIT_OK)


@commands.command("recover", help=(
    "Run the broker's startup recovery offline: normal or abnormal (abort file), the start file, "
    "the scan with CRC checks, CommitLog truncation at processOffset (later files deleted, the "
    "rest of the cut file erased unless --keep-stale), ConsumeQueue recovery and truncation, "
    "re-dispatch into ConsumeQueues and IndexFiles, IndexFiles deleted on abnormal load, the "
    "checkpoint update and removal of the abort file (on 5.x its PID goes to abort.bak and the "
    "compaction position checkpoint is persisted, as the 5.x broker does). The report starts "
    "with the store passport; the rules are the family it detects unless --broker-version says "
    "otherwise. The end state is what Apache RocketMQ leaves after starting on the store. On a "
    "DLedger-mode store (pure, or upgraded from a plain CommitLog) it is DLedger's own recovery: "
    "no CRC checked, nothing re-dispatched, the DLedger checkpoint and index updated; where the "
    "broker would exit instead of starting, recover refuses and 'mqtool truncate' cuts the log."
    + _SAFETY))
@error_boundary
def recover_cmd(
    store: Path = opt.store(_STORE_HELP),
    mode: str = opt.mode(),
    broker_version: str = opt.broker_version(),
    reindex_all: bool = typer.Option(False, "--reindex-all",
                                     help="Rebuild the index for every message instead of losing "
                                          "the entries of the IndexFile an abnormal load deletes."),
    keep_stale: bool = typer.Option(False, "--keep-stale",
                                    help="Leave bytes and index entries (DLedger: also "
                                         "DLedger index units) past the recovered end exactly "
                                         "as the broker does (default: erase them)."),
    no_check_crc: bool = typer.Option(False, "--no-check-crc",
                                      help="Recover with checkCRCOnRecover=false."),
    message_index_safe: bool = opt.message_index_safe(),
    force_verify_prop_crc: bool = opt.force_verify_prop_crc(),
    consumer_offsets: str = typer.Option(
        "keep", "--consumer-offsets", metavar="keep|clamp",
        help="keep: leave config/consumerOffset.json as the broker would (the plan says which "
             "offsets end up past their queue's end). clamp: set those offsets to the recovered "
             "end, and restore an unreadable consumerOffset.json / delayOffset.json from its "
             ".bak; backed up and undoable like every change."),
    workers: int = opt.workers("Abnormal recovery: N processes scan and check CommitLog files "
                               "ahead of the dispatch (default: the cores this process may "
                               "use; 1: everything in one process). The result is the same for "
                               "every N."),
    dry_run: bool = opt.dry_run(),
    json_output: bool = opt.json_output(),
    backup_dir: Path = opt.backup_dir(),
    out: Path = opt.out_dir(),
    commitlog_dirs: Optional[str] = opt.commitlog_dirs(opt.COMMITLOG_DIRS_HELP
                                                       + opt.REPAIR_DIRS_NOTE),
    broker_config: Optional[Path] = opt.broker_config(opt.BROKER_CONFIG_HELP
                                                      + opt.REPAIR_DIRS_NOTE),
):
    opt.check_mode(mode)
    if consumer_offsets not in ("keep", "clamp"):
        fail(f"--consumer-offsets {consumer_offsets!r}: choose keep or clamp")
    _run("recover", store, commitlog_dirs=commitlog_dirs, broker_config=broker_config, dry_run=dry_run, json_output=json_output, backup_dir=backup_dir,
         out=out, mode=mode, broker_version=broker_version,
         check_crc=not no_check_crc, message_index_safe=message_index_safe,
         force_verify_prop_crc=force_verify_prop_crc, reindex_all=reindex_all,
         keep_stale=keep_stale, consumer_offsets=consumer_offsets, workers=workers)


@commands.command("truncate", help=(
    "Cut the store at a CommitLog offset (default: the broker's processOffset): later CommitLog "
    "files are deleted and the rest of the cut file erased, ConsumeQueue units pointing at or "
    "past the offset are removed, IndexFiles holding entries at or past it are rebuilt under "
    "their own names, checkpoint timestamps later than the last kept message are lowered. "
    "The offset must be a record boundary. On a DLedger-mode store the ledger is cut at an entry "
    "(the offset is the entry's pos or its record's offset; default: where DLedger's recovery "
    "ends the log, also where the broker would refuse to start): later data files deleted, the "
    "rest of the cut file erased, the cut entries' DLedger index units erased, the DLedger "
    "checkpoint's endIndex set to the last entry kept." + _SAFETY))
@error_boundary
def truncate_cmd(
    store: Path = opt.store(_STORE_HELP),
    to: int = typer.Option(None, "--to", metavar="OFFSET", min=0,
                           help="Global CommitLog offset to cut at (a record boundary; "
                                "DLedger: an entry's pos or its record's offset)."),
    broker_version: str = opt.broker_version(),
    dry_run: bool = opt.dry_run(),
    json_output: bool = opt.json_output(),
    backup_dir: Path = opt.backup_dir(),
    out: Path = opt.out_dir(),
    commitlog_dirs: Optional[str] = opt.commitlog_dirs(opt.COMMITLOG_DIRS_HELP
                                                       + opt.REPAIR_DIRS_NOTE),
    broker_config: Optional[Path] = opt.broker_config(opt.BROKER_CONFIG_HELP
                                                      + opt.REPAIR_DIRS_NOTE),
):
    _run("truncate", store, commitlog_dirs=commitlog_dirs, broker_config=broker_config, dry_run=dry_run, json_output=json_output, backup_dir=backup_dir,
         out=out, to=to, broker_version=broker_version)


@commands.command("rebuild-queues", help=(
    "Regenerate ConsumeQueue files from the CommitLog records up to the recovered end, as the "
    "broker's dispatch writes them (file names, units per file, pre-blank units when a queue does "
    "not start at 0, only NOT/COMMIT records, tagsCode rules). Replaces the files of the selected "
    "queues; a queue without any record keeps its files." + _SAFETY))
@error_boundary
def rebuild_queues_cmd(
    store: Path = opt.store(_STORE_HELP),
    topic: str = opt.topic(),
    queue: int = opt.queue(min=0),
    cq_units: int = typer.Option(None, "--cq-units", min=1,
                                 help="Units per ConsumeQueue file (default: the store's, else "
                                      "300000)."),
    broker_version: str = opt.broker_version(),
    workers: int = opt.workers(_REBUILD_WORKERS_HELP),
    dry_run: bool = opt.dry_run(),
    json_output: bool = opt.json_output(),
    backup_dir: Path = opt.backup_dir(),
    out: Path = opt.out_dir(),
    commitlog_dirs: Optional[str] = opt.commitlog_dirs(opt.COMMITLOG_DIRS_HELP
                                                       + opt.REPAIR_DIRS_NOTE),
    broker_config: Optional[Path] = opt.broker_config(opt.BROKER_CONFIG_HELP
                                                      + opt.REPAIR_DIRS_NOTE),
):
    if out is not None and not dry_run and topic is None and queue is None and \
            commitlog_dirs is None and broker_config is None:
        from ..store import Store
        if Store.queues_live_in_rocksdb(store):
            _export_rocksdb(store, out, cq_units, json_output)
            return
    _run("rebuild-queues", store, commitlog_dirs=commitlog_dirs, broker_config=broker_config,
         dry_run=dry_run, json_output=json_output,
         backup_dir=backup_dir, out=out, topic=topic, queue_id=queue, cq_units=cq_units,
         broker_version=broker_version, workers=workers)


def _export_rocksdb(store: Path, out: Path, cq_units: int | None, json_output: bool) -> None:
    """rebuild-queues --out on a store whose ConsumeQueues live in RocksDB: the units its next
    start leaves, as file ConsumeQueues in OUT; the store is only read."""
    from ..rocksdb_recovery import export_file_queues
    from ..store import Store

    result = export_file_queues(Store(store), out, units_per_file=cq_units)
    if json_output:
        emit_json_document(result)
        return
    sys.stderr.write(
        f"mqtool: rebuild-queues: {result['units']:,} units of {result['queues']} queues "
        f"written as file ConsumeQueues ({result['units_per_file']:,} units per file) to "
        f"{result['out']}: the RocksDB ConsumeQueue as the broker's next start leaves it "
        f"(processOffset {result['process_offset']:,}, {result['redispatched_units']:,} units "
        f"dispatched again from {result['start_file']}); the store was not changed\n")


@commands.command("rebuild-index", help=(
    "Regenerate every IndexFile from the CommitLog records up to the recovered end, as the "
    "broker's buildIndex writes them (UNIQ_KEY and each KEYS item as topic#key, rollback records "
    "skipped, roll-over to a new file when full, names from store time); replaces the existing "
    "IndexFiles and sets the checkpoint's indexMsgTimestamp to match." + _SAFETY))
@error_boundary
def rebuild_index_cmd(
    store: Path = opt.store(_STORE_HELP),
    slots: int = typer.Option(None, "--slots", min=1,
                              help="Hash slots per IndexFile (default: the store's)."),
    entries: int = typer.Option(None, "--entries", min=2,
                                help="Entries per IndexFile (default: the store's)."),
    broker_version: str = opt.broker_version(),
    workers: int = opt.workers(_REBUILD_WORKERS_HELP),
    dry_run: bool = opt.dry_run(),
    json_output: bool = opt.json_output(),
    backup_dir: Path = opt.backup_dir(),
    out: Path = opt.out_dir(),
    commitlog_dirs: Optional[str] = opt.commitlog_dirs(opt.COMMITLOG_DIRS_HELP
                                                       + opt.REPAIR_DIRS_NOTE),
    broker_config: Optional[Path] = opt.broker_config(opt.BROKER_CONFIG_HELP
                                                      + opt.REPAIR_DIRS_NOTE),
):
    _run("rebuild-index", store, commitlog_dirs=commitlog_dirs, broker_config=broker_config, dry_run=dry_run, json_output=json_output,
         backup_dir=backup_dir, out=out, slots=slots, entries=entries,
         broker_version=broker_version, workers=workers)


@commands.command("undo", help=(
    "Put a store back exactly as it was before the repair that made BACKUP: files the repair "
    "created are removed, changed and deleted files restored byte for byte. Refuses (exit 3) a "
    "store in use, and changes nothing when a file was modified since the repair unless --force. "
    "Leftovers of repairs killed before they changed anything (a stage folder, a backup folder "
    "without manifest.json) are removed; given such a backup folder, undo removes them only. "
    "--list STORE lists the store's backups: the repair, its status and its loss report (a "
    "repair killed before it reported shows as unreported; its next run reports it)."
    "\n\nExit status: 0 restored, or nothing left to restore (the backup was undone "
    "already); 2 not a backup (given a store, undo names its newest backup, or says it has "
    "none: nothing to undo), an unusable backup, or a conflict; 3 refused."))
@error_boundary
def undo_cmd(
    backup: Path = typer.Argument(..., metavar="BACKUP",
                                  help="A backup folder printed by a repair command (given the store "
                                       "instead, undo names its newest backup; with --list, the "
                                       "store)."),
    force: bool = typer.Option(False, "--force",
                               help="Restore even files changed since the repair."),
    list_backups: bool = typer.Option(False, "--list",
                                      help="List the backups of the store BACKUP (or of the "
                                           "store a backup folder belongs to); change nothing."),
    dry_run: bool = opt.dry_run(),
    json_output: bool = opt.json_output(),
):
    from ..repair import run_undo

    if list_backups:
        _list_backups(backup, json_output)
        raise typer.Exit(EXIT_OK)
    report = run_undo(backup, force=force, dry_run=dry_run)
    if json_output:
        emit_json_document(report.to_dict())
    else:
        out = stdout_console()
        out.print(f"store: {report.store}", markup=False, soft_wrap=True)
        for path in report.restored:
            out.print(f"restore  {path}", markup=False, soft_wrap=True)
        for path in report.removed:
            out.print(f"remove   {path}", markup=False, soft_wrap=True)
        if report.conflicts:
            out.print(f"conflicts (forced): {', '.join(report.conflicts)}", markup=False,
                      soft_wrap=True)
        for path in report.leftovers:
            out.print(f"leftover {path} (of a repair killed before it changed the store): "
                      + ("would remove" if dry_run else "removed"), markup=False,
                      soft_wrap=True)
    verb = "would restore" if dry_run else "restored"
    sys.stderr.write(f"mqtool: undo: {verb} {len(report.restored)} file(s), removed "
                     f"{len(report.removed)} from {report.backup}\n")
    raise typer.Exit(EXIT_OK)


def _list_backups(path: Path, json_output: bool) -> None:
    from ..backup import BACKUP_DIR, list_backups

    store = path.parent.parent if path.parent.name == BACKUP_DIR else path
    if not store.is_dir():
        fail(f"{store}: no such store")
    backups = list_backups(store)
    if json_output:
        emit_json_document({"store": str(store), "backups": backups})
        return
    out = stdout_console()
    out.print(f"store: {store}", markup=False, soft_wrap=True)
    for entry in backups:
        loss = {True: "data loss", False: "no data loss", None: "-"}[entry["data_loss"]]
        note = "" if entry["reported"] or entry["status"] != "applied" else ", unreported"
        out.print(f"{entry['backup']}  {entry['command'] or '-'}  {entry['status']}  {loss}{note}",
                  markup=False, soft_wrap=True)
        for line in entry["lost"]:
            out.print(f"  lost: {line}", markup=False, soft_wrap=True)
    sys.stderr.write(f"mqtool: undo: {len(backups)} backup(s) of {store}\n")
