"""What verify reports: a :class:`Finding` (code, file, offset, message) with the severity its code
has, the :class:`VerifyReport` they end up in, and the sink the whole-file checks add them to."""
from __future__ import annotations

import collections
from dataclasses import dataclass

from ..finding import Finding
from ..recovery import RecoveryPlan
# the codes are in mqtool.vocabulary so that the CLI's help can list them without importing numpy
from ..vocabulary import CODES


@dataclass
class VerifyReport:
    store: str
    geometry: dict
    findings: list[Finding]
    summary: dict
    recovery: RecoveryPlan

    @property
    def errors(self) -> int:
        return self.summary["errors"]

    def to_dict(self) -> dict:
        return {
            "store": self.store,
            "geometry": self.geometry,
            "findings": [f.to_dict() for f in self.findings],
            "summary": self.summary,
            "recovery": self.recovery.to_dict(),
        }


def _prop_crc_message(offset: int) -> str:
    return (f"__CRC32# property CRC does not match the record at {offset} (the broker checks it "
            "only with forceVerifyPropCRC, and then cuts the store here: mqtool recover "
            "--force-verify-prop-crc)")


def _finding(code: str, file: str, offset: int, message: str, severity: str | None = None,
             **extra) -> Finding:
    return Finding(code, severity or CODES[code][0], file, int(offset), message, **extra)


class _Sink:
    def __init__(self):
        self.findings: list[Finding] = []
        self.extra = collections.Counter()   # (code, severity) of findings beyond the listing cap

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    def add_suppressed(self, code: str, count: int) -> None:
        self.extra[(code, CODES[code][0])] += count
