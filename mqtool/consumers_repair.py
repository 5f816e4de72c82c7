"""What ``recover --consumer-offsets clamp`` would write (computed here; applying it belongs to
the repair machinery: plan, back up, write atomically, undo).

* Clamp: committed offsets past their queue's end after the next start are set to that end, the
  offset the broker's first pull would move the group to anyway (OFFSET_OVERFLOW_BADLY), but
  written before any producer can refill the gap, so no new message is skipped and a slave
  without offsetCheckInSlave behaves like a master.
* Restore: a consumerOffset.json or delayOffset.json the broker cannot decode, with a ``.bak``
  it can, gets the ``.bak``'s bytes (what the broker loads anyway; afterwards the main file is
  good again, so a later bad ``.bak`` cannot make the broker forget everything).

Nothing here writes a file.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import config as cfg
from .consumers import queue_bounds
from .recovery import RecoveryPlan
from .store import Store


@dataclass
class OffsetChange:
    topic: str
    group: str
    queue_id: int
    old: int
    new: int


@dataclass
class ConfigRewrite:
    """New content for one config file, and why."""

    file: str                       # relative to the store root
    reason: str
    content: bytes                  # the whole new file
    restored_from_bak: bool = False
    changes: list[OffsetChange] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"file": self.file, "reason": self.reason,
                "restored_from_bak": self.restored_from_bak,
                "changes": [vars(c) for c in self.changes], "bytes": len(self.content)}


def _bean(document: dict) -> cfg.JavaBean:
    """The document re-shaped as fastjson writes the manager: top-level fields and dataVersion
    are beans, offsetTable maps topic@group to Integer-keyed maps."""
    out = cfg.JavaBean(document)
    if isinstance(out.get("dataVersion"), dict):
        out["dataVersion"] = cfg.JavaBean(out["dataVersion"])
    table = out.get("offsetTable")
    if isinstance(table, dict):
        fixed = {}
        for key, queues in table.items():
            if isinstance(queues, dict):
                queues = {(cfg.int_key(k) if cfg.int_key(k) is not None else k): v
                          for k, v in queues.items()}
            fixed[key] = queues
        out["offsetTable"] = fixed
    return out


def plan_offset_clamp(store: Store, plan: RecoveryPlan,
                      configs: cfg.StoreConfigs | None = None) -> ConfigRewrite | None:
    """consumerOffset.json with every offset past its queue's end after the next start set to
    that end (None when no offset is past its end, or when there is no decodable file).
    Entries mqtool cannot type (CFG_BAD_VALUE) are written back unchanged."""
    configs = configs or cfg.read_store_configs(store.root)
    load = configs.loads[cfg.CONSUMER_OFFSET]
    if configs.offsets_in_rocksdb or not isinstance(load.document, dict):
        return None
    table, _ = cfg.offset_table(load.document, load.used)
    bounds = queue_bounds(store, plan)
    document = _bean(load.document)
    changes = []
    for topic_group, queues in table.items():
        topic, group = cfg.split_topic_group(topic_group)
        for queue_id, offset in queues.items():
            b = bounds.get((topic, queue_id))
            end = b.max_after_start if b is not None else 0
            if offset > end:
                document["offsetTable"][topic_group][queue_id] = end
                changes.append(OffsetChange(topic, group, queue_id, offset, end))
    if not changes:
        return None
    source = load.used if load.used == cfg.CONSUMER_OFFSET else f"{load.used} (the main file " \
        "is unreadable)"
    return ConfigRewrite(f"config/{cfg.CONSUMER_OFFSET}",
                         f"{len(changes)} committed offset(s) past their queue's end after the "
                         f"next start, clamped to it; the rest as in {source}",
                         cfg.fastjson_pretty(document).encode("utf-8"),
                         restored_from_bak=load.outcome == "bak", changes=changes)


def plan_bak_restores(store: Store, configs: cfg.StoreConfigs | None = None,
                      names=(cfg.CONSUMER_OFFSET, cfg.DELAY_OFFSET)) -> list[ConfigRewrite]:
    """The named config files whose main file the broker cannot use while its ``.bak`` decodes:
    each gets the ``.bak``'s bytes."""
    configs = configs or cfg.read_store_configs(store.root)
    out = []
    for name in names:
        load = configs.loads.get(name) or cfg.read_config(configs.config_dir / name)
        if load.outcome != "bak":
            continue
        content = (load.path.with_name(name + ".bak")).read_bytes()
        out.append(ConfigRewrite(f"config/{name}", f"{load.main.sentence()}; restored from "
                                 f"{name}.bak, which the broker loads instead", content,
                                 restored_from_bak=True))
    return out
