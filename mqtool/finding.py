"""One problem a check found: a :class:`Finding` (code, file, offset, message, severity).

verify (:mod:`mqtool.verify`) reports them, and so do the checks below it that verify calls
(consumer offsets in :mod:`mqtool.consumers`): the class lives here, beneath both, so that those
checks need not import verify, which imports them."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Finding:
    """One problem, located by (code, file, offset): file relative to the store root, offset a
    byte position in that file."""

    code: str
    severity: str
    file: str
    offset: int
    message: str
    commitlog_offset: int | None = None
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    count: int | None = None
    details: dict | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.code, self.file, self.offset)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}
