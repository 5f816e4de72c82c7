"""The store's bookkeeping files in a repair: the checkpoint, the abort file, and the 5.x service
files (abort.bak, the compaction position checkpoint) the broker writes on start."""
from __future__ import annotations

import struct

from ..codec import struct_format
from ..formats import checkpoint as ckpt_fmt
from ..recovery import VERSION_49
from ..store import Store
from ..writer import checkpoint_bytes
from .transaction import FileOp, Stage


# the checkpoint's five longs, as formats/checkpoint declares them
CHECKPOINT_LONGS = struct.Struct(
    ">" + "".join(struct_format(sc) for sc in ckpt_fmt.checkpoint.subcons[:5]))


# --- the checkpoint ----------------------------------------------------------------------------------

def _stage_checkpoint(stage: Stage, store: Store, *, version: str | None, logics: int | None = None,
                      index: int | None = None, confirm: int | None = None,
                      physic_cap: int | None = None, logics_cap: int | None = None,
                      index_cap: int | None = None, create: bool = True) -> None:
    path = store.checkpoint_path
    old = path.read_bytes() if path.is_file() else None
    if old is None and not create:
        return
    padded = (old or b"").ljust(40, b"\0")
    fields = list(CHECKPOINT_LONGS.unpack_from(padded, 0))
    if logics is not None:
        fields[1] = logics
    if index is not None:
        fields[2] = index
    if confirm is not None and version not in (None, VERSION_49):
        fields[4] = confirm
    if physic_cap is not None and fields[0] > physic_cap:
        fields[0] = physic_cap
    if logics_cap is not None and fields[1] > logics_cap:
        fields[1] = logics_cap
    if index_cap is not None and fields[2] > index_cap:
        fields[2] = index_cap
    fresh = checkpoint_bytes(*fields)
    # 4.x writes three longs and never touches the rest of the page
    width = 24 if version == VERSION_49 else 40
    new = fresh[:width] + (old[width:] if old is not None and len(old) > width else fresh[width:])
    if old is not None and len(old) < len(fresh):
        new = new.ljust(len(fresh), b"\0")
    if new == old:
        return
    target = stage.path("checkpoint")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(new)
    stage.mark_written("checkpoint")


POSITION_CHECKPOINT = "compaction/position-checkpoint"   # a key of _SERVICE_REASONS
# CompactionPositionMgr's JSON (fastjson, pretty) while no compaction topic has run
EMPTY_POSITION_CHECKPOINT = b'{\n\t"empty":true,\n\t"queueOffsetMap":{}\n}'


def _stage_bytes(stage: Stage, rel: str, data: bytes) -> None:
    target = stage.path(rel)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    stage.mark_written(rel)


def _stage_5x_service_files(stage: Stage, store: Store) -> set[str]:
    """The files a 5.x broker's start and clean shutdown leave besides the store proper.

    Both go through MixAll.string2File, which first copies the file's previous content into
    FILE.bak: the start writes its PID into ``abort`` (so ``abort.bak`` keeps the crashed broker's
    PID, or nothing when the start created the file), and the shutdown persists
    ``compaction/position-checkpoint`` (the loaded offsets again, the old text in ``.bak``)."""
    abort = store.root / "abort"
    _stage_bytes(stage, "abort.bak", abort.read_bytes() if abort.is_file() else b"")
    staged = {"abort.bak"}
    position = store.root / POSITION_CHECKPOINT
    if position.is_file():
        _stage_bytes(stage, POSITION_CHECKPOINT + ".bak", position.read_bytes())
        staged.add(POSITION_CHECKPOINT + ".bak")
    else:
        _stage_bytes(stage, POSITION_CHECKPOINT, EMPTY_POSITION_CHECKPOINT)
        staged.add(POSITION_CHECKPOINT)
    return staged


def _abort_op(store: Store) -> list[FileOp]:
    path = store.root / "abort"
    if not path.exists():
        return []
    size = path.stat().st_size
    return [FileOp("delete", "abort", "abort", size, None, [[0, size]] if size else [],
                   "the store is consistent again: the next start is a normal one")]


CONSUMER_OFFSET_MODES = ("keep", "clamp")


def _consumer_offsets(stage: Stage, store: Store, rp, mode: str) -> list[str]:
    """What the next start does to committed consumer offsets, and with ``clamp`` the rewrite
    that spares the groups the broker's own correction: offsets past their queue's recovered end
    set to that end, and an unreadable consumerOffset.json / delayOffset.json restored from the
    .bak the broker would load instead."""
    from ..consumers_repair import plan_bak_restores, plan_offset_clamp

    if mode not in CONSUMER_OFFSET_MODES:
        raise ValueError(f"--consumer-offsets {mode!r}: choose from "
                         f"{', '.join(CONSUMER_OFFSET_MODES)}")
    clamp = plan_offset_clamp(store, rp)
    if mode == "keep":
        if clamp is None:
            return []
        return [f"{len(clamp.changes)} committed consumer offset(s) end up past their queue's "
                "end: the broker moves each group back on its first pull (see mqtool consumers; "
                "--consumer-offsets clamp rewrites them now)"]
    rewrites = {r.file: r for r in plan_bak_restores(store)}
    if clamp is not None:
        rewrites[clamp.file] = clamp
    for rewrite in rewrites.values():
        _stage_bytes(stage, rewrite.file, rewrite.content)
    return [f"{r.file}: {r.reason}" for r in rewrites.values()]

