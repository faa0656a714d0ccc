"""inferlab: fast, honestly measured batch inference of small LMs. Start with `inferlab demo`.

`inferlab <command>`: thin wrappers that parse flags, build a config and call one library function.
Only the CLI prints, draws progress bars and configures logging. Each command lives in its own module
with a `register(subparsers)` function; heavy imports happen inside the handlers so `--help` is fast.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import logging
import os
import re
import signal
import sys

from inferlab.child_processes import end_now
from inferlab.cli.interrupts import interrupted_exit, interrupts_end_the_command
from inferlab.errors import InferlabError, is_write_failure, write_failed

# Packages a command may need that a machine can lack (import name -> what to install).
OPTIONAL_PACKAGES = {"rdkit": "rdkit", "ray": "ray", "submitit": "submitit", "triton": "triton",
                     "matplotlib": "matplotlib", "torchao": "torchao", "flash_attn": "flash-attn", "vllm": "vllm"}

# Command modules, in the order `inferlab --help` lists them.
COMMAND_MODULES = [
    "inferlab.cli.model_cmd",
    "inferlab.cli.bench_cmd",
    "inferlab.cli.report_cmd",
    "inferlab.cli.compare_cmd",
    "inferlab.cli.recommend_cmd",
    "inferlab.cli.conformers_cmd",
    "inferlab.cli.classify_cmd",
    "inferlab.cli.hidden_states_cmd",
    "inferlab.cli.generate_cmd",
    "inferlab.cli.demo_cmd",
    "inferlab.cli.tune_cmd",
]


class HelpWithDefaults(argparse.HelpFormatter):
    """Every option's help ends with its default when it has one and does not say it already."""

    @staticmethod
    def _shows_default(action: argparse.Action) -> bool:
        return bool(action.option_strings) and "default" not in (action.help or "") and not (
            action.default is None or action.default is False or action.default == argparse.SUPPRESS
            or isinstance(action.default, (list, tuple, dict)))

    def _format_action(self, action: argparse.Action) -> str:
        if action.help is None and self._shows_default(action):  # no help text: the default alone
            action = copy.copy(action)
            action.help = "(default: %(default)s)"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if not self._shows_default(action):
            return action.help
        return f"{action.help or ''} (default: %(default)s)".lstrip()


class CommandParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpWithDefaults)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inferlab", description=__doc__.splitlines()[0],
        epilog="`inferlab COMMAND --help` lists a command's flags; docs/ in the repository explains each part. "
               "Exit codes: 0 done; 1 no row of the run succeeded (every row an error row, or an input with no "
               "row; a rerun resuming an earlier run's rows exits 0); 2 a usage or input error (the message names the fix); 3 a scaled-out run left shards "
               "unfinished; 130 / 143 interrupted by Ctrl-C / SIGTERM (rerun the same command to resume).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=CommandParser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's dest -> its long flag, over every command (`max_slots` -> `--max-slots`)."""
    flags: dict[str, str] = {}
    parsers = [parser]
    while parsers:
        for action in parsers.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
            for option in action.option_strings:
                if option.startswith("--") and action.dest != "help":
                    flags.setdefault(action.dest, option)
                    break
    return flags


def command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]
    raise AssertionError("no subcommands")


def in_flag_words(message: str, flags: dict[str, str]) -> str:
    """Library errors name config fields (`max_slots=0 must be >= 1`); at the CLI they name the flag."""
    return re.sub(r"(?<![\w.-])([a-z][a-z0-9_]*)=", lambda m: f"{flags.get(m.group(1), m.group(1))}=", message)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        with interrupts_end_the_command():
            try:
                return int(args.func(args) or 0)
            except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (cli/interrupts.py); both ignored from here on
                code, line = interrupted_exit(e, getattr(args, "resumes", False))
                print(f"\n{line}", file=sys.stderr)
                return code
    except InferlabError as e:
        print(f"error: {in_flag_words(str(e), flag_names(command_parser(parser, args.command)))}", file=sys.stderr)
        return 2
    except OSError as e:
        if not is_write_failure(e):
            raise
        # a write the library did not name itself (the writers raise OutputError): one line all the same
        print(f"error: {write_failed(e.filename or 'a file', e)}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        package = OPTIONAL_PACKAGES.get((e.name or "").split(".")[0])
        if package is None:
            raise
        print(f"error: `inferlab {args.command}` needs the {package} package, which is not installed here: "
              f"pip install {package}", file=sys.stderr)
        return 2


def console_main() -> None:
    """The `inferlab` command (and `python -m inferlab.cli`): main(), then exit with its code. Once the
    command has returned, Ctrl-C and SIGTERM are ignored: the work is done, and a late signal must not
    turn the interpreter's shutdown into a traceback. A reader that closed stdout early (`| head`) ends the
    command quietly with the shell's SIGPIPE status, as other command-line tools end.
    The process then ends without finalizing the interpreter: every command has closed its files and pools
    by its return, and finalizing one that imported torch (CUDA's context, thousands of modules) takes time
    that nothing needs (docs/decisions.md, "A command ends at once")."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's last flush fails no more
        code = 128 + signal.SIGPIPE
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    logging.shutdown()  # its handlers flushed
    end_now(code)
