"""Controller-mode stores (5.x automatic master switch), forged through :mod:`mqtool.writer`.

No broker-written store of this mode exists among the reference stores; these follow RocketMQ
5.x's source (``EpochFileCache``, ``AutoSwitchHAService.changeToMaster``,
``AutoSwitchHAClient.doTruncate``, ``MixAll.string2File``, ``BrokerMetadata``):

* :func:`write_controller_files` - ``epochFileCheckpoint`` written as a sequence of
  ``CheckpointFile.write`` calls (each moves the previous content to ``.bak``) and
  ``brokerIdentity``;
* :func:`make_failover_pair` - two brokers of one group after a switch: both hold the messages
  replicated before it byte for byte (epoch 1 from offset 0, the old master's); the new master
  appended epoch 2 at its end when it took over and stored the producers' retries (same UNIQ_KEY)
  and new messages; the old master, cut off, kept storing in epoch 1 messages the new one never
  got. The summary says which are resent and which lost: the expectation tests compare
  ``mqtool failover`` with.
"""
from __future__ import annotations

from pathlib import Path

from .. import writer as w
from ..errors import StoreLayoutError
from ..formats import epoch as epoch_fmt
from .mix import CLUSTER_NAME, LOCK_CONTENT, STORE_HOST_V4

BROKER_NAME = "broker-a"
BASE_TIME_MS = 1_795_300_000_000


def write_controller_files(root: Path, writes: list[list[tuple[int, int]]],
                           identity: tuple[str, str, int] | None = None) -> None:
    """The epoch file after each of ``writes`` in turn (the last is the file, the one before it
    the ``.bak``, as string2File leaves them), and ``brokerIdentity``."""
    root = Path(root)
    path = root / epoch_fmt.EPOCH_FILE
    for entries in writes:
        if not entries:
            continue            # CheckpointFile.write returns without writing an empty list
        if path.is_file():
            (root / (epoch_fmt.EPOCH_FILE + epoch_fmt.BAK_SUFFIX)).write_bytes(path.read_bytes())
        path.write_bytes(w.epoch_checkpoint_bytes(entries))
    if identity is not None:
        (root / epoch_fmt.BROKER_IDENTITY_FILE).write_bytes(w.broker_identity_bytes(*identity))


def _message(i: int, topic: str, uniq: str, store_ms: int, resent: bool = False) -> w.Message:
    props = {"UNIQ_KEY": uniq, "KEYS": f"order-{i}", "TAGS": "TagA" if i % 2 else "TagB",
             "WAIT": "true"}
    if resent:
        props["RETRY"] = "1"      # nothing the broker reads: tells a human which copy it is
    return w.Message(topic=topic, queue_id=i % 2, body=f"payload {i} {uniq}".encode(),
                     properties=props, born_timestamp=store_ms - 3, store_timestamp=store_ms,
                     born_host=(bytes([10, 0, 0, 7]), 40000 + i % 100), store_host=STORE_HOST_V4)


def _uniq(i: int) -> str:
    return f"7F00000100002A9F0000{i:012X}"


def make_failover_pair(old_root: Path, new_root: Path, *, shared: int = 20, lost: int = 5,
                       resent: int = 3, new_only: int = 4, topic: str = "TopicTest",
                       commitlog_file_size: int = 64 * 1024) -> dict:
    """Write the two stores (each absent or empty) and return what was meant: offsets of the
    switch, the old master's messages past it (``resent`` are the first ``resent`` of them,
    the rest ``lost``), the new master's epochs."""
    old_root, new_root = Path(old_root), Path(new_root)
    for root in (old_root, new_root):
        if root.exists() and any(root.iterdir()):
            raise StoreLayoutError(f"{root}: exists and is not empty")
    writers = [w.StoreWriter(root, commitlog_file_size=commitlog_file_size, broker_version=5,
                             cq_units_per_file=300, index_slots=1000, index_entries=4000)
               for root in (old_root, new_root)]
    old, new = writers
    clock = BASE_TIME_MS
    try:
        for i in range(shared):          # replicated: the same bytes on both
            clock += 7
            for store in writers:
                store.put(_message(i, topic, _uniq(i), clock))
        switch = new.commitlog.offset
        assert old.commitlog.offset == switch
        past = []
        for i in range(shared, shared + resent + lost):   # only the old master got these
            clock += 7
            offset, _size, _qo = old.put(_message(i, topic, _uniq(i), clock))
            past.append({"commitlog_offset": offset, "uniq_key": _uniq(i),
                         "failover": "resent" if i < shared + resent else "lost"})
        old_end = old.commitlog.offset
        for i in range(shared, shared + resent):          # the producers' retries
            clock += 11
            new.put(_message(i, topic, _uniq(i), clock, resent=True))
        for i in range(shared + resent + lost, shared + resent + lost + new_only):
            clock += 11
            new.put(_message(i, topic, _uniq(i), clock))
        new_end = new.commitlog.offset
        for store in writers:
            store.write_checkpoint(clock, clock)
    finally:
        for store in writers:
            store.close()
    for root in (old_root, new_root):
        (root / "lock").write_bytes(LOCK_CONTENT)
    write_controller_files(old_root, [[(1, 0)]], (CLUSTER_NAME, BROKER_NAME, 1))
    write_controller_files(new_root, [[(1, 0)], [(1, 0), (2, switch)]],
                           (CLUSTER_NAME, BROKER_NAME, 2))
    return {"switch_offset": switch, "old_max_offset": old_end, "new_max_offset": new_end,
            "old_epochs": [(1, 0)], "new_epochs": [(1, 0), (2, switch)],
            "consistent_point": switch, "past": past}
