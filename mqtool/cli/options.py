"""The arguments and options that more than one command takes, declared once, and their checks.

Each factory returns a fresh typer parameter for a function default
(``topic: Optional[str] = opt.topic()``). A command passes its own help text only where the
option means something else there.

Help texts that list library values (broker versions, recovery modes) take them from
:mod:`mqtool.vocabulary`, which imports nothing: typer builds every command on every run,
``mqtool --help`` included, so this module must not import numpy or the store model.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import MqtoolError
from ..vocabulary import BROKER_VERSIONS, MODES
from .common import fail, warn_if_live


# --- the store -----------------------------------------------------------------------------------

STORE_HELP = "Store root (commitlog/, consumequeue/, index/, ...) or a bare CommitLog directory."


def store(help: str = STORE_HELP):
    return typer.Argument(..., metavar="STORE", help=help)


def commitlog_file_size(**limits):
    return typer.Option(None, "--commitlog-file-size", metavar="BYTES",
                        help="Override the inferred CommitLog file size (it must agree with "
                             "the files: their names are offsets that far apart).", **limits)


def cq_units(**limits):
    return typer.Option(None, "--cq-units",
                        help="Override the inferred ConsumeQueue units per file.", **limits)


def index_slots(**limits):
    return typer.Option(None, "--index-slots",
                        help="Override the inferred IndexFile slot count.", **limits)


def index_entries(**limits):
    return typer.Option(None, "--index-entries",
                        help="Override the inferred IndexFile entry count.", **limits)


def check_geometry(commitlog_file_size=None, cq_units=None, index_slots=None,
                   index_entries=None) -> None:
    for value, name in ((commitlog_file_size, "--commitlog-file-size"), (cq_units, "--cq-units"),
                        (index_slots, "--index-slots"), (index_entries, "--index-entries")):
        if value is not None and value <= 0:
            raise MqtoolError(f"{name} must be a positive number, got {value}")


COMMITLOG_DIRS_HELP = ("The CommitLog's directories (storePathCommitLog with several "
                       "','-separated paths, plus readOnlyCommitLogStorePaths) instead of "
                       "STORE/commitlog; the files are read wherever they lie, in offset order.")
BROKER_CONFIG_HELP = ("Take the CommitLog's directories from this broker config "
                      "(storePathCommitLog, readOnlyCommitLogStorePaths).")
REPAIR_DIRS_NOTE = (" A repair refuses (exit 2, nothing changed) a CommitLog outside "
                    "STORE/commitlog.")


def commitlog_dirs(help: str = COMMITLOG_DIRS_HELP):
    return typer.Option(None, "--commitlog-dirs", metavar="DIR,DIR", help=help)


def broker_config(help: str = BROKER_CONFIG_HELP):
    return typer.Option(None, "--broker-config", metavar="broker.conf", help=help)


def open_store(path: Path, commitlog_file_size=None, cq_units=None, index_slots=None,
               index_entries=None, *, commitlog_dirs: Optional[str] = None,
               broker_config: Optional[Path] = None):
    """The store with the geometry overrides, each checked to be positive, and the CommitLog
    directories --commitlog-dirs / --broker-config name; a store whose lock a live process
    holds is warned about (every command opening a store here only reads it)."""
    from ..brokerconf import resolve_commitlog_dirs
    from ..store import Store

    check_geometry(commitlog_file_size, cq_units, index_slots, index_entries)
    warn_if_live(path)
    store = Store(path, commitlog_file_size=commitlog_file_size, cq_units_per_file=cq_units,
                  index_slots=index_slots, index_entries=index_entries,
                  commitlog_dirs=resolve_commitlog_dirs(commitlog_dirs, broker_config))
    if commitlog_file_size is not None:
        store.commitlog.check_file_size(commitlog_file_size)
    return store


# --- output --------------------------------------------------------------------------------------

def json_output(help: str = "One JSON document on stdout."):
    return typer.Option(False, "--json", help=help)


def body(default: str):
    return typer.Option(None, "--body", metavar="FORM",
                        help=f"text|hex|base64|none (default: {default}; text "
                             f"falls back to base64 for bytes that are not UTF-8).")


def body_mode(value: Optional[str], default: str) -> str:
    from ..inspect import BODY_MODES

    if value is not None and value not in BODY_MODES:
        raise MqtoolError(f"--body must be one of {', '.join(BODY_MODES)}, not {value!r}")
    return value or default


def max_body_bytes():
    return typer.Option(None, "--max-body-bytes", metavar="N",
                        help="Truncate bodies to N bytes (body_truncated says so).")


def no_decompress():
    return typer.Option(False, "--no-decompress",
                        help="Keep compressed bodies as stored (the form bodyCRC covers).")


def no_unwrap():
    return typer.Option(False, "--no-unwrap", help="Keep a 5.x inner batch (BatchCQ topic) as "
                        "the one stored record instead of one record per inner message.")


def check_not_negative(value: Optional[int], name: str) -> None:
    if value is not None and value < 0:
        raise MqtoolError(f"{name} must be >= 0, got {value}")


# --- which messages ------------------------------------------------------------------------------

def topic(help: str = "Only this topic."):
    return typer.Option(None, "--topic", metavar="TOPIC", help=help)


def queue(help: str = "Only this queue id.", **limits):
    return typer.Option(None, "--queue", metavar="ID", help=help, **limits)


def _only_with(text: str, option: Optional[str]) -> str:
    return f"{option}: {text[0].lower()}{text[1:]}" if option else text


def since(only_with: Optional[str] = None):
    return typer.Option(None, "--since", metavar="TIME", help=_only_with(
        "Store time lower bound (epoch ms or ISO-8601; no zone means UTC).", only_with))


def until(only_with: Optional[str] = None):
    return typer.Option(None, "--until", metavar="TIME", help=_only_with(
        "Store time upper bound, inclusive.", only_with))


def workers(help: str):
    return typer.Option(None, "--workers", min=1, metavar="N", help=help)


# --- the broker's recovery -----------------------------------------------------------------------

def broker_version():
    return typer.Option("auto", "--broker-version", metavar="VERSION",
                        help=f"Recovery rules: auto, {', '.join(BROKER_VERSIONS)} (auto: the store "
                             f"passport's: 5.3.4+ where the records show the newest code's "
                             f"classic batches, 5.3.2+ when the store has 5.x-only files, "
                             f"else 4.9).")


def check_broker_version(value: str) -> str:
    if value != "auto" and value not in BROKER_VERSIONS:
        fail(f"--broker-version must be auto, {', '.join(BROKER_VERSIONS)}; got {value!r}")
    return value


def mode():
    return typer.Option("auto", "--mode", metavar="MODE",
                        help=f"Recovery branch: {', '.join(MODES)} (auto: "
                             f"abnormal when the abort file exists).")


def check_mode(value: str) -> str:
    if value not in MODES:
        fail(f"--mode must be one of {', '.join(MODES)}; got {value!r}")
    return value


def force_verify_prop_crc():
    return typer.Option(False, "--force-verify-prop-crc",
                        help="The broker recovers with forceVerifyPropCRC (5.2+).")


def message_index_safe():
    return typer.Option(False, "--message-index-safe",
                        help="The broker recovers with messageIndexSafe.")


# --- repairs -------------------------------------------------------------------------------------

def dry_run():
    return typer.Option(False, "--dry-run", help="Print the plan and change nothing.")


def backup_dir():
    return typer.Option(None, "--backup-dir", metavar="DIR",
                        help="Backup folder (default STORE/.mqtool-backup/<UTC timestamp>); one "
                             "elsewhere is noted in STORE/.mqtool-backup/, so info, verify, "
                             "undo --list and the next repair find it.")


def out_dir():
    return typer.Option(None, "--out", metavar="DIR",
                        help="Write a repaired copy into DIR (new or empty) and leave STORE "
                             "untouched (no backup is made).")


# --- Spark ---------------------------------------------------------------------------------------

def spark_paths():
    return typer.Argument(..., metavar="PATH", help=(
        "Store roots or CommitLog directories: local paths, file://, or any scheme the Spark "
        "session reads (hdfs://, s3a://; executors then need fsspec or pyarrow). One broker each, "
        "named after the path (<broker>/store -> <broker>)."))


def master():
    return typer.Option(None, "--master", metavar="URL",
                        help="Spark master URL (default local[*]; under spark-submit: "
                             "spark-submit's).")


def split_size():
    return typer.Option("128m", "--split-size", metavar="SIZE", help=(
        "Bytes of CommitLog per task: 128m (the default) reads a 1 GiB file with 8 tasks. Records "
        "cut by a split boundary are read once, by the task they start in."))


def broker_name():
    return typer.Option(None, "--broker-name", metavar="NAME",
                        help="Broker name for the PATH at the same position (give it once per "
                             "PATH).")


def conf():
    return typer.Option(None, "--conf", metavar="KEY=VALUE",
                        help="A Spark setting, KEY=VALUE (repeatable), e.g. "
                             "spark.executor.memory=4g.")

