"""What a query answers: the records found (with where they were found: an index entry or a
scan), the parts that had to be scanned, chain problems, and the two query errors."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import EXIT_FINDINGS, MqtoolError
from ..scan import MessageRecord
from .index import ChainProblem, IndexHit


class QueryError(MqtoolError):
    """A query that cannot be asked (malformed id, unknown queue, ...): exit 2."""


class NotFound(MqtoolError):
    """A well-formed query with no answer: exit 1."""

    exit_code = EXIT_FINDINGS


# --- results -------------------------------------------------------------------------------------

@dataclass
class Found:
    """One message of an answer and how it was found."""

    record: MessageRecord
    # index | index-stated-offset (an entry at the damaged offset the record states) | scan |
    # msg-id | consume-queue | inner-batch
    found_by: str
    index_hits: list[IndexHit] = field(default_factory=list)
    inner_position: int | None = None   # the inner message of an inner batch this answer is

    def annotations(self) -> dict:
        out = {"found_by": self.found_by}
        if self.index_hits:
            out["index_entries"] = [{"file": h.file, "entry": h.entry,
                                     "index_time": h.index_time} for h in self.index_hits]
        return out


@dataclass
class QueryResult:
    query: dict
    found: list[Found] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    scanned: list[tuple[int, int]] = field(default_factory=list)
    problems: list[ChainProblem] = field(default_factory=list)
    collisions: list[int] = field(default_factory=list)     # entries of another key, same hash
    stale: list[int] = field(default_factory=list)          # entries pointing at no such record
    duplicates: int = 0                                      # extra entries for the same record
    candidates: int = 0                                      # matches before --max
    details: dict = field(default_factory=dict)

    @property
    def offsets(self) -> list[int]:
        return [f.record.offset for f in self.found]

    @property
    def inner_found(self) -> list[Found]:
        """The inner messages of inner batches found (no IndexFile entry names them)."""
        return [f for f in self.found if f.inner_position is not None]

    def summary(self) -> dict:
        return {"query": self.query, "found": len(self.found), "offsets": self.offsets,
                "notes": self.notes, "scanned_ranges": [list(r) for r in self.scanned],
                "index_problems": [p.to_dict() for p in self.problems],
                "hash_collisions": sorted(set(self.collisions)),
                "stale_index_entries": sorted(set(self.stale)),
                "duplicate_index_entries": self.duplicates,
                "inner_messages": [[f.record.offset, f.inner_position] for f in self.inner_found],
                **self.details}
