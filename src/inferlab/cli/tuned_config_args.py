"""`--config TUNED.json` on the commands `inferlab tune` tunes (generate, classify, conformers generate):
the file's recommended values fill the flags the user did not give; a flag given on the command line
wins, even one equal to its default.

How: `add_config_arg` (called after the command's own flags exist) swaps the argparse default of each
tunable flag for the UNSET marker and remembers the real default; `apply_tuned_config`, the first call of
the handler, replaces every UNSET by the file's value, else the real default. The file itself (format,
checks) is inferlab.workloads.tune.tuned_file."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from inferlab.errors import ConfigError

log = logging.getLogger(__name__)


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


def add_config_arg(p: argparse.ArgumentParser, workload: str) -> None:
    from inferlab.workloads.tune.tuned_file import TUNABLE

    tunable: dict[str, tuple[Any, Any]] = {}  # dest -> (real default, choices)
    for action in p._actions:
        if action.dest in TUNABLE[workload]:
            tunable[action.dest] = (action.default, action.choices)
            action.default = UNSET
    missing = set(TUNABLE[workload]) - set(tunable)
    if missing:  # a programming error: the command lacks a flag its tune file may set
        raise RuntimeError(f"{p.prog}: no flag for {sorted(missing)}; add the command's flags before --config")
    p.add_argument("--config", default=None, metavar="TUNED.json",
                   help=f"settings measured by `inferlab tune --workload {workload}` ({', '.join(sorted(tunable))}); "
                        "flags given here win")
    p.set_defaults(tuned_workload=workload, tunable_defaults=tunable)


def apply_tuned_config(args: argparse.Namespace) -> dict[str, Any]:
    """Fill the tunable flags of `args` in place; returns the values taken from --config."""
    from inferlab.workloads.tune.tuned_file import read_tuned_config

    recommended = {}
    if args.config is not None:
        tuned = read_tuned_config(args.config, args.tuned_workload)
        recommended = tuned.recommended
        model = getattr(args, "model", None)
        if model is not None and tuned.model != _resolved(model):
            log.warning("%s was tuned on %s, not %s: its settings may not be the best here", args.config,
                        tuned.model, model)
    applied = {}
    for dest, (default, choices) in args.tunable_defaults.items():
        if getattr(args, dest) is not UNSET:
            continue  # given on the command line
        if dest in recommended:
            value = recommended[dest]
            if choices is not None and value not in choices:
                raise ConfigError(f"--config {args.config}: {dest}={value!r} is not one of {list(choices)}")
            applied[dest] = value
            setattr(args, dest, value)
        else:
            setattr(args, dest, default)
    if applied:
        log.info("from %s: %s", args.config, ", ".join(f"{k}={v}" for k, v in applied.items()))
    return applied


def _resolved(path: str) -> str:
    from pathlib import Path

    return str(Path(path).resolve())
