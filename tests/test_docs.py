"""The man pages, the README and .ci/run say what the code does."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, leaf_commands

MAN = REPO / "man"


COMMANDS = list(leaf_commands())


def test_man_pages_are_in_sync_with_the_command_tree():
    proc = subprocess.run([sys.executable, str(MAN / "generate.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_every_option_in_help_appears_in_the_commands_page(path):
    page = MAN / ("mqtool-" + "-".join(path) + ".1")
    assert page.is_file(), f"no man page for mqtool {' '.join(path)}"
    text = page.read_text().replace("\\-", "-")
    help_text = subprocess.run([sys.executable, "-m", "mqtool", *path, "--help"],
                               capture_output=True, text=True, env={**os.environ,
                                                                    "COLUMNS": "200"}).stdout
    options = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text))
    assert options, help_text
    missing = sorted(o for o in options if o not in text)
    assert missing == [], f"{page.name} lacks {missing}"


    # a flag takes no value: its help row must not read like one wanting a <bool>
    flags = [line for line in help_text.splitlines() if "<bool>" in line]
    assert flags == [], flags


def test_every_command_is_listed_in_mqtool_1():
    text = (MAN / "mqtool.1").read_text()
    for path in COMMANDS:
        assert f"mqtool {' '.join(path)}" in text
    assert sorted(p.name for p in MAN.glob("*.1")) == sorted(
        ["mqtool.1"] + ["mqtool-" + "-".join(p) + ".1" for p in COMMANDS])


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
@pytest.mark.parametrize("page", sorted(p.name for p in MAN.glob("*.1")))
def test_man_page_renders_without_warnings(page):
    proc = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(MAN / page)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def readme_command(kind: str) -> str:
    text = (REPO / "README.md").read_text()
    match = re.search(rf"<!-- {kind} -->\s*```(?:sh|bash)?\n(.+?)\n```", text, re.S)
    assert match, f"README has no <!-- {kind} --> block"
    return match.group(1).strip()


def test_ci_runs_exactly_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()
    assert readme_command("test-command") in [line.strip() for line in ci]


def test_readme_example_command_works_on_the_shipped_store():
    command = readme_command("example-command")
    # the set-up half (pip install) is what the test run itself relies on; run the mqtool half
    mqtool_part = command.split("&&")[-1].strip()
    # python3 -m: the command works in a virtual environment that is not activated (no
    # mqtool script on PATH)
    assert mqtool_part.startswith("python3 -m mqtool ")
    args = mqtool_part.split()[3:]
    proc = subprocess.run([sys.executable, "-m", "mqtool", "--no-progress", *args], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "0 error(s)" in proc.stdout
