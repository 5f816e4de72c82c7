"""The ``mqtool`` command line: argument parsing and rendering only; the work is in mqtool.*.

The Typer app is built here, and only here, from the command modules (which never import it)."""
from __future__ import annotations

import sys

import typer

try:  # typer >= 0.26 vendors click
    from typer._click import core as click_core
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer uses click itself
    import click.core as click_core
    import click.exceptions as click_exceptions

from .. import __version__
from ..errors import EXIT_USAGE
from . import (consumers_cmd, failover_cmd, fixture_cmd, inspect_cmds, query_cmds, repair_cmds,
               spark_cmds, timers_cmd, transactions_cmd, verify_cmd)
from .common import SETTINGS


def _hide_flag_types() -> None:
    """typer >= 0.2x prints a value type after every option, so an on/off flag such as --json
    reads "--json <bool>", as if it wanted a value. A flag takes none: show no type for it."""
    from typer.core import TyperOption

    typed = getattr(TyperOption, "display_type_rich", None)
    if typed is None:  # older typer shows no types at all
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag else typed(self, ctx)

    TyperOption.display_type_rich = display_type_rich


_hide_flag_types()

app = typer.Typer(
    name="mqtool",
    help="Forensic and recovery toolkit for Apache RocketMQ broker stores "
         "(CommitLog, ConsumeQueue, IndexFile, checkpoint).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: typer's rich help imports rich.markdown, markdown-it and pygments,
    # which doubled the start-up of `mqtool --help` (0.10 -> 0.20 s of CPU)
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


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


# The commands, in the order the help lists them; the groups come after them.
for module in (inspect_cmds, verify_cmd, query_cmds, repair_cmds, timers_cmd, transactions_cmd,
               consumers_cmd, failover_cmd):
    module.commands.add_to(app)
app.add_typer(fixture_cmd.fixture_app, name="fixture")
app.add_typer(spark_cmds.spark_app, name="spark")


def run(argv: list[str] | None = None) -> None:
    """Console entry point. Usage errors become one line on stderr and exit 2, like every other
    error (click would otherwise draw a box)."""
    try:
        code = app(args=argv, prog_name="mqtool", standalone_mode=False)
    except click_exceptions.UsageError as err:
        if type(err).__name__ == "NoArgsIsHelpError" and err.ctx is not None:
            sys.stdout.write(err.ctx.get_help() + "\n")
            sys.exit(0)
        hint = f" (see 'mqtool {err.ctx.command_path.split(' ', 1)[1]} --help')" \
            if err.ctx is not None and " " in err.ctx.command_path else " (see 'mqtool --help')"
        sys.stderr.write(f"mqtool: error: {err.format_message()}{hint}\n")
        sys.exit(EXIT_USAGE)
    except click_core.Abort:
        sys.stderr.write("mqtool: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(code if isinstance(code, int) else 0)
