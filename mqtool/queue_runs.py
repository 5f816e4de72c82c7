"""The queue-offset run rule of ``CQ_QUEUE_GAP``, in a fold/merge form: one place for ``verify``
(record by record, a batch at a time, and across files) and the Spark audit's partials (a split
at a time, merged on the driver).

A queue's dispatched records (NOT or COMMIT), in CommitLog order, each expect the queue offset
the previous one had plus its step (1, or an inner batch's INNER_NUM). A record whose queue
offset differs is a gap: it ``skips`` (offsets are missing) or ``repeats`` (a duplicate). A run
is folded piece by piece: :func:`fold` finds the gaps inside a piece, given what the run so far
expects; :class:`Run` is what a piece hands on (its first record, what its last one makes the
next expect, and where that last one is), and :func:`merge` joins two pieces, finding the gap
across their boundary. 64-bit arithmetic wraps (numpy's and Spark's longs).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


def wrap(value: int) -> int:
    """``value`` as a signed 64-bit integer."""
    return ((value + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63)


def advance(queue_offset: int, step: int) -> int:
    """The queue offset the record after one at ``queue_offset`` with ``step`` must have."""
    return wrap(queue_offset + step)


def what(queue_offset: int, expected: int) -> str:
    return "repeats" if queue_offset < expected else "skips"


def message(topic: str, queue_id: int, queue_offset: int, expected: int, previous: int) -> str:
    """verify's words for a gap (``previous``: the CommitLog offset of the record before)."""
    return (f"{topic!r} queue {queue_id}: queue offset {queue_offset} "
            f"{what(queue_offset, expected)} (expected {expected} after the record at "
            f"{previous})")


def counts(queue_offset: int, expected: int) -> tuple[int, int, int]:
    """(gaps, missing offsets, duplicates) one gap adds to a queue's figures."""
    if queue_offset > expected:
        return 1, queue_offset - expected, 0
    return 0, 0, 1


class Run(NamedTuple):
    """A folded piece of a queue's run: its first record (queue offset, CommitLog offset), what
    its last record makes the next expect, and that last record's CommitLog offset."""

    first_queue_offset: int
    first_offset: int
    next_expected: int
    last_offset: int


def fold(queue_offsets: np.ndarray, steps: np.ndarray, group: np.ndarray | None = None):
    """The gaps inside pieces of runs: ``queue_offsets`` and ``steps`` of dispatched records,
    grouped by queue (``group``, equal values adjacent; None: one queue), each group in
    CommitLog order (a piece's first record is checked by :func:`merge`).

    Returns (expected, gap, firsts, lasts): each row's expected queue offset (from the row
    before), the rows that are gaps, and each group's first and last row."""
    n = len(queue_offsets)
    q = np.asarray(queue_offsets, dtype=np.int64)
    following = q + np.asarray(steps, dtype=np.int64)      # wraps as the longs do
    same = np.zeros(n, dtype=bool)
    if group is None:
        same[1:] = True
    else:
        same[1:] = group[1:] == group[:-1]
    expected = np.empty(n, dtype=np.int64)
    expected[:1] = q[:1]
    expected[1:] = following[:-1]
    firsts = np.flatnonzero(~same)
    lasts = np.append(firsts[1:] - 1, n - 1) if n else firsts
    return expected, same & (q != expected), firsts, lasts


def piece(queue_offsets, offsets, steps, first: int, last: int) -> Run:
    """The :class:`Run` of rows ``first`` to ``last`` of one queue's folded records."""
    return Run(int(queue_offsets[first]), int(offsets[first]),
               advance(int(queue_offsets[last]), int(steps[last])), int(offsets[last]))


def merge(before: Run | None, after: Run) -> tuple[Run, tuple[int, int, int] | None]:
    """``before`` then ``after`` as one run, and the gap at their boundary, if any: (queue
    offset, expected, previous record's CommitLog offset) of ``after``'s first record."""
    if before is None:
        return after, None
    gap = None
    if after.first_queue_offset != before.next_expected:
        gap = (after.first_queue_offset, before.next_expected, before.last_offset)
    return Run(before.first_queue_offset, before.first_offset, after.next_expected,
               after.last_offset), gap
