"""`inferlab demo`: 3D conformers of a few molecules the reference conformer model never trained on, through the
engine with the conformer constraint on; prints validity, stereo agreement, coverage and matching against
ETKDG, the constraint pressure and the speed, and writes a picture. Runs on a CPU in under a minute, and on
the GPU when there is one (workloads/conformers/demo/)."""

from __future__ import annotations

import argparse
import time

from inferlab.cli.device_arg import add_device_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="conformers of a few held-out molecules with the reference model: quality against ETKDG",
        description="3D conformers of small molecules that the trained reference conformer model shipped with "
        "inferlab never saw in training (held out by scaffold), from RDKit's NCI set and ChEMBL, "
        "through the engine with the conformer constraint on. Prints validity, stereo agreement, coverage "
        "(COV-R, COV-P) and matching (AMR-R, AMR-P) at 0.75 and 1.25 A against ETKDG references of the same "
        "molecules, the constraint pressure and the speed, and writes a PNG: a molecule in 2D beside a generated "
        "conformer on its nearest ETKDG reference. Under a minute on a 2-core CPU, start-up included (the "
        "progress bar shows the token rate from the first decode steps; the closing lines say how long it "
        "took), seconds on a GPU, which it uses when there is one. Nothing is downloaded. Without the reference "
        "model (a wheel built without its package data) it says so and runs a tiny random-weight model.",
    )
    p.add_argument("--work-dir", default=None, help="where the outputs (and a fallback checkpoint) go "
                   "(default ~/.cache/inferlab/demo)")
    p.add_argument("--num-molecules", type=int, default=6, help="held-out molecules taken, in turn from NCI and the "
                   "two ChEMBL lists, those with specified stereo first (default 6)")
    p.add_argument("--num-conformers", type=int, default=4, metavar="K",
                   help="conformers per molecule (default 4); ETKDG gives half as many references")
    p.add_argument("--min-atoms", type=int, default=8, help="smallest molecules taken (heavy atoms, default 8)")
    p.add_argument("--max-atoms", type=int, default=20, help="largest molecules taken (heavy atoms, default 20)")
    add_device_arg(p)
    p.add_argument("--sampling", default="top-p", choices=["greedy", "top-p"],
                   help="top-p: sample (each conformer its own seed); greedy: the most likely token each step")
    p.add_argument("--temperature", type=float, default=1.0, help="top-p sampling's temperature (default 1.0)")
    p.add_argument("--seed", type=int, default=0, help="the seed each conformer's own seed derives from")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from tqdm.contrib.logging import logging_redirect_tqdm

    from inferlab.cli.paths import output_folder
    from inferlab.cli.token_rate_bar import TokenRateBar
    from inferlab.workloads.conformers.demo.run import (
        DemoConfig,
        compare_with_etkdg,
        default_work_dir,
        generate_demo,
        prepare_demo,
    )
    from inferlab.workloads.conformers.pipeline.config import ConformerSampling

    started = time.perf_counter()
    config = DemoConfig(
        work_dir=output_folder("--work-dir", args.work_dir) if args.work_dir else default_work_dir(),
        num_molecules=args.num_molecules,
        num_conformers=args.num_conformers,
        min_atoms=args.min_atoms,
        max_atoms=args.max_atoms,
        device=args.device,
        sampling=ConformerSampling(args.sampling, args.temperature),
        seed=args.seed,
    )
    setup = prepare_demo(config)
    _print_setup(setup)
    progress = TokenRateBar("conf", validity=True, desc="conformers")
    try:
        with logging_redirect_tqdm():
            summary = generate_demo(setup, progress.start, progress.row, progress.phase, progress.engine_tokens)
    finally:
        progress.close()
    compared = time.perf_counter()
    comparison = compare_with_etkdg(setup)
    compare_s = time.perf_counter() - compared
    _print_results(setup, summary, comparison)
    print(f"time: {time.perf_counter() - started:.1f} s in all: conformers {summary.wall_s:.1f} s (engine start "
          f"{summary.engine_start_s:.1f} s, generation {summary.generate_s:.1f} s), ETKDG references, evaluation and "
          f"picture {compare_s:.1f} s")
    generated = summary.conformers_generated
    return 0 if generated and summary.conformers_rejected == 0 else 1


def _print_setup(setup) -> None:
    model = setup.model
    if model.trained:
        print(f"model: {model.path} (the trained reference conformer model, {model.tokenizer} tokenizer; its "
              "README.md: data, training, quality)")
    else:
        made = "built" if model.built else "reused"
        print(f"reference model not found: {model.missing}")
        print(f"model: {model.path} ({made}; random weights, {model.tokenizer} tokenizer): its conformers are valid "
              "by construction, their geometry is noise")
    molecules = setup.molecules.molecules
    stereo = sum(m.stereo > 0 for m in molecules)
    print(f"molecules ({len(molecules)}, {setup.molecules.origin}; {stereo} specify stereo): "
          + ", ".join(f"{m.id} {m.smiles}" for m in molecules))


def _print_results(setup, s, comparison) -> None:
    from inferlab.cli.conformers_generate import print_pressure
    from inferlab.workloads.conformers.evaluation.evaluate import threshold_key

    generated = s.conformers_generated
    print(f"valid: {generated - s.conformers_rejected} of {generated} conformers passed the strict decoder "
          "(every block well formed, every atom and bond the input's): 100% by construction")
    print(f"graph: {s.graph_matches} of {generated} decode with RDKit, independently of the template, to the input's "
          "molecular graph (stereo included) with exactly one coordinate block per atom")
    if s.stereo_checked:
        own = (s.stereo_matches - s.stereo_mirrored) / s.stereo_checked
        print(f"stereo: {s.stereo_matches} of {s.stereo_checked} conformers of molecules with specified stereo have "
              f"it in their coordinates ({100 * s.stereo_agreement:.0f}%: {s.stereo_mirrored} written as the mirror "
              f"image of a conformer generated with the other hand; as generated {100 * own:.0f}%, no retries)")
    quality = comparison.quality
    report = quality.report.summary()
    cells = []
    for name, short in (("coverage_recall", "COV-R"), ("coverage_precision", "COV-P")):
        cells.append(f"{short} " + " / ".join(_percent(report[name][threshold_key(t)]["mean"])
                                               for t in quality.report.thresholds))
    cells += [f"AMR-R {_angstrom(report['matching_recall']['mean'])}",
              f"AMR-P {_angstrom(report['matching_precision']['mean'])}"]
    thresholds = " / ".join(f"{t:g}" for t in quality.report.thresholds)
    references = f"{quality.num_references} reference{'s' if quality.num_references != 1 else ''}"
    print(f"against ETKDG ({references} per molecule, seed {quality.seed}; "
          f"{setup.config.num_conformers} generated; means over {report['molecules_evaluated']} molecules, "
          f"coverage at {thresholds} A): " + ", ".join(cells))
    print_pressure(s.as_dict()["constraint_pressure"])
    print(f"speed: {s.output_tokens:,} tokens in {s.generate_s:.1f} s of generation on {_device(s.device)} = "
          f"{s.output_tokens / max(s.generate_s, 1e-9):,.0f} tokens/s, "
          f"{generated / max(s.generate_s, 1e-9):.2f} conformers/s")
    if comparison.picture is not None:
        print(f"picture: {comparison.picture} ({comparison.featured} in 2D beside a generated conformer on its "
              f"nearest ETKDG reference, RMSD {comparison.nearest.rmsd:.2f} A)")
    print(f"files: {setup.output} (conformers), {setup.rows} (one row per conformer), {quality.references} (ETKDG), "
          f"{setup.input} (molecules)")
    print(f"the same by hand: inferlab conformers reference --input {setup.input} --num-conformers "
          f"{quality.num_references} --seed {quality.seed} --output {quality.references} && inferlab conformers "
          f"evaluate --generated {setup.output} --reference {quality.references}")
    print("your own model: inferlab conformers generate --model DIR --input mols.smi --num-conformers K "
          "--output out.sdf")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _angstrom(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} A"


def _device(device: str | None) -> str:
    if device and device.startswith("cuda"):
        import torch

        return f"{device} ({torch.cuda.get_device_name(device)})"
    return device or "-"
