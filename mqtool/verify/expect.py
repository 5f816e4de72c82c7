"""Comparing a report with an expected findings document (``verify --expect``)."""
from __future__ import annotations

from .findings import VerifyReport


# --- comparing with an expectation ------------------------------------------------------------------

def finding_keys(document) -> set[tuple[str, str, int]]:
    """(code, file, offset) of every finding in a ``--json`` document or a list of findings."""
    items = document.get("findings") if isinstance(document, dict) else document
    if not isinstance(items, list):
        raise ValueError("expected a verify --json document or a list of findings")
    keys = set()
    for item in items:
        if not isinstance(item, dict) or not {"code", "file", "offset"} <= item.keys():
            raise ValueError("every finding needs code, file and offset")
        keys.add((str(item["code"]), str(item["file"]), int(item["offset"])))
    return keys


def compare_findings(report: VerifyReport, expected_document) -> tuple[list, list]:
    """(missing, unexpected): expected findings not found, and findings not expected."""
    expected = finding_keys(expected_document)
    actual = {f.key for f in report.findings}
    return sorted(expected - actual), sorted(actual - expected)
