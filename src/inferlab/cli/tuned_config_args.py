"""`--config TUNED.json` on the commands `inferlab tune` tunes (generate, classify, conformers generate):
the file's recommended values fill the flags the user did not give; a flag given on the command line
wins, even one equal to its default.

How: each flag a tune file may set is added with `add_tunable` (its argparse default stays the real one, so
`--help` shows it): its action records that the flag was given. `add_config_arg` (called after the command's
own flags exist) checks the command has every flag its workload's file may set; `apply_tuned_config`, the
first call of the handler, sets each tunable flag not given to the file's value. The file itself (format,
checks) is inferlab.workloads.tune.tuned_file."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from inferlab.errors import ConfigError

log = logging.getLogger(__name__)

GIVEN = "tunable_given"  # namespace attribute: the tunable dests given on the command line
CHOICES = "tunable_choices"  # parser default: tunable dest -> its choices (None: any value of its type)


class _TunableStore(argparse.Action):
    """argparse's store, and a note in the namespace that the flag was given."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, GIVEN, getattr(namespace, GIVEN, frozenset()) | {self.dest})


def add_tunable(container: argparse._ActionsContainer, *flags: str, **kwargs: Any) -> argparse.Action:
    """`container.add_argument(*flags, **kwargs)` for a flag a tune file may set."""
    action = container.add_argument(*flags, action=_TunableStore, **kwargs)
    known = container.get_default(CHOICES) or {}
    container.set_defaults(**{CHOICES: {**known, action.dest: action.choices}})
    return action


def add_config_arg(p: argparse.ArgumentParser, workload: str) -> None:
    from inferlab.workloads.tune.tuned_file import TUNABLE

    missing = set(TUNABLE[workload]) - set(p.get_default(CHOICES) or {})
    if missing:  # a programming error: the command lacks a flag its tune file may set
        raise RuntimeError(f"{p.prog}: no tunable flag for {sorted(missing)}; add them with add_tunable before "
                           "--config")
    p.add_argument("--config", default=None, metavar="TUNED.json",
                   help=f"settings measured by `inferlab tune --workload {workload}` "
                        f"({', '.join(sorted(TUNABLE[workload]))}); flags given here win")
    p.set_defaults(tuned_workload=workload)


def apply_tuned_config(args: argparse.Namespace) -> dict[str, Any]:
    """Fill the tunable flags of `args` not given on the command line with --config's values, in place;
    returns the values taken from it."""
    from inferlab.workloads.tune.tuned_file import TUNABLE, model_mismatch, read_tuned_config

    if args.config is None:
        return {}
    tuned = read_tuned_config(args.config, args.tuned_workload)
    model = getattr(args, "model", None)
    mismatch = model_mismatch(tuned, model) if model is not None else None
    if mismatch is not None:
        log.warning("%s was tuned on %s, not on %s (%s): its settings may not be the best here", args.config,
                    tuned.model, model, mismatch)
    given, choices = getattr(args, GIVEN, frozenset()), getattr(args, CHOICES)
    applied = {}
    for dest in TUNABLE[args.tuned_workload]:
        if dest in given or dest not in tuned.recommended:
            continue
        value = tuned.recommended[dest]
        if choices[dest] is not None and value not in choices[dest]:
            raise ConfigError(f"--config {args.config}: {dest}={value!r} is not one of {list(choices[dest])}")
        applied[dest] = value
        setattr(args, dest, value)
    if applied:
        log.info("from %s: %s", args.config, ", ".join(f"{k}={v}" for k, v in applied.items()))
    return applied

