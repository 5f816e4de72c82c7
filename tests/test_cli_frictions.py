"""What a new user trips over on the command line: value placeholders in --help that read as
syntax, a --kind list that is not what dump accepts, numbers dump silently ignored, an undo
refusal suggesting an option undo lacks, and the folder above a store given instead of it."""
from __future__ import annotations

import fcntl
import re
import shutil

import pytest

from conftest import FIXTURE_STORE, invoke, leaf_commands
from mqtool.vocabulary import FILE_KINDS

STORE = FIXTURE_STORE / "store"


def one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("mqtool: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_help_names_values_instead_of_printing_python_types(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    for path in leaf_commands():
        code, out, _ = invoke(*path, "--help")
        assert code == 0, path
        # typer's type labels: <int>, <str>, <float>, <path>, <list[str]>, <int range>
        assert not re.findall(r"<(?:int|str|float|path|bool|list\[)[^>]*>", out), (path, out)
        usage = out.splitlines()[0]
        assert "{" not in usage and "<" not in usage, usage
    _, out, _ = invoke("dump", "--help")
    for shown in ("--topic TOPIC", "--queue ID", "--from OFFSET", "--since TIME", "--limit N",
                  "--kind KIND", "--commitlog-file-size BYTES", "--body FORM"):
        assert shown in out, shown
    _, out, _ = invoke("spark", "audit", "--help")
    assert "Usage: mqtool spark audit [OPTIONS] PATH..." in out
    assert "--broker-name NAME" in out


def test_dump_kind_lists_exactly_what_it_accepts(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    _, out, _ = invoke("dump", "--help")
    listed = re.search(r"--kind KIND\s+Force the kind of a single file: (.+?)\.\n", out, re.S)
    assert listed, out
    text = re.sub(r"-\s*\n\s*", "-", listed.group(1))      # a kind wrapped at its hyphen
    assert tuple(k.strip() for k in " ".join(text.split()).split(",")) == FILE_KINDS
    checkpoint = STORE / "checkpoint"
    for kind in FILE_KINDS:
        code, _, err = invoke("dump", "--json", "--kind", kind, checkpoint)
        assert "--kind must be" not in err, (kind, err)
    code, _, err = invoke("dump", "--kind", "cq", checkpoint)
    assert code == 2 and "--kind must be one of" in one_error(err)
    code, _, err = invoke("dump", "--kind", "index", STORE)
    assert code == 2 and "single file" in one_error(err)


@pytest.mark.parametrize("args", [
    ("--from", "-5"), ("--to", "-1"), ("--queue", "-2"), ("--commitlog-file-size", "7"),
    ("--commitlog-file-size", str(2 << 20))])
def test_dump_refuses_numbers_it_cannot_use(args):
    code, out, err = invoke("dump", "--body", "none", *args, STORE)
    assert code == 2 and out == ""
    assert args[0] in one_error(err)


def test_a_geometry_the_files_agree_with_is_taken():
    code, out, err = invoke("dump", "--json", "--limit", "1", "--commitlog-file-size",
                            str(1 << 20), STORE)
    assert code == 0 and out, err
    code, _, err = invoke("info", "--commitlog-file-size", "4096", STORE)
    assert code == 2 and "--commitlog-file-size 4096" in one_error(err)


def test_every_command_taking_a_store_names_the_store_below(tmp_path):
    above = tmp_path / "broker-a"
    above.mkdir()
    (above / "store").symlink_to(STORE, target_is_directory=True)
    commands = [("info",), ("verify",), ("dump",), ("query", "--key", "k"), ("export",),
                ("salvage", "--out", tmp_path / "s.jsonl"), ("consumers",), ("timers",),
                ("recover", "--dry-run"), ("rebuild-index", "--dry-run"), ("undo",)]
    for command in commands:
        code, _, err = invoke(command[0], above, *command[1:])
        assert code == 2, (command, err)
        assert f"did you mean {above / 'store'}" in one_error(err), (command, err)


@pytest.fixture(scope="module")
def repaired(tmp_path_factory):
    """A copy of the fixture store with one repair (a truncation) and its backup."""
    root = tmp_path_factory.mktemp("undo") / "store"
    shutil.copytree(STORE, root)
    code, _, err = invoke("truncate", "--to", "2097152", root)
    assert code in (0, 1), err
    (backup,) = (root / ".mqtool-backup").iterdir()
    return root, backup


def test_undo_refusals_say_what_undo_can_do(repaired, tmp_path, mqtool):
    root, backup = repaired
    with open(root / "lock", "r+b") as fh:         # a live process holds the lock
        fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        proc = mqtool("undo", backup)
    assert proc.returncode == 3
    line = one_error(proc.stderr)
    assert "--out" not in line and "--dry-run" in line
    # a store without any backup: nothing to undo, exit 2 as undo's help says
    bare = tmp_path / "bare"
    shutil.copytree(STORE, bare)
    code, _, err = invoke("undo", bare)
    assert code == 2 and "nothing to undo" in one_error(err)
    _, out, _ = invoke("undo", "--help")
    assert "2 not a backup" in " ".join(out.split())
    # given the store with a backup, undo names it and changes nothing
    code, _, err = invoke("undo", root)
    assert code == 2 and str(backup) in one_error(err)
