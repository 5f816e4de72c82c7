"""The ``mqtool`` command line: argument parsing and rendering only; the work is in mqtool.*."""
from __future__ import annotations

import sys

import typer

from .. import __version__
from .common import SETTINGS

app = typer.Typer(
    name="mqtool",
    help="Forensic and recovery toolkit for Apache RocketMQ broker stores "
         "(CommitLog, ConsumeQueue, IndexFile, checkpoint).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
fixture_app = typer.Typer(help="Make deterministic test stores and inject faults into them.",
                          no_args_is_help=True)
app.add_typer(fixture_app, name="fixture")


def _version(value: bool):
    if value:
        print(f"mqtool {__version__}")
        raise typer.Exit(0)


@app.callback()
def main(
    no_progress: bool = typer.Option(False, "--no-progress",
                                     help="Never show progress bars (they go to stderr, and only "
                                          "when it is a terminal)."),
    debug: bool = typer.Option(False, "--debug", help="Show a traceback on errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
):
    """Inspect, verify and repair RocketMQ stores offline. Read-only commands never open a store
    file for writing."""
    SETTINGS.progress = not no_progress
    SETTINGS.debug = debug


# Command modules register themselves on import.
from . import inspect_cmds, verify_cmd, fixture_cmd  # noqa: E402,F401


def run() -> None:
    try:
        app()
    except BrokenPipeError:
        sys.exit(0)
