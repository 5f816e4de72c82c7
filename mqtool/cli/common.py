"""What every command shares: the error boundary, output helpers and progress settings.

stdout carries data only (JSON or tables); messages, summaries and progress go to stderr.
rich is imported by the helpers that print with it, not when the CLI loads.
"""
from __future__ import annotations

import functools
import os
import sys
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from .. import jsontext
from ..errors import EXIT_USAGE, MqtoolError

if TYPE_CHECKING:
    from rich.console import Console


@dataclass
class Settings:
    progress: bool = True
    debug: bool = False
    # the reader of stdout went away (`| head`): output is discarded from then on
    stdout_gone: bool = False


SETTINGS = Settings()


class Commands:
    """The commands one module declares with ``@commands.command(name, **typer_options)``.
    cli/main.py builds the app and adds them with :meth:`add_to`, in the order the help lists
    them, so no command module imports the app back."""

    def __init__(self) -> None:
        self._declared: list[tuple[str, dict, object]] = []

    def command(self, name: str, **options):
        def declare(function):
            self._declared.append((name, options, function))
            return function
        return declare

    def add_to(self, app: typer.Typer) -> None:
        for name, options, function in self._declared:
            app.command(name, **options)(function)


def stdout_console(**options) -> Console:
    """The console tables go to. rich's own answer to a reader that went away (`| head`) is
    exit 1, which reads as "errors found"; a closed pipe discards the rest of the output
    instead, and the command exits as it would have (see :func:`discard_stdout`)."""
    from rich.console import Console

    class StdoutConsole(Console):
        def on_broken_pipe(self) -> None:
            discard_stdout()

    # emoji off: a location such as "consumerOffset.json:100: ..." would print as a 💯
    return StdoutConsole(**{"highlight": False, "soft_wrap": False, "emoji": False, **options})


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, emoji=False)


_WARNED_LIVE: set[str] = set()


def warn_if_live(path) -> None:
    """One line on stderr, once per store and run, when a live process (a broker) holds the lock
    of the store a read command reads: what it reads may change under it."""
    from ..store import live_lock_of

    try:
        lock = live_lock_of(path)
    except OSError:
        return
    if lock is None or str(lock) in _WARNED_LIVE:
        return
    _WARNED_LIVE.add(str(lock))
    sys.stderr.write(f"mqtool: warning: {os.fsdecode(lock.parent)}: a live process (a running "
                     "broker?) holds the store's lock; files may change while they are read\n")


def fail(message: str, code: int = EXIT_USAGE) -> None:
    """Print ``mqtool: error: message`` on stderr and exit with ``code``."""
    sys.stderr.write(f"mqtool: error: {message}\n")
    raise typer.Exit(code)


def error_boundary(func):
    """Turn library errors into one plain line on stderr and the documented exit code."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except typer.Exit:
            raise
        except MqtoolError as err:
            if SETTINGS.debug:
                traceback.print_exc()
            fail(str(err), err.exit_code)
        except (OSError, ValueError, OverflowError, MemoryError) as err:
            if isinstance(err, BrokenPipeError):
                # a command that streams to stdout (export, salvage with --out -) stops here:
                # their status does not depend on what they had not written yet
                discard_stdout()
                raise typer.Exit(0) from None
            if SETTINGS.debug:
                traceback.print_exc()
            text = f"{err.filename}: {err.strerror}" if isinstance(err, OSError) and err.filename \
                else str(err) or type(err).__name__
            fail(text, EXIT_USAGE)

    wrapper.__mqtool_error_boundary__ = True
    return wrapper


def discard_stdout() -> None:
    """stdout's reader went away (`mqtool verify STORE | head -1`): send the rest of the output
    to /dev/null, quietly. The command goes on and exits with the status it would have given
    with every line read, so the status never depends on when the reader left; commands that
    stream records (dump) stop early on :attr:`Settings.stdout_gone`."""
    SETTINGS.stdout_gone = True
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def flush_stdout() -> None:
    """Flush stdout; a reader that went away is not an error (:func:`discard_stdout`)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        discard_stdout()
        try:
            sys.stdout.flush()      # what was buffered goes to /dev/null now
        except OSError:
            pass


def emit_json(obj) -> None:
    """One JSON document or line on stdout."""
    try:
        sys.stdout.write(jsontext.dumps(obj, separators=(",", ":")) + "\n")
    except BrokenPipeError:
        discard_stdout()


def emit_json_document(obj) -> None:
    try:
        sys.stdout.write(jsontext.dumps(obj, indent=2) + "\n")
    except BrokenPipeError:
        discard_stdout()


class _QuietBar:
    """What a bar that shows nothing does (tqdm's disabled bar): count nothing, print nothing.
    Without a terminal or with --no-progress no command imports tqdm for it (0.05 s)."""

    def __init__(self, total: int) -> None:
        self.total = total

    def update(self, n=1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __bool__(self) -> bool:
        return self.total is not None and self.total > 0

    def __len__(self) -> int:
        return self.total


def progress_bar(total: int, desc: str):
    """A tqdm bar on stderr (off when stderr is not a terminal or with --no-progress)."""
    if not SETTINGS.progress or not _is_terminal(sys.stderr):
        return _QuietBar(total)
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, file=sys.stderr,
                disable=None if SETTINGS.progress else True, leave=False)


def _is_terminal(stream) -> bool:
    """tqdm's own test for disable=None."""
    isatty = getattr(stream, "isatty", None)
    return isatty is None or isatty()


def grid(*columns: str, **options):
    """The borderless table every command's text output uses: bold headers, one space between
    columns, cells never wrapped (options go to rich's Table, e.g. title=...)."""
    from rich.table import Table
    table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 1),
                  header_style="bold", **options)
    for column in columns:
        table.add_column(column, no_wrap=True)
    return table


def render_passport(passport: dict, console: Console) -> None:
    """The writer family with its evidence, and what the files disagree on."""
    console.print(f"Written by: RocketMQ {passport['family']} (recovery rules "
                  f"{passport['recovery_rules']})", highlight=False, markup=False)
    for claim in passport["claims"]:
        console.print(f"  {claim['claim']}: {claim['evidence']}", highlight=False, markup=False,
                      soft_wrap=True)
    for problem in passport["inconsistencies"]:
        console.print(f"  inconsistent: {problem}", style="yellow", highlight=False,
                      markup=False, soft_wrap=True)
