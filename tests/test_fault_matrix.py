"""Every fault ``mqtool fixture damage`` injects, on several seeds, in a clean and a crashed store
made by ``mqtool fixture make``: verify sees it, recover repairs it, verify afterwards reports no
error, and the backup holds every byte the repair removed or changed.

Two faults cannot be "repaired" and the tests pin down what happens instead:
* a deleted *middle* CommitLog file: the broker reads on past the gap and so does recover; the
  units and entries pointing into the gap stay dangling until ``truncate --to <gap start>``;
* a stray file: neither the broker nor mqtool deletes files it does not own (verify warns).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mqtool import forge
from mqtool.repair import run_repair
from mqtool.store import Store
from mqtool.verify import verify_store
from test_repair import assert_backup_holds_originals, make_store

SEEDS = (0, 1, 2)
GAP_CODES = {"CL_GAP", "CQ_DANGLING", "IDX_DANGLING", "CQ_QUEUE_GAP"}


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    # forge seed 1: its last record's body covers the middle of the record, so a torn tail
    # reaches the body (see test_torn_properties_are_invisible_to_the_broker for the other case)
    return {"clean": make_store(root / "clean", "--messages", "2000", "--seed", "1"),
            "crash": make_store(root / "crash", "--messages", "2000", "--seed", "1", "--crash")}


def _codes(store: Path, severity: str | None = None) -> set[str]:
    report = verify_store(Store(store))
    return {f.code for f in report.findings if severity is None or f.severity == severity}


def _findings(store: Path) -> set[tuple[str, str, int]]:
    return {f.key for f in verify_store(Store(store)).findings}


def _errors(store: Path) -> set[str]:
    return _codes(store, "error")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("base", ["clean", "crash"])
@pytest.mark.parametrize("kind", forge.DAMAGE_KINDS)
def test_fault_is_seen_and_repaired(bases, tmp_path, kind, base, seed):
    store = tmp_path / "store"
    shutil.copytree(bases[base], store)
    before_damage = _findings(store)
    options = {"direction": "ahead"} if kind == "stale-checkpoint" else {}
    report = forge.damage_store(store, kind, seed, **options)
    seen = _findings(store) - before_damage
    assert seen, f"verify does not see {kind}: {report}"

    damaged = tmp_path / "damaged"
    shutil.copytree(store, damaged)
    result = run_repair("recover", store)
    assert result.status in ("repaired", "nothing to do")
    if result.status == "repaired":
        assert_backup_holds_originals(result.backup, damaged, store)
    lost = result.plan.summary.get("messages_removed", 0) if result.plan else 0
    assert result.exit_code == (1 if result.data_loss else 0)
    if lost:
        assert result.exit_code == 1

    errors = _errors(store)
    gap_file = report.get("file_kind") == "commitlog" and kind == "delete-file"
    if gap_file:
        # the broker's own outcome: later files kept, references into the gap dangling
        assert errors <= GAP_CODES and "CL_GAP" in errors
        assert any("truncate --to" in note for note in result.plan.notes)
        gap = report["range"]["start"]
        cut = run_repair("truncate", store, to=gap)
        assert cut.status == "repaired" and cut.exit_code == 1
        errors = _errors(store)
    assert errors == set(), f"{kind} seed {seed} on {base}: {errors}"
    if kind == "stale-checkpoint":
        assert "CKPT_AHEAD" not in _codes(store)
    if kind == "stray-file":
        assert (store / report["file"]).exists()
    # repaired means done: a second run has nothing to do
    assert run_repair("recover", store).status == "nothing to do"


def test_torn_properties_are_invisible_to_the_broker(tmp_path):
    """A torn write that only zeroes a 4.x record's properties passes every check the broker
    makes on recovery (no CRC covers properties before 5.2): recover leaves the record, and verify
    keeps flagging the ConsumeQueue unit and index entries that no longer match it."""
    store = make_store(tmp_path / "store", "--messages", "2000", "--seed", "3")
    forge.damage_store(store, "torn-tail", 0)
    errors = _errors(store)
    assert errors == {"CQ_MISMATCH", "IDX_HASH_MISMATCH"}
    result = run_repair("recover", store)
    assert result.status == "nothing to do"
    assert _errors(store) == errors


def test_stale_checkpoint_behind_is_no_fault(bases, tmp_path):
    """A checkpoint that lags is what ASYNC_FLUSH always leaves; only one ahead of the data is
    lowered (it would make an abnormal recovery start too late)."""
    store = tmp_path / "store"
    shutil.copytree(bases["clean"], store)
    forge.damage_store(store, "stale-checkpoint", 0, direction="behind")
    assert "CKPT_AHEAD" not in _codes(store)
    assert run_repair("recover", store).status == "nothing to do"
