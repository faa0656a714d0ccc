"""`inferlab --help` and every command's --help render (argparse formats help strings with %), each flag's
default shown as the value it takes."""

from __future__ import annotations

import argparse

import pytest

from inferlab.cli import build_parser, main


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for command in ("bench", "report", "compare", "recommend", "generate", "conformers", "demo", "tune"):
        assert command in out


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(argv prefix, parser) of every command and sub-command (`conformers generate`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _commands(sub, (*prefix, name))


def test_every_command_help_renders_with_real_defaults(capsys):
    commands = list(_commands(build_parser()))
    assert ("conformers", "generate") in [argv for argv, _ in commands]
    for argv, _ in commands:
        with pytest.raises(SystemExit) as e:
            main([*argv, "--help"])
        assert e.value.code == 0, argv
        out = capsys.readouterr().out
        assert "UNSET" not in out, (argv, [line for line in out.splitlines() if "UNSET" in line])


def test_top_level_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Exit codes: 0 done; 1 no row of the run succeeded" in text and "2 a usage or input error" in text


def test_the_demo_help_claims_the_time_it_takes_on_a_small_cpu(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Under a minute on a 2-core CPU" in text and "about a minute" not in text.lower()
