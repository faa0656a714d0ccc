"""The flags every writing command shares for its files' safety: `--overwrite` (replace outputs another
job wrote instead of refusing them), `--max-line-chars` and, for molecule inputs, `--max-atoms` (the
bounds an input line is held to before it is parsed), and `guarded`, which builds the output guard
(inferlab.outputs.guard) a command runs under. The guard's checks are the library's; here they get
their flag names."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from inferlab.cli.arg_types import positive_int


def add_overwrite_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overwrite", action="store_true",
                   help="replace outputs that another job wrote (other settings or input, or no manifest saying "
                        "who wrote them) instead of refusing them; without it a rerun of the same job resumes")


def add_input_bound_args(p: argparse.ArgumentParser, molecules: bool = False) -> None:
    from inferlab.inputs.lines import DEFAULT_MAX_LINE_CHARS

    p.add_argument("--max-line-chars", type=positive_int, default=DEFAULT_MAX_LINE_CHARS, metavar="N",
                   help="an input line longer than this is an error row, never read whole")
    if molecules:
        from inferlab.workloads.conformers.chemistry.input_bounds import DEFAULT_MAX_ATOMS

        p.add_argument("--max-atoms", type=positive_int, default=DEFAULT_MAX_ATOMS, metavar="N",
                       help="a SMILES with more atoms is an error row, refused before RDKit parses it")


def molecule_bounds(args: argparse.Namespace):
    from inferlab.workloads.conformers.chemistry.input_bounds import InputBounds

    return InputBounds(args.max_line_chars, args.max_atoms)


def guarded(args: argparse.Namespace, command: str, settings: dict[str, Any], inputs: dict[str, Any],
            outputs: list[tuple[str, Any, bool]]):
    """The output guard of one run: `outputs` as (flag, path, resumable), the job's own first; None paths
    are left out. The --model folder counts as an input (its files are never written) and its identity goes
    into the manifest; a scaled run's work folder is one of the outputs (`--overwrite` starts it over too),
    and its flags are checked before the guard deletes anything. Enter it after the command's checks, just
    before the work."""
    from inferlab.cli.scale_args import scale_config_from, wants_scale_out
    from inferlab.models.checkpoint_identity import checkpoint_identity
    from inferlab.outputs.guard import GuardedOutput, OutputGuard

    outputs = list(outputs)
    if wants_scale_out(args):
        work_dir = scale_config_from(args).work_dir_for(args.output)  # ConfigError for a bad scale flag, now
        outputs.append(("--work-dir" if args.work_dir else "the scaled run's work folder", work_dir, True))
    model = getattr(args, "model", None)
    return OutputGuard(command, settings, {**inputs, "--model": model},
                       [GuardedOutput(flag, Path(path), resumable) for flag, path, resumable in outputs
                        if path is not None],
                       overwrite=args.overwrite, checkpoint=checkpoint_identity(model) if model else None)
