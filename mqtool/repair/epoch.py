"""A repair that cuts the CommitLog of a controller-mode store cuts its epoch file as the broker's
own truncation does (``AutoSwitchHAClient.doTruncate`` / ``AutoSwitchHAService.changeToMaster``:
``truncateFiles(offset)`` then ``EpochFileCache.truncateSuffixByOffset(offset)``): the entries
that start at or past the cut go, and ``CheckpointFile.write`` rewrites the file through
``MixAll.string2File``, so the old content becomes ``epochFileCheckpoint.bak``.

An epoch starting exactly at the cut is empty: it goes only when the repair drops data (as the
broker's truncation does); a repair that only erases stale bytes past the data leaves it. Where
no entry would be left the broker writes nothing (an empty list is never written) and the file
would keep epochs past the end: the repair refuses then (exit 2, nothing changed)."""
from __future__ import annotations

from pathlib import Path

from ..controller import EpochFile, truncate_suffix
from ..formats import epoch as epoch_fmt
from ..store import OFFSET_NAME, Store
from ..writer import epoch_checkpoint_bytes
from .files import diff_ranges
from .transaction import FileOp, RepairError, RepairPlan, Stage

EPOCH_REASON = ("epochs starting at or past the cut removed (truncateSuffixByOffset); the old "
                "content goes to .bak as string2File does")


def commitlog_cut(plan: RepairPlan) -> int | None:
    """The lowest CommitLog offset the plan changes (a file deleted, a tail cut or zeroed)."""
    cuts = []
    for op in plan.ops:
        name = Path(op.path).name
        if op.kind != "commitlog" or not OFFSET_NAME.match(name):
            continue
        if op.op == "delete":
            cuts.append(int(name))
        elif op.ranges:
            cuts.append(int(name) + min(r[0] for r in op.ranges))
    return min(cuts) if cuts else None


def plan_epoch_cut(store: Store, stage: Stage, plan: RepairPlan) -> None:
    """Add the epoch file's change to ``plan`` when its CommitLog cut strands epochs; raise
    RepairError when the broker's truncation could not leave the file consistent."""
    cut = commitlog_cut(plan)
    epochs = EpochFile.read(store.root)
    if cut is None or not epochs.present:
        return
    entries, source, fatal = epochs.loaded()
    name = epoch_fmt.EPOCH_FILE
    hit = [(e, s) for e, s in entries if s > cut or (s == cut and plan.data_loss)]
    if not hit:
        return
    if fatal or source != name:
        raise RepairError(f"{store.root}: {plan.command} refused: it cuts the CommitLog at "
                          f"{cut:,} below epoch {hit[0][0]} but {name} is unusable "
                          f"({fatal or 'the broker would load the .bak'}); run mqtool verify; "
                          "nothing was changed")
    kept = truncate_suffix(entries, cut if plan.data_loss else cut + 1)
    if not kept:
        raise RepairError(f"{store.root}: {plan.command} refused: it cuts the CommitLog at "
                          f"{cut:,}, before every epoch of {name} (the first starts at "
                          f"{entries[0][1]:,}); the broker never writes an empty epoch file, so "
                          "the epochs past the cut would stay; nothing was changed")
    old_main = store.root / name
    rel_main, rel_bak = name, name + epoch_fmt.BAK_SUFFIX
    for rel, data in ((rel_main, epoch_checkpoint_bytes(kept)), (rel_bak, old_main.read_bytes())):
        target = stage.path(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        stage.mark_written(rel)
        original = store.root / rel
        old = original if original.is_file() else None
        ranges = diff_ranges(old, target)
        if old is not None and not ranges:
            continue
        plan.ops.append(FileOp("write", rel, "other", old.stat().st_size if old else None,
                               target.stat().st_size, ranges, EPOCH_REASON,
                               stage_file=str(target),
                               detail={"epochs_removed": [list(e) for e in hit]}))
    plan.notes.append(f"{name}: epoch(s) {', '.join(str(e) for e, _ in hit)} removed, as the "
                      f"broker's truncation to {cut:,} removes them")
