"""The broker's reput, offline (``ReputMessageService`` / ``doDispatch``): which CommitLog records a
start dispatches and the ConsumeQueue units and index entries each one makes
(:mod:`.dispatching`), and the record walks that feed it, in worker processes when there are
several files (:mod:`.pipeline`).

Below both the repairs, which write what it dispatches through their staged writers, and the
predictions that only count it (the RocksDB ConsumeQueue's units after a start)."""
