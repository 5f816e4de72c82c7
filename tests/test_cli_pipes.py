"""Output cut short by the reader (`mqtool ... | head`) is not an error: exit 0, nothing on stderr."""
from __future__ import annotations

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
