"""ConsumeQueue and 5.x BatchConsumeQueue units as the broker's dispatch appends them."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..codec import BATCH_CQ_UNIT, CQ_DTYPE, CQ_UNIT
from ..formats import codecs
from ..formats import commitlog as cl_fmt
from ..formats import consumequeue as cq_fmt
from .files import offset_file_name, open_existing_or_zero


def _close_queue_files(queues: dict) -> None:
    for state in queues.values():
        if state["fh"]:
            state["fh"].close()
            state["fh"] = None
            state["base"] = None


class _QueueWriter:
    """Units appended to the files of every queue of one kind: one open file per queue, the
    broker's names (byte offset of the file's first unit) and file size."""

    unit_size: int
    _initial: dict   # a new queue's state besides its open file

    def __init__(self, root: Path, units_per_file: int):
        self.root = Path(root)
        self.file_size = units_per_file * self.unit_size
        self._queues: dict[tuple[str, int], dict] = {}

    def state(self, topic: str, queue_id: int) -> dict:
        """The queue's write state: ``write_pos`` (bytes) and what deduplicates its puts."""
        key = (topic, queue_id)
        if key not in self._queues:
            self._queues[key] = {"fh": None, "base": None, **self._initial}
        return self._queues[key]

    def queue_keys(self) -> list[tuple[str, int]]:
        """(topic, queue id) of every queue put into (or whose state was asked for)."""
        return list(self._queues)

    def _file(self, state: dict, topic: str, queue_id: int, logical: int):
        base = logical - logical % self.file_size
        if state["base"] != base:
            if state["fh"]:
                state["fh"].close()
            path = self.root / topic / str(queue_id) / offset_file_name(base)
            state["fh"] = open_existing_or_zero(path, self.file_size)
            state["base"] = base
        return state["fh"]

    def close(self) -> None:
        _close_queue_files(self._queues)


class ConsumeQueueWriter(_QueueWriter):
    """ConsumeQueue.putMessagePositionInfo for every queue of a store."""

    unit_size = cq_fmt.CQ_STORE_UNIT_SIZE
    _initial = {"write_pos": None, "max_physic": -1}

    def put(self, topic: str, queue_id: int, commitlog_offset: int, size: int, tags_code: int,
            queue_offset: int) -> bool:
        """Append one unit; False when the broker would skip it (already dispatched)."""
        state = self.state(topic, queue_id)
        if commitlog_offset + size <= state["max_physic"]:
            return False
        expect = queue_offset * self.unit_size
        if state["write_pos"] is None:
            # isFirstCreateInQueue: pre-blank units from the file start up to the first unit
            base = expect - expect % self.file_size
            fh = self._file(state, topic, queue_id, expect)
            blanks = (expect - base) // self.unit_size
            if blanks:
                unit = CQ_UNIT.pack(0, cq_fmt.PRE_BLANK_SIZE, 0)
                fh.seek(0)
                fh.write(unit * blanks)
            state["write_pos"] = expect
        if expect < state["write_pos"]:
            return False
        # expect > write_pos is only logged by the broker: the unit goes at the write position
        logical = state["write_pos"]
        fh = self._file(state, topic, queue_id, logical)
        fh.seek(logical - state["base"])
        fh.write(CQ_UNIT.pack(commitlog_offset, size, tags_code))
        state["write_pos"] = logical + self.unit_size
        state["max_physic"] = commitlog_offset + size
        return True

    def put_run(self, topic: str, queue_id: int, commitlog_offsets, sizes, tags_codes,
                queue_offsets) -> int:
        """:meth:`put` for consecutive dispatched records of one queue, in order; returns how
        many units were written. Where the state lets each record append exactly at the write
        position (the usual case), runs of units go to the file in one write."""
        offsets = np.asarray(commitlog_offsets, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        codes = np.asarray(tags_codes, dtype=np.int64)
        expects = np.asarray(queue_offsets, dtype=np.int64) * self.unit_size
        ends = offsets + sizes
        state = self.state(topic, queue_id)
        n, i, written = len(offsets), 0, 0
        # record j appends at the write position when its queue offset follows the one before
        # and it ends past it (dispatch order: CommitLog offsets grow)
        follows = np.ones(n, dtype=bool)
        follows[1:] = (expects[1:] == expects[:-1] + self.unit_size) & (ends[1:] > ends[:-1])
        breaks = np.flatnonzero(~follows).tolist() + [n]
        at_break = 0
        while i < n:
            pos = state["write_pos"]
            if pos is None or expects[i] != pos or ends[i] <= state["max_physic"]:
                written += self.put(topic, queue_id, int(offsets[i]), int(sizes[i]),
                                    int(codes[i]), int(expects[i]) // self.unit_size)
                i += 1
                continue
            # each unit of the run ends past the one before, so none is already covered
            while breaks[at_break] <= i:
                at_break += 1
            room = (self.file_size - pos % self.file_size) // self.unit_size
            stop = min(breaks[at_break], i + room)
            units = np.zeros(stop - i, dtype=CQ_DTYPE)
            units["commitlog_offset"] = offsets[i:stop]
            units["size"] = sizes[i:stop]
            units["tags_code"] = codes[i:stop]
            fh = self._file(state, topic, queue_id, pos)
            fh.seek(pos - state["base"])
            fh.write(units.tobytes())
            state["write_pos"] = pos + (stop - i) * self.unit_size
            state["max_physic"] = int(ends[stop - 1])
            written += stop - i
            i = stop
        return written


class BatchConsumeQueueWriter(_QueueWriter):
    """5.x BatchConsumeQueue: 46-byte units appended in dispatch order (the queue is searched by
    msgBaseOffset, not addressed by position); a record already dispatched (its start at or
    before the last unit's) is skipped."""

    unit_size = cq_fmt.BATCH_CQ_STORE_UNIT_SIZE
    _initial = {"write_pos": 0, "max_start": -1}

    def __init__(self, root: Path, units_per_file: int = cq_fmt.DEFAULT_CQ_UNITS_PER_FILE):
        super().__init__(root, units_per_file)

    def put(self, topic: str, queue_id: int, commitlog_offset: int, size: int, tags_code: int,
            store_timestamp: int, msg_base_offset: int, batch_size: int) -> bool:
        if msg_base_offset < 0 or batch_size < 0:
            return False
        state = self.state(topic, queue_id)
        if commitlog_offset <= state["max_start"]:
            return False
        logical = state["write_pos"]
        fh = self._file(state, topic, queue_id, logical)
        fh.seek(logical - state["base"])
        fh.write(BATCH_CQ_UNIT.pack(commitlog_offset, size, tags_code, store_timestamp,
                                    msg_base_offset, batch_size, cq_fmt.INVALID_POS, 0))
        state["write_pos"] = logical + self.unit_size
        state["max_start"] = commitlog_offset
        return True


def dispatch_consume_queue(cq: ConsumeQueueWriter, topic: str, queue_id: int,
                           commitlog_offset: int, size: int, sys_flag: int, queue_offset: int,
                           store_timestamp: int, properties: dict[str, str]) -> bool:
    """CommitLogDispatcherBuildConsumeQueue: only NOT and COMMIT records get a unit."""
    if cl_fmt.transaction_type(sys_flag) not in (cl_fmt.TRANSACTION_NOT_TYPE,
                                                  cl_fmt.TRANSACTION_COMMIT_TYPE):
        return False
    return cq.put(topic, queue_id, commitlog_offset, size,
                  codecs.tags_code(topic, properties, store_timestamp), queue_offset)
