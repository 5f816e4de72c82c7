"""``mqtool spark audit`` and ``mqtool spark export``: argument parsing and rendering only (the
jobs are :mod:`mqtool.spark.job`). pyspark and rich are imported when a command runs, never when
the CLI loads, so ``mqtool --help`` stays fast and works without pyspark."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, List, Optional

import typer

from ..errors import EXIT_FINDINGS, EXIT_OK, MqtoolError
from . import options as opt
from .common import SETTINGS, emit_json_document, error_boundary, grid, stdout_console

if TYPE_CHECKING:
    from rich.text import Text

spark_app = typer.Typer(
    help="Audit and export archived CommitLogs of many brokers on Apache Spark (local[*] by "
         "default; any master: spark://, yarn, k8s://). Needs pyspark and Java 17+.",
    no_args_is_help=True, rich_markup_mode=None)  # plain help, as the app's (cli/main.py)


def _conf(items: Optional[List[str]]) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise MqtoolError(f"--conf wants KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def _prepare(paths: List[str], broker_names: Optional[List[str]], split_size: str,
             out: Optional[str] = None, overwrite: bool = False):
    """Check what can be checked before a JVM starts: the split size, local inputs, the readers
    of remote ones and a local output directory."""
    from ..spark import require_pyspark
    from ..spark.plan import check_output, is_local, parse_split_size, resolve_inputs

    size = parse_split_size(split_size)
    if broker_names and len(broker_names) != len(paths):
        raise MqtoolError(f"--broker-name was given {len(broker_names)} time(s) for "
                          f"{len(paths)} path(s); give it once per path, in the same order")
    local = [(p, broker_names[i] if broker_names else None) for i, p in enumerate(paths)
             if is_local(p)]
    if len(local) == len(paths):
        resolve_inputs([p for p, _ in local], [n for _, n in local] if broker_names else None)
    else:
        from ..spark.splits import check_remote_reader

        check_remote_reader(paths)
    check_output(out, overwrite)
    require_pyspark()
    return size


def _session(master: Optional[str], conf: Optional[List[str]], app_name: str):
    from ..spark.session import build_session

    return build_session(master, app_name=app_name, conf=_conf(conf),
                         progress=SETTINGS.progress and sys.stderr.isatty(),
                         log_level="WARN" if SETTINGS.debug else "OFF")


def _cell(value) -> Text:
    from rich.text import Text

    return Text("-" if value is None else str(value))


def _bytes(n) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size):,} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)


def _time(ms) -> str:
    from ..inspect import ms_to_iso

    iso = ms_to_iso(ms) if ms is not None else None
    return iso.replace("T", " ").rstrip("Z") if iso else "-"


def _console():
    console = stdout_console()
    if not console.is_terminal:
        # a file or a pipe gets whole rows, never cells folded to 80 columns
        console.width = max(console.width, 4096)
    return console


def _render_audit(summary: dict, findings: list[dict], show_queues: bool) -> None:
    from rich.text import Text

    out = _console()
    totals = summary["totals"]
    out.print(Text(f"spark audit on {summary['master']}: {summary['tasks']} task(s) of "
                   f"{_bytes(summary['split_size'])}, {summary['seconds']:.1f} s"
                   + (f"; tables in {summary['out']}" if summary.get("out") else "")))
    out.print()
    brokers = grid("broker", "files", "CommitLog", "records", "bytes", "topics", "queues",
                     "first store time", "last store time", "CRC fail", "holes",
                     "queue gaps/dups", "errors", "warnings")
    for b in summary["brokers"]:
        holes = b["corrupt_regions"] + b["zero_holes"] + b["file_gaps"]
        brokers.add_row(*map(_cell, (
            b["broker"], b["files"], _bytes(b["commitlog_bytes"]), f"{b['records']:,}",
            _bytes(b["bytes"]), b["topics"], b["queues"], _time(b["min_store_timestamp"]),
            _time(b["max_store_timestamp"]), b["crc_failures"] + b["prop_crc_failures"], holes,
            f"{b['gaps']}/{b['duplicates']}", b["errors"], b["warnings"])))
    out.print(brokers)
    out.print()
    topics = grid("broker", "topic", "queues", "records", "messages", "bytes",
                    "first store time", "last store time", "queue gaps/dups")
    for t in summary["topics"]:
        topics.add_row(*map(_cell, (t["broker"], t["topic"], t["queues"], f"{t['records']:,}",
                                    f"{t['messages']:,}", _bytes(t["bytes"]),
                                    _time(t["min_store_timestamp"]),
                                    _time(t["max_store_timestamp"]),
                                    f"{t['gaps']}/{t['duplicates']}")))
    out.print(topics)
    if show_queues:
        out.print()
        queues = grid("broker", "topic", "queue", "records", "queue offsets", "bytes",
                        "gaps", "missing", "dups", "CRC fail")
        for q in summary["queues"]:
            span = "-" if q["min_queue_offset"] is None else \
                f"{q['min_queue_offset']}..{q['max_queue_offset']}"
            queues.add_row(*map(_cell, (q["broker"], q["topic"], q["queue_id"],
                                        f"{q['records']:,}", span, _bytes(q["bytes"]), q["gaps"],
                                        q["missing_offsets"], q["duplicates"],
                                        q["crc_failures"] + q["prop_crc_failures"])))
        out.print(queues)
    uniq = summary["uniq_keys"]
    out.print()
    out.print(Text(f"UNIQ_KEYs stored more than once: {uniq['stored_more_than_once']:,} "
                   f"(in more than one broker: {uniq['across_brokers']:,})"))
    for item in uniq["across_brokers_sample"][:5]:
        out.print(Text(f"  {item['uniq_key']}: {item['copies']} copies in "
                       f"{', '.join(item['brokers'])}"))
    out.print()
    out.print(Text(f"findings: {totals['errors']} error(s), {totals['warnings']} warning(s), "
                   f"{totals['infos']} info"))
    if totals["by_code"]:
        codes = grid("code", "count")
        for code, count in totals["by_code"].items():
            codes.add_row(_cell(code), _cell(count))
        out.print(codes)
        for f in findings[:20]:
            out.print(Text(f"  {f['severity']:7} {f['code']} {f['broker']}:{f['file']}:"
                           f"{f['offset']}: {f['message']}"))
        shown = sum(totals["by_code"].values())
        if shown > 20:
            out.print(Text(f"  ... {shown - 20} more (the findings table has them all)"))
    for note in summary["notes"]:
        out.print(Text(f"note: {note}"))
    checks = summary.get("checks")
    if checks:
        scanned = [b["broker"] for b in summary["brokers"] if b.get("checked_by") == "scan"]
        if checks["not_checked"]:
            out.print(Text(f"checked: {', '.join(checks['checked'])}; not checked: "
                           f"{len(checks['not_checked'])} other codes of mqtool verify "
                           f"(ConsumeQueues and IndexFiles against the records, checkpoint, "
                           f"recovery, 5.x and DLedger side files; listed in the summary's "
                           f"'checks'): only store roots on a file system every executor reads "
                           f"get them (mqtool verify runs on those)"))
        else:
            out.print(Text("checked: every code of mqtool verify, by verify itself, on store "
                           "roots" + (f"; the CommitLog alone of {', '.join(scanned)} (see the "
                                      f"summary's 'checks')" if scanned else "")))


@spark_app.command("audit", help=(
    "Audit the CommitLogs of many brokers on Spark: every record read exactly once by byte-range "
    "tasks with mqtool's scanner; Parquet tables messages, findings (verify's codes), files and "
    "uniq_key_duplicates plus summary.json under --out; a summary on stdout.\n\nExit status: 0 "
    "no error, 1 errors found, 2 bad usage or unreadable input."))
@error_boundary
def audit(
    paths: List[str] = opt.spark_paths(),
    master: Optional[str] = opt.master(),
    out: Optional[str] = typer.Option(None, "--out", metavar="DIR",
                                      help="Write the tables and summary.json here (a path every "
                                           "executor can write: shared or hdfs:// / s3a:// on a "
                                           "cluster). Without it nothing is written."),
    split_size: str = opt.split_size(),
    broker_name: Optional[List[str]] = opt.broker_name(),
    overwrite: bool = typer.Option(False, "--overwrite",
                                   help="Replace the tables of an earlier audit in --out."),
    json_output: bool = opt.json_output("Print summary.json on stdout instead of tables."),
    queues: bool = typer.Option(False, "--queues", help="Also show one row per queue."),
    conf: Optional[List[str]] = opt.conf(),
):
    """Audit CommitLogs on Spark (see the help above)."""
    size = _prepare(paths, broker_name, split_size, out, overwrite)
    from ..spark import job
    from ..spark.session import spark_failures

    with spark_failures():
        spark = _session(master, conf, "mqtool spark audit")
        try:
            result = job.audit(spark, paths, broker_names=broker_name or None, out=out,
                               split_size=size, overwrite=overwrite)
        finally:
            spark.stop()
    if json_output:
        emit_json_document(result.summary)
    else:
        _render_audit(result.summary, result.findings, queues)
    totals = result.summary["totals"]
    sys.stderr.write(f"mqtool: spark audit: {totals['records']:,} record(s) in "
                     f"{totals['files']} file(s) of {totals['brokers']} broker(s); "
                     f"{totals['errors']} error(s), {totals['warnings']} warning(s)\n")
    raise typer.Exit(EXIT_FINDINGS if totals["errors"] else EXIT_OK)


@spark_app.command("export", help=(
    "Export every message of many brokers' CommitLogs, bodies included, as Parquet (or JSON "
    "lines) partitioned by broker and store_date; the columns are dump's message record."))
@error_boundary
def export(
    paths: List[str] = opt.spark_paths(),
    out: str = typer.Option(..., "--out", metavar="DIR", help="Where to write the dataset."),
    fmt: str = typer.Option("parquet", "--format", metavar="FORMAT", help="parquet or json."),
    master: Optional[str] = opt.master(),
    split_size: str = opt.split_size(),
    broker_name: Optional[List[str]] = opt.broker_name(),
    topic: Optional[List[str]] = opt.topic("Only this topic (repeatable)."),
    decompress: bool = typer.Option(True, "--decompress/--no-decompress",
                                    help="Inflate compressed bodies, as dump does (default), or "
                                         "keep the stored bytes."),
    no_unwrap: bool = opt.no_unwrap(),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier export."),
    json_output: bool = opt.json_output(),
    conf: Optional[List[str]] = opt.conf(),
):
    """Export messages with bodies on Spark (see the help above)."""
    if fmt not in ("parquet", "json"):
        raise MqtoolError(f"--format must be parquet or json, got {fmt!r}")
    size = _prepare(paths, broker_name, split_size, out, overwrite)
    from ..spark import job
    from ..spark.session import spark_failures

    with spark_failures():
        spark = _session(master, conf, "mqtool spark export")
        try:
            summary = job.export(spark, paths, out, fmt=fmt, broker_names=broker_name or None,
                                 split_size=size, topics=topic or None, decompress=decompress,
                                 unwrap=not no_unwrap, overwrite=overwrite)
        finally:
            spark.stop()
    if json_output:
        emit_json_document(summary)
    else:
        from rich.text import Text

        console = _console()
        table = grid("broker", "files", "CommitLog", "records scanned", "exported")
        for b in summary["brokers"]:
            table.add_row(*map(_cell, (b["broker"], b["files"], _bytes(b["commitlog_bytes"]),
                                       b["records_scanned"], b.get("exported", 0))))
        console.print(table)
        for note in summary["notes"]:
            console.print(Text(f"note: {note}"))
    sys.stderr.write(f"mqtool: spark export: {summary['exported']:,} message(s) to "
                     f"{summary['out']} ({summary['format']})\n")
    raise typer.Exit(EXIT_OK)
