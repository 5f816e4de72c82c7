"""Output cut short by the reader (`mqtool ... | head`) is not an error: nothing on stderr, and
the exit status is the command's own (verify: 1 when it found errors) whatever the timing."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURE_STORE

STORE = FIXTURE_STORE / "store"


@pytest.mark.parametrize("args", [("dump", STORE), ("dump", "--json", STORE), ("info", STORE),
                                  ("info", "--queues", STORE), ("verify", STORE),
                                  ("dump", STORE / "consumequeue" / "TopicTest" / "1"
                                   / "00000000000000000000")],
                         ids=["dump", "dump-json", "info", "info-queues", "verify", "dump-cq"])
def test_a_reader_that_stops_early_is_not_an_error(args):
    proc = subprocess.Popen([sys.executable, "-m", "mqtool", "--no-progress", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()          # what `head -1` reads, then it goes away
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert first
    assert proc.wait() == 0, stderr
    assert "Traceback" not in stderr and "Broken pipe" not in stderr


def test_locations_print_as_written_not_as_emoji():
    """A location such as ``consumerOffset.json:100:`` is text: rich's emoji codes (``:100:``)
    must not turn it into a picture in a table or a finding line."""
    from mqtool.cli.common import stderr_console, stdout_console

    for console in (stdout_console(record=True, file=open("/dev/null", "w")),
                    stderr_console()):
        with console.capture() as captured:
            console.print("warning config/consumerOffset.json:100: group GroupA :thumbs_up:")
        assert captured.get().strip() == \
            "warning config/consumerOffset.json:100: group GroupA :thumbs_up:"


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipes") / "store"
    shutil.copytree(STORE, root)
    proc = subprocess.run([sys.executable, "-m", "mqtool", "fixture", "damage", str(root),
                           "--kind", "bit-flip", "--seed", "3"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.mark.parametrize("reader,json_output", [("gone-at-once", False), ("one-line", False),
                                                ("everything", False), ("gone-at-once", True)],
                         ids=["gone-at-once", "one-line", "everything", "json-gone-at-once"])
def test_the_exit_status_does_not_depend_on_when_the_reader_leaves(damaged, reader,
                                                                  json_output):
    """verify finds errors: exit 1 whether the reader closed the pipe before the first line
    (the writes fail), after one line, or read it all."""
    args = ["verify", *(["--json"] if json_output else []), str(damaged)]
    proc = subprocess.Popen([sys.executable, "-m", "mqtool", "--no-progress", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if reader == "gone-at-once":
        proc.stdout.close()
    elif reader == "one-line":
        assert proc.stdout.readline()
        proc.stdout.close()
    else:
        assert proc.stdout.read()
        proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait() == 1, stderr
    assert "Traceback" not in stderr and "Broken pipe" not in stderr
    assert "Exception ignored" not in stderr
    assert stderr.rstrip().splitlines()[-1].startswith("mqtool: verify: 2 error(s)")
