"""After a controller-mode failover: which messages did the old master have that the new master
never got?

When the old master rejoins as a slave, its HA client (``AutoSwitchHAClient.doTruncate``)
compares its epochs with the new master's (:func:`mqtool.controller.consistent_point`, each
side's last epoch ending at its max offset) and truncates its CommitLog to the consistent point.
Everything the old master stored past that point is cut; the bytes may stay on disk, looking
valid. This module answers the question from both stores before the old master rejoins:

* the consistent point, computed as the rejoin computes it;
* each message of the old master past it, marked ``resent`` when the new master holds a message
  with the same UNIQ_KEY (a producer retried it after the switch), else ``lost``.

Max offsets are where each broker's next start leaves its CommitLog (the recovery prediction of
:mod:`mqtool.recovery`): the old master restarts before it handshakes. Rules from RocketMQ 5.x's
source (``EpochFileCache``, ``AutoSwitchHAClient``, ``AutoSwitchHAService``); no broker-written
store exists for this, the tests use stores forged through :mod:`mqtool.writer`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .controller import EpochFile, consistent_point, epoch_ranges
from .errors import MqtoolError
from .formats import codecs
from .inspect import MessageFilter, iter_commitlog_records
from .recovery import predict_recovery
from .salvage import replay_fields
from .scan import message_at
from .store import Store

RESENT, LOST = "resent", "lost"


@dataclass
class FailoverReport:
    old_store: str
    new_store: str
    old_max_offset: int
    new_max_offset: int
    old_epochs: list[dict]
    new_epochs: list[dict]
    consistent_point: int
    shared_epoch: int | None
    messages: list[dict] = field(default_factory=list)

    @property
    def lost(self) -> list[dict]:
        return [m for m in self.messages if m["failover"] == LOST]

    @property
    def resent(self) -> list[dict]:
        return [m for m in self.messages if m["failover"] == RESENT]

    def to_dict(self) -> dict:
        return {"old_store": self.old_store, "new_store": self.new_store,
                "old_max_offset": self.old_max_offset, "new_max_offset": self.new_max_offset,
                "old_epochs": self.old_epochs, "new_epochs": self.new_epochs,
                "consistent_point": self.consistent_point, "shared_epoch": self.shared_epoch,
                "truncated_bytes": max(0, self.old_max_offset - self.consistent_point),
                "summary": {"past_consistent_point": len(self.messages),
                            "resent": len(self.resent), "lost": len(self.lost)},
                "messages": self.messages}


def _epochs_of(store: Store, max_offset: int, which: str) -> list[dict]:
    epochs = EpochFile.read(store.root)
    if not epochs.present:
        raise MqtoolError(f"{store.root}: no epochFileCheckpoint: not a controller-mode store "
                          f"(the {which} master's epochs are needed)")
    entries, _source, fatal = epochs.loaded()
    if fatal or not entries:
        raise MqtoolError(f"{store.root}: the {which} master's epoch file is unusable "
                          f"({fatal or 'no epoch loaded'}); run mqtool verify on it")
    return epoch_ranges(entries, max_offset)


def _uniq_keys(store: Store, end: int) -> dict[str, list[int]]:
    """UNIQ_KEY -> CommitLog offsets of the store's messages below ``end`` (inner messages
    included)."""
    keys: dict[str, list[int]] = {}
    for rec in iter_commitlog_records(store.commitlog, filters=MessageFilter(to_offset=end),
                                      body_mode="none", messages_only=True):
        uniq = rec.get("uniq_key")
        if uniq:
            keys.setdefault(uniq, []).append(rec["commitlog_offset"])
    return keys


def failover_report(old: Store, new: Store, *, progress=None) -> FailoverReport:
    """The consistent point of ``old`` (rejoining) against ``new`` (the master) and the old
    master's messages past it, each marked resent or lost (``failover`` key)."""
    old_max = predict_recovery(old).process_offset
    new_max = predict_recovery(new).process_offset
    old_epochs = _epochs_of(old, old_max, "old")
    new_epochs = _epochs_of(new, new_max, "new")
    point, shared = consistent_point(old_epochs, new_epochs)
    report = FailoverReport(str(old.root), str(new.root), old_max, new_max, old_epochs,
                            new_epochs, point, shared)
    if point < 0:
        raise MqtoolError(f"{old.root} and {new.root} share no epoch with the same start offset: "
                          "the rejoin finds no consistent point (the handshake fails and nothing "
                          "is truncated); are these two brokers of one group?")
    new_keys = _uniq_keys(new, new_max)
    for rec in iter_commitlog_records(old.commitlog, filters=MessageFilter(from_offset=point,
                                                                           to_offset=old_max),
                                      body_mode="none", messages_only=True):
        where = new_keys.get(rec.get("uniq_key") or "")
        brief = {k: rec[k] for k in ("commitlog_offset", "topic", "queue_id", "queue_offset",
                                     "store_timestamp", "uniq_key", "keys", "tags")}
        brief["failover"] = RESENT if where else LOST
        brief["new_master_offsets"] = where or []
        report.messages.append(brief)
        if progress is not None:
            progress(1)
    return report


def export_lost(old: Store, report: FailoverReport, emit: Callable[[dict], None], *,
                body_mode: str = "base64") -> int:
    """The lost messages as ``mqtool export`` writes them (message dict + replay fields), one
    ``emit`` each; returns how many."""
    n = 0
    for lost in report.lost:
        offset = lost["commitlog_offset"]
        for rec in iter_commitlog_records(old.commitlog,
                                          file_name=lambda seg: old.relative(seg.path),
                                          filters=MessageFilter(from_offset=offset,
                                                                to_offset=offset + 1),
                                          body_mode=body_mode, messages_only=True):
            if rec.get("uniq_key") != lost["uniq_key"]:
                continue
            record = message_at(old.commitlog, offset, check_crc=False)
            rec.update(replay_fields(record, rec["properties"]
                                     or codecs.decode_properties(record.properties_raw)))
            rec["beyond_truncation"] = False
            rec["failover"] = LOST
            emit(rec)
            n += 1
    return n
