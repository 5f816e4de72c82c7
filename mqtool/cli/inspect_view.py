"""How ``info`` and ``dump`` show a store on a terminal: rich tables and lines. ``query`` shows its
messages with dump's table. The commands import this module when they run, not when the CLI
loads (it pulls in mqtool.inspect, with numpy, and rich)."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import inspect as lib
from .common import grid, render_passport, stdout_console


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,} B" if unit == "B" else f"{n:.1f} {unit}".replace(".0 ", " ")
        n /= 1024
    return str(n)


def _short_time(iso: str | None) -> str:
    """``2026-11-22 00:51:25.774`` from the ISO form (UTC)."""
    return iso.replace("T", " ").rstrip("Z") if iso else "-"




# --- info ----------------------------------------------------------------------------------------

def _range(lo, hi) -> str:
    if lo is None and hi is None:
        return "-"
    return f"{lo}..{hi}"


def _queue_check(row: dict) -> str:
    """Does the CommitLog agree with the queue's own CQ files? (count and next offset)"""
    cl, cq = row["commitlog"], row["consume_queue"]
    if cq is None:
        return "no CQ" if cl and cl["messages"] else "-"
    if cl is None or cl["messages"] == 0:
        return "CQ only" if cq["units"] else "empty"
    problems = []
    if cl["messages"] != cq["units"]:
        problems.append(f"units {cq['units']} vs {cl['messages']}")
    if cq["max_offset"] is not None and cl["max_queue_offset"] + 1 != cq["max_offset"]:
        problems.append(f"next {cq['max_offset']} vs {cl['max_queue_offset'] + 1}")
    if cq.get("units_past_commitlog_end"):
        problems.append(f"{cq['units_past_commitlog_end']} past end")
    return "; ".join(problems) if problems else "ok"


def _id_ranges(ids: list[int]) -> str:
    """``0..3,5,7..9`` for sorted ids."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(f"{a}..{b}" if b > a + 1 else (f"{a},{b}" if b > a else str(a))
                    for a, b in runs)


def _topic_rows(info: dict) -> list[dict]:
    """Per-topic aggregates of the per-queue rows (the compact view)."""
    grouped: dict[str, list[dict]] = {}
    for row in info["topics"]:
        grouped.setdefault(row["topic"], []).append(row)
    out = []
    for topic, rows in grouped.items():
        cls = [r["commitlog"] for r in rows if r["commitlog"]]
        cqs = [r["consume_queue"] for r in rows if r["consume_queue"]]
        checks = [c for c in (_queue_check(r) for r in rows) if c not in ("ok", "-", "empty")]
        ids = sorted(r["queue_id"] for r in rows)
        out.append({
            "topic": topic,
            "queues": _id_ranges(ids),
            "messages": sum(c["messages"] for c in cls),
            "prepared": sum(c["prepared"] for c in cls),
            "rollback": sum(c["rollback"] for c in cls),
            "cq_units": sum(c["units"] for c in cqs) if cqs else None,
            "cq_files": sum(c["files"] for c in cqs) if cqs else 0,
            "check": "ok" if not checks else f"{len(checks)} queue(s) differ",
        })
    return out


def render_info(info: dict, console: Console, per_queue: bool) -> None:
    geo = info["geometry"]
    cl = info["commitlog"]
    header = Text()
    header.append("Store ", style="bold")
    header.append(info["root"])
    header.append(f"  ({info['layout']})", style="dim")
    console.print(header)
    console.print(
        f"Geometry: CommitLog files {_human_bytes(geo['commitlog_file_size'])} "
        f"({geo['commitlog_file_size_source']}), CQ {geo['cq_units_per_file']:,} units/file "
        f"({geo['cq_units_per_file_source']}), IndexFile {geo['index_slots']:,} slots x "
        f"{geo['index_entries']:,} entries = {geo['index_file_size']:,} B "
        f"({geo['index_geometry_source']})", highlight=False)
    render_passport(info["passport"], console)
    _render_commitlog(cl, console)
    _render_queues(info, console, per_queue)
    _render_index(info, console)
    _render_checkpoint(info, console)
    _render_abort_and_lock(info, console)
    _render_config_and_rest(info, console)


def _render_commitlog(cl: dict, console: Console) -> None:
    """The CommitLog: totals, one row per file, corrupt regions, stray files."""
    tx = cl["by_transaction"]
    tx_text = ", ".join(f"{k} {v}" for k, v in tx.items() if v)
    extras = [f"{cl['compressed']} compressed"] if cl["compressed"] else []
    if cl["v2_records"]:
        extras.append(f"{cl['v2_records']} V2")
    if cl["crc_checked"]:
        extras.append(f"{cl['body_crc_mismatches']} body CRC mismatches")
    if cl["physical_offset_mismatches"]:
        extras.append(f"{cl['physical_offset_mismatches']} PHYSICALOFFSET mismatches")
    console.print(
        f"[bold]CommitLog[/] {len(cl['files'])} files, min offset {cl['min_offset']}, "
        f"end of data {'-' if cl['end_of_data'] is None else cl['end_of_data']}, "
        f"[bold]{cl['messages']}[/] messages"
        + (f" ({tx_text}{'; ' + ', '.join(extras) if extras else ''})" if cl["messages"] else "")
        + (f", store time {_short_time(cl['first_store_time'])} .. "
           f"{_short_time(cl['last_store_time'])} UTC" if cl["messages"] else ""),
        highlight=False)
    if cl["files"]:
        table = grid("file", "size", "offsets", "msgs", "scan end")
        for f in cl["files"]:
            end = f["scan_end"]
            end_text = f"{end['kind']}@{end['position']}"
            if end["kind"] == "blank":
                end_text += f" size={end['declared_size']}"
            elif end["kind"] == "corrupt":
                end_text += f" {end['code']}"
            size = Text(f"{f['size']:,}", style=None if f["size_ok"] else "red")
            notes = " gap!" if f.get("gap_before") else ""
            table.add_row(f["name"] + notes, size, f"{f['start_offset']}..{f['end_offset']}",
                          str(f["messages"]), end_text)
        console.print(table)
    for region in cl["corrupt_regions"][:5]:
        console.print(f"  [red]corrupt[/] {region['file']}@{region['position']}: "
                      f"{region['code']} {region['detail']}", highlight=False)
    if cl["stray_files"]:
        console.print(f"  stray in commitlog/: {', '.join(cl['stray_files'])}", highlight=False)


def _render_queues(info: dict, console: Console, per_queue: bool) -> None:
    """The ConsumeQueues (files or RocksDB) and the topics, per topic or per queue."""
    cqs = info["consume_queues"]
    rocks = cqs.get("rocksdb")
    if rocks is not None:
        console.print(f"[bold]ConsumeQueue[/] in RocksDB ({rocks['folder']}): {rocks['queues']} "
                      f"queues, {rocks['units']:,} units served, {rocks['stale_units']:,} stale "
                      f"past their max entry; CQ checkpoint (CHECKPOINT_TOPIC) "
                      f"{rocks['checkpoint'] if rocks['checkpoint'] is not None else 'absent'}",
                      highlight=False)
        for problem in rocks["problems"][:5]:
            console.print(f"  [red]undecodable[/] {problem}", highlight=False)
    else:
        console.print(f"[bold]ConsumeQueue[/] {cqs['queues']} queues in {cqs['files']} files "
                      f"({_human_bytes(cqs['bytes'])})"
                      + (f"; stray: {', '.join(cqs['stray_files'])}" if cqs["stray_files"]
                         else ""), highlight=False)
    if per_queue:
        table = grid("topic", "q", "msgs", "CL q-offs", "p/r", "CQ units", "CQ offs", "check")
        table.columns[0].max_width = 22
        table.columns[0].overflow = "ellipsis"
        for row in info["topics"]:
            c, q = row["commitlog"] or {}, row["consume_queue"] or {}
            table.add_row(row["topic"], str(row["queue_id"]), str(c.get("messages", 0)),
                          _range(c.get("min_queue_offset"), c.get("max_queue_offset")),
                          f"{c.get('prepared', 0)}/{c.get('rollback', 0)}",
                          str(q.get("units", "-")),
                          _range(q.get("min_offset"), q.get("max_offset")),
                          _queue_check(row))
    else:
        table = grid("topic", "queues", "msgs", "p/r", "CQ units", "CL vs CQ")
        table.columns[0].max_width = 30
        table.columns[0].overflow = "ellipsis"
        table.columns[1].max_width = 14
        table.columns[1].overflow = "ellipsis"
        for row in _topic_rows(info):
            table.add_row(row["topic"], row["queues"], str(row["messages"]),
                          f"{row['prepared']}/{row['rollback']}",
                          "-" if row["cq_units"] is None else str(row["cq_units"]), row["check"])
    if info["topics"]:
        console.print(table)
        if not per_queue:
            console.print("  [dim](--queues for one row per queue with offset ranges)[/]")
    if info["batch_consume_queues"]:
        console.print(f"[bold]BatchConsumeQueue[/] {len(info['batch_consume_queues'])} queues")


def _render_index(info: dict, console: Console) -> None:
    """The IndexFiles, one row each."""
    index = info["index"]
    console.print(f"[bold]IndexFiles[/] {len(index['files'])}"
                  + (f"; stray: {', '.join(index['stray_files'])}" if index["stray_files"] else ""),
                  highlight=False)
    if index["files"]:
        times = [t for f in index["files"] for t in (f.get("begin_time"), f.get("end_time")) if t]
        dates = {t[:10] for t in times}
        one_date = len(dates) == 1
        time_header = f"UTC {dates.pop()}" if one_date else "store time (UTC)"
        table = grid("file", time_header, "phy offsets", "slots", "entries",
                      collapse_padding=True)
        for f in index["files"]:
            name = Text(f["name"])
            if not f["size_ok"]:
                name.append(f" {f['size']:,} B!", style="red")
            if "error" in f:
                table.add_row(name, Text(f["error"], style="red"), "", "", "")
                continue
            begin, end = _short_time(f["begin_time"]), _short_time(f["end_time"])
            if one_date:
                begin, end = begin[11:], end[11:]
            table.add_row(name, f"{begin}..{end}",
                          f"{f['begin_phy_offset']}..{f['end_phy_offset']}",
                          str(f["hash_slot_count"]),
                          f"{f['entries_used']}" + (" full" if f["full"] else ""))
        console.print(table)


def _render_checkpoint(info: dict, console: Console) -> None:
    """The checkpoint's timestamps and 5.x offsets."""
    ckpt = info["checkpoint"]
    if ckpt is None:
        console.print("[bold]Checkpoint[/] absent")
    elif "error" in ckpt:
        console.print(f"[bold]Checkpoint[/] [red]{ckpt['error']}[/]", highlight=False)
    else:
        table = grid("checkpoint", "UTC", "ms")
        for name in lib.CHECKPOINT_TIME_FIELDS:
            table.add_row(name, _short_time(ckpt[name.replace("_timestamp", "_time")]),
                          str(ckpt[name]))
        table.add_row("master_flushed_offset (5.x)", "", str(ckpt["master_flushed_offset"]))
        table.add_row("confirm_phy_offset (5.x)", "", str(ckpt["confirm_phy_offset"]))
        if not ckpt["size_ok"]:
            table.add_row(Text("file size", style="red"), "", str(ckpt["file_size"]))
        console.print(table)


def _render_abort_and_lock(info: dict, console: Console) -> None:
    """The abort file (the last shutdown) and the lock."""
    abort, lock = info["abort"], info["lock"]
    if abort["present"]:
        pid = f", PID {abort['pid']}" if abort["pid"] is not None else ""
        text = f"[yellow]present: last shutdown abnormal[/]{pid}"
    else:
        text = "absent (last shutdown clean)"
    if abort["bak_present"]:
        text += f"; abort.bak present ({abort['bak_content']!r})"
    lock_text = ("absent" if not lock["present"] else
                 "[red]held by a live process[/]" if lock["held"] else "present, not held")
    console.print(f"[bold]abort[/] {text}", highlight=False)
    console.print(f"[bold]lock[/] {lock_text}", highlight=False)


def _render_config_and_rest(info: dict, console: Console) -> None:
    """Config files, consumer groups, unknown entries, interrupted repairs."""
    if info["config"]:
        parts = []
        for name, entry in info["config"].items():
            details = ", ".join(f"{k} {v}" for k, v in entry.items()
                                if k not in ("source", "fallback_to_bak", "outcome", "reason",
                                             "deleted_on_load"))
            if entry["outcome"] == "refuses":
                text = Text(f"{name}: the broker refuses to start", style="red")
            elif entry["outcome"] == "empty":
                text = Text(f"{name}: the broker starts with an empty table", style="yellow")
            else:
                text = Text(f"{name} (read {entry['source']})" + (f": {details}" if details else ""))
            if entry.get("reason"):
                text.append(f" ({entry['reason']})")
            parts.append(text)
        for part in parts:
            line = Text("config ", style="bold")
            line.append(part)
            console.print(line, highlight=False)
    else:
        console.print("[bold]config[/] none")
    for group in info.get("consumer_groups", []):
        line = Text("consumer group ", style="bold")
        line.append(group["line"])
        console.print(line, highlight=False)
    if info["stray_files"]:
        console.print(f"[bold]unknown entries[/] {', '.join(info['stray_files'])}",
                      highlight=False)
    for item in info.get("repair_leftovers", []):
        line = Text("interrupted repair ", style="bold")
        line.append(f"{item['code']} {item['path']}: {item['detail']}", style="yellow")
        console.print(line, highlight=False)


# --- dump ----------------------------------------------------------------------------------------

def _preview(record: dict) -> str:
    body = record.get("body")
    if body is None:
        return ""
    if record["body_encoding"] == "text":
        return "".join(ch if ch.isprintable() else "·" for ch in body)
    return f"({record['body_encoding']}) {body}"


def _crc_mark(value) -> Text:
    if value is None:
        return Text("-", style="dim")
    return Text("ok", style="green") if value else Text("BAD", style="bold red")


# Columns per record type: (header, width or None for the flexible one, cell function)
_MESSAGE_COLUMNS = [
    ("offset", 12, lambda r: str(r["commitlog_offset"])),
    ("size", 6, lambda r: str(r["total_size"])),
    ("topic", 22, lambda r: r["topic"]),
    ("q", 3, lambda r: str(r["queue_id"])),
    ("q-offset", 8, lambda r: str(r["queue_offset"]) if r["transaction"] in ("NOT", "COMMIT")
     else r["transaction"][:4].lower()),
    ("store time (UTC)", 23, lambda r: _short_time(lib.ms_to_iso(r["store_timestamp"]))),
    ("tags", 12, lambda r: r["tags"] or ""),
    ("keys", 18, lambda r: r["keys"] or ""),
    ("crc", 3, lambda r: _crc_mark(r["body_crc_ok"] and r["offset_ok"]
                                   and r["prop_crc_ok"] is not False)),
    ("body", None, _preview),
]
_CQ_COLUMNS = [
    ("pos", 8, lambda r: str(r["file_offset"])),
    ("q-offset", 10, lambda r: str(r["queue_offset"])),
    ("commitlog offset", 16, lambda r: str(r["commitlog_offset"])),
    ("size", 10, lambda r: str(r["size"])),
    ("tags code", 20, lambda r: str(r["tags_code"])),
    ("status", 9, lambda r: Text(r["status"], style=None if r["status"] == "valid"
                                 else "yellow")),
]
_BCQ_COLUMNS = [
    ("pos", 8, lambda r: str(r["file_offset"])),
    ("unit", 8, lambda r: str(r["unit_index"])),
    ("commitlog offset", 16, lambda r: str(r["commitlog_offset"])),
    ("size", 8, lambda r: str(r["size"])),
    ("tags code", 20, lambda r: str(r["tags_code"])),
    ("store time (UTC)", 23, lambda r: _short_time(lib.ms_to_iso(r["store_timestamp"]))),
    ("base offset", 11, lambda r: str(r["msg_base_offset"])),
    ("batch", 5, lambda r: str(r["batch_size"])),
    ("status", 8, lambda r: r["status"]),
]
_SLOT_COLUMNS = [
    ("slot", 9, lambda r: str(r["slot"])),
    ("entry", 10, lambda r: str(r["entry"])),
    ("valid", 5, lambda r: _crc_mark(r["valid"])),
]
_ENTRY_COLUMNS = [
    ("entry", 9, lambda r: str(r["number"])),
    ("key hash", 11, lambda r: str(r["key_hash"])),
    ("slot", 9, lambda r: str(r["slot"])),
    ("phy offset", 14, lambda r: str(r["phy_offset"])),
    ("time diff", 9, lambda r: str(r["time_diff"])),
    ("time (UTC)", 23, lambda r: _short_time(r["time"])),
    ("prev", 9, lambda r: str(r["prev_index"])),
]
_RDB_COLUMNS = [
    ("topic", None, lambda r: r["topic"]),
    ("queue", 5, lambda r: str(r["queue_id"])),
    ("q-offset", 10, lambda r: str(r["queue_offset"])),
    ("commitlog offset", 16, lambda r: str(r["commitlog_offset"])),
    ("size", 8, lambda r: str(r["size"])),
    ("tags code", 20, lambda r: str(r["tags_code"])),
    ("store time (UTC)", 23, lambda r: _short_time(lib.ms_to_iso(r["store_timestamp"]))),
    ("status", 7, lambda r: Text(r["status"], style=None if r["status"] == "served"
                                 else "yellow")),
]
TABLE_COLUMNS = {
    lib.RT_RDB_UNIT: _RDB_COLUMNS,
    lib.RT_MESSAGE: _MESSAGE_COLUMNS,
    lib.RT_CQ_UNIT: _CQ_COLUMNS,
    lib.RT_BCQ_UNIT: _BCQ_COLUMNS,
    lib.RT_INDEX_SLOT: _SLOT_COLUMNS,
    lib.RT_INDEX_ENTRY: _ENTRY_COLUMNS,
}
_CHUNK_ROWS = 200


def _note_line(record: dict) -> Text:
    """One line for the records that are events rather than rows."""
    kind = record["record_type"]
    where = f"{record.get('file')}@{record.get('file_offset', '')}"
    if kind == lib.RT_BLANK:
        return Text(f"-- {where} blank record, declared size {record['total_size']}: "
                    f"end of file", style="dim")
    if kind == lib.RT_UNWRITTEN:
        return Text(f"-- {where} unwritten (zeros) for {record['length']:,} bytes: "
                    f"end of data", style="dim")
    if kind == lib.RT_CORRUPT:
        return Text(f"!! {where} corrupt, {record['length']:,} bytes: {record['code']} "
                    f"{record['detail']}", style="bold red")
    if kind in (lib.RT_CQ_END, lib.RT_BCQ_END):
        extra = (f"; {record['nonzero_units_after_end']} non-zero units after it (stale)"
                 if record["nonzero_units_after_end"] else "")
        return Text(f"-- {where} end of written units ({record['units_after_end']} "
                    f"units left){extra}", style="dim")
    if kind in (lib.RT_CQ_PARTIAL, lib.RT_BCQ_PARTIAL):
        return Text(f"!! {where} {record['detail']}", style="bold red")
    if kind == lib.RT_RDB_OFFSET:
        return Text(f"-- {record['topic']} queue {record['queue_id']}: {record['kind']} entry "
                    f"queue offset {record['queue_offset']} at CommitLog "
                    f"{record['commitlog_offset']} (min {record['min_offset']}, max "
                    f"{record['max_offset']}, {record['stale_units']} stale unit(s))", style="dim")
    if kind == lib.RT_RDB_CHECKPOINT:
        return Text(f"-- CHECKPOINT_TOPIC: the queues are built up to CommitLog offset "
                    f"{record['max_commitlog_offset']}")
    if kind == lib.RT_RDB_PROBLEM:
        return Text(f"!! {record['file']} column family {record['family']!r} key "
                    f"{record['key'][:96]}: {record['detail']}", style="bold red")
    if kind == lib.RT_INDEX_NOTE:
        return Text(f"-- {record['file']}: {record['note']}", style="yellow")
    return Text(str(record))


def _key_value_table(record: dict) -> Table:
    table = grid("field", "value", title=f"{record['record_type']} {record.get('file', '')}",
                 title_justify="left", title_style="bold")
    for key, value in record.items():
        if key in ("record_type", "file"):
            continue
        if key.endswith("_time") and key[:-5] + "_timestamp" in record:
            continue  # shown next to the raw value
        if key.endswith("_timestamp") and isinstance(value, int):
            value = f"{value}  ({_short_time(lib.ms_to_iso(value))} UTC)"
        table.add_row(key, Text(str(value)))
    return table


class TableRenderer:
    """Streams records as tables of at most _CHUNK_ROWS rows; one table per run of the same
    record type. Every cell is cut to its column's width before rich sees it: rich squeezes
    whole columns away when a row is wider than the console, and fixed widths also keep
    consecutive chunks aligned."""

    PIPE_WIDTH = 200
    MIN_FLEX_WIDTH = 24

    def __init__(self, console: Console):
        self.base_console = console
        self.kind: str | None = None
        self.rows: list[dict] = []
        self.header_shown = False

    def add(self, record: dict) -> None:
        kind = record["record_type"]
        if kind not in TABLE_COLUMNS:
            self.flush()
            self.kind = None
            if kind in (lib.RT_INDEX_HEADER, lib.RT_CHECKPOINT, lib.RT_ABORT, lib.RT_LOCK,
                        lib.RT_CONFIG):
                self.base_console.print(_key_value_table(record))
            else:
                self.base_console.print(_note_line(record), highlight=False, soft_wrap=True)
            return
        if kind != self.kind:
            self.flush()
            self.kind, self.header_shown = kind, False
        self.rows.append(record)
        if len(self.rows) >= _CHUNK_ROWS:
            self.flush()

    def _widths(self, columns) -> tuple[list[int], int]:
        fixed = sum(w + 1 for _, w, _ in columns if w is not None)
        available = self.base_console.width if self.base_console.is_terminal else self.PIPE_WIDTH
        flex = max(self.MIN_FLEX_WIDTH, available - fixed - 1)
        widths = [w if w is not None else flex for _, w, _ in columns]
        return widths, sum(w + 2 for w in widths)

    def flush(self) -> None:
        if not self.rows:
            return
        columns = TABLE_COLUMNS[self.kind]
        widths, total = self._widths(columns)
        console = self.base_console
        if console.width < total:
            console = stdout_console(width=total, force_terminal=console.is_terminal)
        table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 1),
                      header_style="bold", show_header=not self.header_shown)
        for (header, _, _), width in zip(columns, widths):
            # the column width includes the 1-cell right padding
            table.add_column(header, no_wrap=True, overflow="ellipsis", width=width + 1)
        for record in self.rows:
            cells = []
            for (_, _, cell), width in zip(columns, widths):
                value = cell(record)
                text = value if isinstance(value, Text) else Text(str(value))
                text.truncate(width, overflow="ellipsis")
                cells.append(text)
            table.add_row(*cells)
        console.print(table)
        self.rows = []
        self.header_shown = True
