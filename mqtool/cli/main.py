"""The ``mqtool`` command line: argument parsing and rendering only; the work is in mqtool.*.

The Typer app is built here, and only here, from the command modules (which never import it)."""
from __future__ import annotations

import functools
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
from .common import SETTINGS, discard_stdout, flush_stdout


# What a value placeholder reads when an option declares no metavar: a name, never typer's
# "<int>", "<str>" or "<list[str]>" (which read as syntax to type).
_TYPE_METAVARS = {"int": "N", "float": "NUMBER", "str": "TEXT", "path": "PATH",
                  "bool": "BOOL"}


def _plain_metavars() -> None:
    """typer >= 0.2x prints a value type after every option and argument: "--limit <int>",
    "--topic <list[str]>", "STORE <path>", and "{STORE}" in the usage line. Options show their
    metavar (declared, else N, TEXT, PATH ... by type, or the choices), a flag shows none (it
    takes no value), an argument its name alone."""
    from typer.core import TyperArgument, TyperOption

    typed = getattr(TyperOption, "display_type_rich", None)
    if typed is None:  # older typer shows no types at all
        return

    def option_metavar(self, ctx):
        if self.is_flag:
            return None
        if self.metavar is not None:
            return self.metavar
        shown = typed(self, ctx)
        if not shown or not shown.startswith("<"):
            return shown
        label = shown.strip("<>.")
        repeated = label.startswith("list[")
        label = label[5:-1] if repeated else label
        label = label.split(" ")[0]            # "int range": the range is printed apart
        name = label if "|" in label else _TYPE_METAVARS.get(label, label.upper())
        return name + ("..." if repeated else "")

    def argument_type(self, ctx):
        return None    # the metavar (STORE, PATH, BACKUP) says what it is

    def usage_name(self):
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")

    TyperOption.display_type_rich = option_metavar
    TyperArgument.display_type_rich = argument_type
    if hasattr(TyperArgument, "_usage_display_name"):
        TyperArgument._usage_display_name = usage_name


_plain_metavars()


def _values_without_pydantic() -> None:
    """typer >= 0.29 checks every parameter's value, defaults included, with a pydantic
    TypeAdapter: importing pydantic cost every command about 0.3 s of CPU, more than its work
    on a small store. The values commands mostly get (a missing value, a path, a string, an int
    or float already of its type and in range, an empty repeated option) come out of those
    adapters unchanged or as ``Path(value)``; they take this shorter way, with the same checks
    (typer's own path check) and the same messages. Anything else (a number typed on the
    command line, a choice, a date) still goes through typer's adapter."""
    import pathlib
    import typing

    try:
        from typer import _param_types
        from typer.core import _TyperParameter
    except ImportError:  # pragma: no cover - other typer versions coerce without pydantic
        return
    if not hasattr(_param_types, "coerce_cli_path") \
            or not hasattr(_TyperParameter, "get_runtime_param"):
        return  # pragma: no cover

    adapter = object()      # "ask typer's adapter"

    def plain(annotation, info, value, param, ctx):
        """The value as typer's adapter would return it, or ``adapter``."""
        if getattr(info, "parser", None) is not None or getattr(info, "click_type", None):
            return adapter
        if typing.get_origin(annotation) is list and isinstance(value, (list, tuple)) \
                and not value:
            return []
        if annotation is str and type(value) is str:
            return value
        if annotation in (int, float) and type(value) is annotation:
            low, high = info.min, info.max
            if (low is None or value >= low) and (high is None or value <= high):
                return value
            return adapter
        if annotation is pathlib.Path and type(value) is str \
                and getattr(info, "path_type", None) is None:
            # typer makes Path(text) (pydantic's lax Path) and checks that; checked as the
            # text, the result and every message are the same
            return pathlib.Path(_param_types.coerce_cli_path(value, info, path_type=str,
                                                             param=param, ctx=ctx))
        return adapter

    class Shortcut:
        def __init__(self, parameter):
            self.parameter = parameter

        def coerce(self, value, param, ctx):
            many = param.multiple or param.nargs == -1
            if value is None:
                return () if many else None
            descriptor = self.parameter.type_descriptor
            if descriptor.file_annotation is None and not (many and isinstance(value, str)):
                done = plain(descriptor.annotation, descriptor.parameter_info, value, param, ctx)
                if done is not adapter:
                    return done
            return typers(self.parameter).coerce(value, param=param, ctx=ctx)

    typers = _TyperParameter.get_runtime_param

    def get_runtime_param(self):
        if self._runtime_param is not None:
            return self._runtime_param
        return Shortcut(self)

    _TyperParameter.get_runtime_param = get_runtime_param


_values_without_pydantic()

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
        from ..scan import native
        print(f"mqtool {__version__} ({native.describe()})")
        raise typer.Exit(0)


@app.callback()
def main(
    no_progress: bool = typer.Option(False, "--no-progress",
                                     help="Never show progress bars (they go to stderr, and only "
                                          "when it is a terminal)."),
    debug: bool = typer.Option(False, "--debug", help="Show a traceback on errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version, and whether the native core or the numpy path runs, and exit."),
):
    """Inspect, verify and repair RocketMQ stores offline. Read-only commands never open a store
    file for writing."""
    SETTINGS.progress = not no_progress
    SETTINGS.debug = debug
    SETTINGS.stdout_gone = False


# The commands, in the order the help lists them; the groups come after them.
for module in (inspect_cmds, verify_cmd, query_cmds, repair_cmds, timers_cmd, transactions_cmd,
               consumers_cmd, failover_cmd):
    module.commands.add_to(app)
app.add_typer(fixture_cmd.fixture_app, name="fixture")
app.add_typer(spark_cmds.spark_app, name="spark")


def _paths_as_bytes() -> None:
    """A path that is not UTF-8 is printed as the bytes it is (what the user typed, what ``ls``
    shows), not as an escape no shell understands, and never fails the output: Python's
    ``surrogateescape`` on stdout and stderr, whatever the locale made them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="surrogateescape")
        except (AttributeError, ValueError):
            pass


@functools.cache
def command():
    """The click command tree typer builds from the app: built once per process (it reads
    every command's signature: ~0.15 s, paid again by every in-process run otherwise)."""
    return typer.main.get_command(app)


def run(argv: list[str] | None = None) -> None:
    """Console entry point. Usage errors become one line on stderr and exit 2, like every other
    error (click would otherwise draw a box). A reader of stdout that went away changes
    neither the status nor stderr (see common.discard_stdout)."""
    _paths_as_bytes()
    try:
        code = command().main(args=argv, prog_name="mqtool", standalone_mode=False)
        flush_stdout()
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
        discard_stdout()
        sys.exit(0)
    sys.exit(code if isinstance(code, int) else 0)
