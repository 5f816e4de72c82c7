"""Errors mqtool raises; each carries what the CLI needs for a one-line message and exit code."""
from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1       # verify found errors / a repair lost data
EXIT_USAGE = 2          # bad usage or unreadable input
EXIT_REFUSED = 3        # a live process holds the store


class MqtoolError(Exception):
    """Base class: ``str(err)`` is the one line shown to the user."""

    exit_code = EXIT_USAGE


class StoreLayoutError(MqtoolError):
    """The path is not a store, or not a store file of a recognised kind."""


class StoreNotFoundError(StoreLayoutError, FileNotFoundError):
    """The path does not exist."""


class ParseError(MqtoolError):
    """Bytes that do not match a declaration; names the file, offset and field path."""

    def __init__(self, file: str, offset: int, field_path: str, message: str):
        self.file, self.offset, self.field_path, self.detail = file, offset, field_path, message
        where = f" field {field_path}" if field_path else ""
        super().__init__(f"{file} at offset {offset} (0x{offset:x}){where}: {message}")


class OptionalDependencyError(MqtoolError):
    """A feature needs a package that is not installed."""


class StoreLockedError(MqtoolError):
    """A live process (a running broker) holds the store's lock file."""

    exit_code = EXIT_REFUSED


class RepairError(MqtoolError):
    """A repair that cannot be planned as asked (bad --to offset, unusable --out folder...), or
    whose record walk failed (a scanning worker died)."""
