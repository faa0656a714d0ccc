"""`inferlab conformers generate|evaluate|reference`: generate conformers with the engine (flags and handler in
conformers_generate.py; `inferlab conformers --model ...` is the same command), score generated conformers,
make ETKDG reference sets.
"""

from __future__ import annotations

import argparse

MAX_LISTED = 10  # problems listed one by one before "... and N more"


def register(sub: argparse._SubParsersAction) -> None:
    from inferlab.cli.conformers_generate import GENERATE_DESCRIPTION, GENERATE_HELP, add_generation_args, run_generate
    from inferlab.cli.output_guard_args import add_input_bound_args

    conformers = sub.add_parser(
        "conformers",
        help="3D conformers as enriched SMILES: generate, evaluate, reference sets",
        description="inferlab conformers generate|evaluate|reference ...; without an action, the generation "
        "flags below run `generate`",
    )
    add_generation_args(conformers, required=False)  # `inferlab conformers --model M --input ...` generates
    conformers.set_defaults(func=run_generate, resumes=True)
    csub = conformers.add_subparsers(dest="conformers_command", required=False, metavar="ACTION")

    gen = csub.add_parser("generate", help=GENERATE_HELP, description=GENERATE_DESCRIPTION)
    add_generation_args(gen, required=True)
    gen.set_defaults(func=run_generate, resumes=True)

    ev = csub.add_parser(
        "evaluate",
        help="RMSD coverage and matching of generated conformers against references (per molecule, parallel)",
    )
    ev.add_argument("--generated", required=True, help="SDF of generated conformers")
    ev.add_argument("--reference", required=True, help="SDF of reference conformers")
    ev.add_argument("--threshold", action="append", type=_thresholds, default=None, metavar="A[,A...]",
                    help="coverage thresholds in Angstrom, repeatable or comma-separated (default: 0.75 and 1.25); "
                         "coverage counts RMSD strictly below each")
    ev.add_argument("--skip-missing", action="store_true",
                    help="leave out reference molecules that have no generated conformer (3DMolGen's way) instead "
                         "of scoring them 0 coverage (torsional-diffusion's way, the default: a miss is a miss)")
    ev.add_argument("--workers", type=int, default=0, help="processes (default 0: one per CPU core)")
    ev.add_argument("--output", default=None, help="write the full report as JSON here")
    ev.add_argument("--matrices", action="store_true", help="include each molecule's RMSD matrix in the JSON")
    ev.set_defaults(func=_evaluate, resumes=False)

    ref = csub.add_parser("reference", help="write K RDKit ETKDG conformers per molecule of a .smi/.csv to an SDF")
    ref.add_argument("--input", required=True, help=".smi (SMILES [id]) or .csv/.tsv with a SMILES column")
    ref.add_argument("--num-conformers", type=int, default=5, metavar="K", help="conformers per molecule (default 5)")
    ref.add_argument("--output", required=True, help="SDF to write (replaced if it exists)")
    ref.add_argument("--seed", type=int, default=0)
    ref.add_argument("--optimize", action="store_true", help="MMFF-optimise the conformers")
    ref.add_argument("--smiles-column", default=None, help="CSV column holding SMILES (default: detected)")
    ref.add_argument("--id-column", default=None, help="CSV column holding ids (default: detected)")
    add_input_bound_args(ref, molecules=True)
    ref.set_defaults(func=_reference, resumes=False)


def _evaluate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from inferlab.cli.paths import input_file, output_file
    from inferlab.workloads.conformers.evaluation.evaluate import EvaluationConfig, evaluate_files, summary_table
    from inferlab.workloads.conformers.evaluation.metrics import DEFAULT_THRESHOLDS

    input_file("--generated", args.generated, (".sdf",), "an SDF of generated conformers")
    input_file("--reference", args.reference, (".sdf",), "an SDF of reference conformers (conformers reference)")
    if args.output:
        output_file("--output", args.output, (".json",), "the report as JSON",
                    {"--generated": args.generated, "--reference": args.reference})
    thresholds = tuple(t for group in args.threshold for t in group) if args.threshold else DEFAULT_THRESHOLDS
    config = EvaluationConfig(thresholds=thresholds, workers=args.workers, count_missing=not args.skip_missing)
    with tqdm(desc="molecules", unit="mol", dynamic_ncols=True) as bar:

        def show(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        report = evaluate_files(args.generated, args.reference, config, progress=show, keep_matrices=args.matrices)
    print(summary_table(report))
    _list_problems("only in the generated file", report.only_in_generated)
    scored = "scored 0 coverage" if config.count_missing else "left out (--skip-missing)"
    _list_problems(f"only in the reference file, no generated conformer ({scored})", report.only_in_reference)
    _list_problems("unreadable records", report.unreadable_records)
    _list_problems("failed alignments", [f"{m.smiles}: {e}" for m in report.molecules for e in m.errors])
    if args.output:
        from inferlab.outputs.atomic import write_json_atomic

        print(f"wrote {write_json_atomic(args.output, report.to_json(include_matrices=args.matrices))}")
    return 0


def _thresholds(text: str) -> tuple[float, ...]:
    """`0.75` or `0.75,1.25` -> Angstrom values > 0 (argparse reports a bad one with the flag's name)."""
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or a comma-separated list, e.g. 0.75,1.25") from None
    if not values or not all(v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: thresholds are Angstrom values > 0, e.g. 0.75,1.25")
    return values


def _reference(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from inferlab.cli.output_guard_args import molecule_bounds
    from inferlab.cli.paths import input_file, output_file
    from inferlab.workloads.conformers.chemistry.inputs import read_molecule_inputs
    from inferlab.workloads.conformers.evaluation.reference import ReferenceConfig, write_reference_sdf

    input_file("--input", args.input, None, "a molecule file (.smi, .csv or .tsv)")
    output_file("--output", args.output, (".sdf",), "an SDF of conformers", {"--input": args.input})
    config = ReferenceConfig(num_confs=args.num_conformers, seed=args.seed, optimize=args.optimize)
    inputs = read_molecule_inputs(args.input, args.smiles_column, args.id_column, molecule_bounds(args))
    print(f"reading {inputs.description}: {len(inputs.records)} records, {len(inputs.errors)} unusable")
    with tqdm(total=len(inputs.records), desc="embedding", unit="mol", dynamic_ncols=True) as bar:
        summary = write_reference_sdf(inputs, args.output, config, progress=bar.update)
    print(f"wrote {summary.conformers_written} conformers of {summary.molecules_written} molecules to {args.output}")
    _list_problems("molecules skipped", [f"{i}: {reason}" for i, reason in summary.errors])
    return 0


def _list_problems(title: str, items: list[str]) -> None:
    if not items:
        return
    print(f"{title}: {len(items)}")
    for item in items[:MAX_LISTED]:
        print(f"  {item}")
    if len(items) > MAX_LISTED:
        print(f"  ... and {len(items) - MAX_LISTED} more")
