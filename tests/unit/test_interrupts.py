"""Ctrl-C and SIGTERM end every long command alike (cli/interrupts.py): no traceback, one line saying what
to do (a rerun resumes the commands whose outputs resume), exit 130 / 143. Each command's handler is
replaced by one that is interrupted while it works, so this checks the wiring of every command without
running its workload (test_kill_resume.py and test_killed_commands.py kill real runs)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from inferlab.cli import main

RESUME = "the rows finished so far are saved; rerun the same command to resume"
START_AGAIN = "nothing more was done; rerun the command to start again"
COMMANDS = {  # command line -> (module and handler to replace, what the line says)
    "conformers generate --model m --input i.smi --output o.sdf": ("conformers_generate", "run_generate", RESUME),
    "conformers --model m --input i.smi --output o.sdf": ("conformers_generate", "run_generate", RESUME),
    "generate --model m --input i.jsonl --output o.jsonl": ("generate_cmd", "_generate", RESUME),
    "classify --model m --input i.jsonl --output o.jsonl": ("classify_cmd", "_run", RESUME),
    "hidden-states --model m --input i.jsonl --output o.safetensors --layers 0": ("hidden_states_cmd", "_run", RESUME),
    "bench --preset quick": ("bench_cmd", "_bench", RESUME),
    "tune --model m --workload generate --sample i.jsonl": ("tune_cmd", "_tune", START_AGAIN),
}


def interrupted_by(sig: int):
    def handler(args) -> int:
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the signal ends this sleep
        raise AssertionError("the signal did not interrupt the command")

    return handler


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_signal_ends_the_command_with_one_line_and_its_exit_code(monkeypatch, capsys, command, sig):
    module, handler, line = COMMANDS[command]
    monkeypatch.setattr(f"inferlab.cli.{module}.{handler}", interrupted_by(sig))
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        assert main(command.split()) == 128 + sig
    finally:
        restored = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])
    err = capsys.readouterr().err
    assert err.strip() == f"interrupted ({signal.Signals(sig).name}): {line}"
    assert restored[0] == before[0]  # SIGTERM's handler is the caller's again after the command


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
def test_a_second_signal_while_the_command_ends_is_ignored(monkeypatch, capsys, second):
    """Two quick Ctrl-Cs: the second once landed in the command's end (a progress bar's close) and printed a
    KeyboardInterrupt traceback there, cutting the end short; from the first signal on both are ignored."""
    ended = []

    def handler(args) -> int:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        finally:
            os.kill(os.getpid(), second)  # while the finished rows are being written
            time.sleep(0.2)
            ended.append(True)
        raise AssertionError("the signal did not interrupt the command")

    monkeypatch.setattr("inferlab.cli.generate_cmd._generate", handler)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        assert main("generate --model m --input i.jsonl --output o.jsonl".split()) == 130
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])
    assert ended == [True]
    assert capsys.readouterr().err.strip() == f"interrupted (SIGINT): {RESUME}"
