"""ConsumeQueueWriter.put_run (recover's dispatch writes a queue's units in runs) leaves the
same files and state as put() called record by record, whatever the queue's state: repeated
units, gaps in queue offsets, a first unit past the file start (pre-blank units), file roll."""
from __future__ import annotations

import random

from mqtool.writer import ConsumeQueueWriter


def _files(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_put_run_equals_put_one_by_one(tmp_path):
    rng = random.Random(13)
    for trial in range(40):
        units_per_file = rng.choice((4, 7, 50))
        one = ConsumeQueueWriter(tmp_path / f"one{trial}", units_per_file)
        run = ConsumeQueueWriter(tmp_path / f"run{trial}", units_per_file)
        offset, queue_offset = rng.randrange(0, 5000), rng.randrange(0, 30)
        for _ in range(rng.randrange(1, 5)):
            records = []
            for _ in range(rng.randrange(1, 40)):
                size = rng.randrange(50, 300)
                step = rng.choice((1, 1, 1, 1, 0, -1, 2, 5))
                queue_offset = max(0, queue_offset + step)
                if rng.random() < 0.1:
                    offset -= rng.randrange(0, 400)   # a record already dispatched
                records.append((max(0, offset), size, rng.randrange(-2**40, 2**40), queue_offset))
                offset = max(0, offset) + size
            written_one = sum(one.put("T", 1, *r) for r in records)
            written_run = run.put_run("T", 1, *zip(*records))
            assert written_run == written_one
            state_one, state_run = one.state("T", 1), run.state("T", 1)
            assert (state_run["write_pos"], state_run["max_physic"]) == \
                (state_one["write_pos"], state_one["max_physic"])
        one.close()
        run.close()
        assert _files(tmp_path / f"run{trial}") == _files(tmp_path / f"one{trial}")
