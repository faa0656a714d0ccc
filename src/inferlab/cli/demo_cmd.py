"""`inferlab demo`: 3D conformers of a few real molecules with a tiny random checkpoint, constrained so
that every output is a valid conformer of its molecule; prints validity, speed and where the files are.
Runs on a CPU in under a minute (49.5 s on 2 busy cores: benchmarks/checks/2026-12-01-cpu-speed), and on the GPU
when there is one (workloads/conformers/pipeline/demo.py)."""

from __future__ import annotations

import argparse

from inferlab.cli.device_arg import add_device_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="conformers of a few molecules with a tiny random model: validity and speed",
        description="3D conformers of small molecules from RDKit's NCI set with a tiny random-weight Qwen3-shaped "
        "model, through the engine with the conformer constraint on: every output is a valid conformer of its "
        "molecule although the weights are random. Prints validity, speed and where the SDF and JSONL are. "
        "Under a minute on a 2-core CPU (the progress bar shows the token rate from the first decode steps; the "
        "closing lines say how long it took), seconds on a GPU, which it uses when there is one. Nothing is "
        "downloaded.",
    )
    p.add_argument("--work-dir", default=None, help="where the checkpoint and outputs go (default ~/.cache/inferlab/demo)")
    p.add_argument("--num-molecules", type=int, default=8, help="molecules taken from RDKit's NCI set (default 8)")
    p.add_argument("--num-conformers", type=int, default=2, metavar="K", help="conformers per molecule (default 2)")
    p.add_argument("--max-atoms", type=int, default=10, help="largest molecules taken (heavy atoms, default 10)")
    add_device_arg(p)
    p.add_argument("--sampling", default="top-p", choices=["greedy", "top-p"],
                   help="top-p: sample (each conformer its own seed); greedy: the most likely token each step")
    p.add_argument("--temperature", type=float, default=1.0, help="top-p sampling's temperature (default 1.0)")
    p.add_argument("--seed", type=int, default=0, help="the seed each conformer's own seed derives from")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm.contrib.logging import logging_redirect_tqdm

    from inferlab.cli.paths import output_folder
    from inferlab.cli.token_rate_bar import TokenRateBar
    from inferlab.workloads.conformers.pipeline.config import ConformerSampling
    from inferlab.workloads.conformers.pipeline.demo import DemoConfig, default_work_dir, run_demo

    config = DemoConfig(
        work_dir=output_folder("--work-dir", args.work_dir) if args.work_dir else default_work_dir(),
        num_molecules=args.num_molecules,
        num_conformers=args.num_conformers,
        max_atoms=args.max_atoms,
        device=args.device,
        sampling=ConformerSampling(args.sampling, args.temperature),
        seed=args.seed,
    )
    progress = TokenRateBar("conf", validity=True, desc="conformers")

    def on_ready(run) -> None:
        made = "built" if run.checkpoint_built else "reused"
        print(f"model: {run.checkpoint} ({made}; random weights, {run.tokenizer} tokenizer)")
        print(f"molecules ({len(run.molecules)} from RDKit's NCI set): "
              + ", ".join(smiles for _, smiles in run.molecules))

    try:
        with logging_redirect_tqdm():
            run = run_demo(config, on_ready, progress.start, progress.row, progress.phase, progress.engine_tokens)
    finally:
        progress.close()
    s = run.summary
    generated = s.conformers_generated
    print(f"valid: {generated - s.conformers_rejected} of {generated} conformers passed the strict decoder "
          "(every block well formed, every atom and bond the input's): 100% by construction, the weights are random")
    print(f"graph: {s.graph_matches} of {generated} decode with RDKit, independently of the template, to the input's "
          "molecular graph (stereo included) with exactly one coordinate block per atom")
    print(f"speed: {s.output_tokens:,} tokens in {s.generate_s:.1f} s of generation on {_device(s.device)} = "
          f"{s.output_tokens / max(s.generate_s, 1e-9):,.0f} tokens/s, "
          f"{generated / max(s.generate_s, 1e-9):.2f} conformers/s "
          f"(whole run {s.wall_s:.1f} s incl. engine start {s.engine_start_s:.1f} s)")
    print(f"files: {run.output} (conformers), {run.rows} (one row per conformer), {run.input} (molecules)")
    reference = Path(run.output).with_name("reference.sdf")
    print(f"next: RMSD coverage against RDKit's ETKDG conformers: inferlab conformers reference --input {run.input} "
          f"--output {reference} && inferlab conformers evaluate --generated {run.output} --reference {reference}")
    print("your own model: inferlab conformers generate --model DIR --input mols.smi --num-conformers K "
          "--output out.sdf")
    return 0 if generated and s.conformers_rejected == 0 else 1


def _device(device: str | None) -> str:
    if device and device.startswith("cuda"):
        import torch

        return f"{device} ({torch.cuda.get_device_name(device)})"
    return device or "-"
