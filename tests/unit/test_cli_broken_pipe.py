"""A reader that stops early (`inferlab bench --list | head -1`) ends the command with the shell's SIGPIPE
status and no traceback."""

from __future__ import annotations

import signal
import subprocess
import sys


def test_a_closed_stdout_ends_the_command_quietly():
    command = [sys.executable, "-c", "from inferlab.cli import console_main; console_main()", "model", "presets"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line: every print meets a broken pipe
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 128 + signal.SIGPIPE, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
