"""The lab's device run: the seed presets and the workload presets as parts, then reports, into --out.

    python scripts/gpu/lab_sweep.py --out $OUT --parts attention generate            # chunks of < 9 minutes
    python scripts/gpu/lab_sweep.py --out $OUT --parts static-cache
    python scripts/gpu/lab_sweep.py --out $OUT --parts classify hidden                # transformers + the engine
    python scripts/gpu/lab_sweep.py --out $OUT --parts classify-vllm hidden-vllm      # vLLM's rows (carry .dev2)
    python scripts/gpu/lab_sweep.py --out $OUT --parts classify-matrix
    python scripts/gpu/lab_sweep.py --out $OUT --parts conformer-baseline
    python scripts/gpu/lab_sweep.py --out $OUT --parts steering                      # ~6.5 min, gemma-2b
    python scripts/gpu/lab_sweep.py --out $OUT --parts conformer-pipeline --only scenario=conformer-pipeline
    python scripts/gpu/lab_sweep.py --out $OUT --parts conformer-soak --only temperature=1.0
    python scripts/gpu/lab_sweep.py --out $OUT --parts peers-hf peers-engine-conformers   # engine-vs-peers, no vLLM
    python scripts/gpu/lab_sweep.py --out $OUT --parts peers-xgrammar peers-vllm          # after .dev2 (and .dev3)
    python scripts/gpu/lab_sweep.py --out $OUT --parts engine-speed                    # ~4.5 min
    python scripts/gpu/lab_sweep.py --out $OUT --parts engine-kernels                  # plan benchmarks/plans/
    python scripts/gpu/lab_sweep.py --out $OUT --parts scale-out                       # two GPUs (nvidia-h100-x2)
    python scripts/gpu/lab_sweep.py --out $OUT --parts tune-conformers                 # ~15 min: resumes per call
    python scripts/gpu/lab_sweep.py --out $OUT --parts conformer-quality               # ~8 min: the reference model
    python scripts/gpu/lab_sweep.py --out $OUT --parts reference-recipe                # the recipe again: two calls
    python scripts/gpu/lab_sweep.py --estimate                                       # minutes per part, runs nothing
    python scripts/gpu/lab_sweep.py --out /tmp/x --cpu-smoke                         # every part on CPU, tiny shapes

Parts -> presets: attention = seed-attention, generate = seed-generate, static-cache = seed-static-cache,
classify = seed-classify (its transformers and engine cells; classify-vllm: its vLLM cell), classify-matrix =
seed-classify-matrix, hidden = seed-hidden-states (hidden-vllm: its vLLM cell), conformer-baseline =
conformer-baseline, and each of engine-vs-hf, engine-speed, conformer-engine, conformer-pipeline, conformer-soak,
steering, decode-roofline, scale-out, conformer-quality = the preset of that name (scale-out is not started on a machine with fewer
than two GPUs); engine-kernels = the plan benchmarks/plans/engine-kernels.toml (the kernel micro-benchmarks, a lab
plugin); engine-vs-peers in four parts of one run (peers-hf: the engine's generate cells and transformers'
continuous batching; peers-engine-conformers: the engine's conformer cells; peers-xgrammar: HF + xgrammar;
peers-vllm: vLLM's cells, after a FlashInfer JIT warm-up where FlashInfer is installed); tune-conformers =
`inferlab tune --workload conformers` on qwen3-0.6b and drug-sized molecules (run_tune; --tune-molecules);
reference-recipe = the reference model's recipe run again and compared with the committed checkpoint, then its
constrained bf16 quality cells when the weights differ (run_reference_recipe).
`--only KNOB=V` is passed to every part (a preset split into calls of < 9 minutes).
Installs nothing and imports inferlab as installed (`pip install -e .`; here: PYTHONPATH=src). On the
device each call is `bash scripts/gpu/device_call.sh 'python scripts/gpu/lab_sweep.py
... --budget-s $BUDGET_S'`, whose device_env.sh installs the checkout with --no-deps and unpacks rdkit, the
qwen3-chem tokenizer, vLLM and FlashInfer from the carried .dev1/.dev2/.dev3 (benchmarks/README.md,
"Procedure: a device session"); a part that needs vLLM (or xgrammar) is not started without it. Runs live in runs/lab/
in the checkout (ignored by git, kept between calls on a warm machine): a call that hits its budget
records the rest as `skipped`, and the next call resumes exactly there. seed-generate and
seed-static-cache share one run directory, so their two common cells run once; preset checkpoints are
built once into runs/lab/cache/models for every part (llama-380m serves generate, static-cache and hidden).

Time (one H100/H200, the lab's estimates; `--estimate` prints them): attention ~2.4 min, generate
~5.6, static-cache ~6.4 beyond generate's cells, classify ~4.3 (+1.7 for classify-vllm), hidden ~1.3,
conformer-baseline ~3 (~24 min in all; ~25 min for the first three alone before this round's cuts), plus building the
preset checkpoints once (llama-380m, qwen2-cls, qwen3-0.6b: a few seconds each). A hung cell costs its
timeout (120-300 s) at most. int8/fp8 classify cells need torchao importable (docs/workloads.md: carry
the wheel) and flash-attn cells the flash-attn package; without them those cells are `unavailable` rows
at no cost, which the first lines printed say.

Writes under --out: benchmarks/results/<date>-<gpu>-<what>.jsonl (the rows, for the lead to commit),
benchmarks/reports/<date>-<gpu>-<what>/ (report.md + plots), lab_summary.txt. Each part runs in
try/except, so one failure does not hide the others. The summary printed last: cells by status, the
"Do the seeds' findings hold?" tables and the recommendations.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

from inferlab.cli import main as inferlab

REPO = Path(__file__).resolve().parents[2]
# part -> (preset, or a plan file under the checkout, run directory name)
PARTS = {
    "attention": ("seed-attention", "seed-attention"),
    "generate": ("seed-generate", "seed-generate"),
    "static-cache": ("seed-static-cache", "seed-generate"),
    "classify": ("seed-classify", "seed-classify"),
    "classify-vllm": ("seed-classify", "seed-classify"),
    "classify-matrix": ("seed-classify-matrix", "seed-classify-matrix"),
    "hidden": ("seed-hidden-states", "seed-hidden-states"),
    "hidden-vllm": ("seed-hidden-states", "seed-hidden-states"),
    "conformer-baseline": ("conformer-baseline", "conformer-baseline"),
    "engine-vs-hf": ("engine-vs-hf", "engine-vs-hf"),
    "engine-speed": ("engine-speed", "engine-speed"),
    "engine-kernels": ("benchmarks/plans/engine-kernels.toml", "engine-kernels"),
    "conformer-engine": ("conformer-engine", "conformer-baseline"),  # beside the baseline: one report
    # engine-vs-peers, one run in parts sized to device calls (scripts/gpu/device_call.sh each; benchmarks/README.md,
    # "Procedure: a device session"): what needs neither vLLM nor xgrammar (carry .dev1), HF + xgrammar once .dev2
    # installed the bundle's wheels, vLLM's cells once .dev3 brought FlashInfer
    "peers-hf": ("engine-vs-peers", "engine-vs-peers"),
    "peers-engine-conformers": ("engine-vs-peers", "engine-vs-peers"),
    "peers-xgrammar": ("engine-vs-peers", "engine-vs-peers"),
    "peers-vllm": ("engine-vs-peers", "engine-vs-peers"),
    "steering": ("steering", "steering"),
    "conformer-pipeline": ("conformer-pipeline", "conformer-pipeline"),
    "conformer-soak": ("conformer-soak", "conformer-soak"),
    "scale-out": ("scale-out", "scale-out"),
    "decode-roofline": ("decode-roofline", "decode-roofline"),
    "conformer-quality": ("conformer-quality", "conformer-quality"),
}
# Parts whose cells need a peer package: without it importable they would be recorded as `unavailable` rows,
# which a later call does not rerun, so they are not started (not under --cpu-smoke, which checks the rest).
NEEDS = {"peers-vllm": "vllm", "peers-xgrammar": "xgrammar", "classify-vllm": "vllm", "hidden-vllm": "vllm"}
NEEDS_TWO_GPUS = ("scale-out",)  # its --gpus 2 cell cannot run on one GPU
# Cells of a part that shares its preset with other parts (inferlab bench --only).
PART_FILTERS = {
    "classify": ["--only", "backend=hf,inferlab"],
    "classify-vllm": ["--only", "backend=vllm"],
    "hidden": ["--only", "backend=hf,inferlab"],
    "hidden-vllm": ["--only", "backend=vllm"],
    "peers-hf": ["--only", "backend=inferlab,hf-continuous", "--only", "scenario=generate"],
    "peers-engine-conformers": ["--only", "backend=inferlab", "--only", "scenario=constrained"],
    "peers-xgrammar": ["--only", "backend=hf-xgrammar"],
    "peers-vllm": ["--only", "backend=vllm"],
}
# Part tune-conformers is no preset: `inferlab tune --workload conformers` as a user runs it (run_tune)
TUNE_PART = "tune-conformers"
# Part reference-recipe is no preset either: the recipe's two commands and the comparison (run_reference_recipe)
RECIPE_PART = "reference-recipe"
RECIPE_QUALITY_RUN = "conformer-quality-reproduction"  # the second checkpoint's quality cells
RECIPE_TRAIN_S = 300  # the training command's ~220 s on an H200 and its start, so not begun with less left
FLASHINFER_WARM_S = 600  # nvcc builds FlashInfer's sampling module once per machine (~1-2 min on 16 cores)
# The report's speedup baseline per run directory (default: the first configuration of each workload).
REPORT_BASELINES = {"seed-generate": ["--baseline", "attn_implementation=eager"]}
_ONE_THREAD = ["--set", "cpu_threads=1"]
_TINY_TEXT = ["--set", "min_tokens=8", "--set", "max_tokens=100", "--set", "dtype=float32", "--set", "min_duration_s=0.1",
              "--set", "max_duration_s=0.3", *_ONE_THREAD]
_TINY_CONFORMERS = ["--set", "num_molecules=3", "--set", "num_conformers=2", "--set", "min_heavy_atoms=6",
                    "--set", "max_heavy_atoms=12", "--set", "dtype=float32", "--set", "max_slots=4", *_ONE_THREAD]
# CPU smoke: the same presets, shrunk so the whole pipeline runs here in minutes.
SMOKE_ARGS = {
    "seed-attention": ["--set", "batch_size=2", "--set", "q_len=32", "--set", "kv_len=32", "--set", "min_duration_s=0.05",
                       "--set", "min_repeats=3", "--only", "kernel=auto,math,flash,flash_attn", *_ONE_THREAD],
    "seed-generate": ["--model", "tiny", "--set", "new_tokens=4", "--set", "compile=false", "--set", "warmup_steps=2",
                      "--set", "batch_size=2", "--set", "num_prompts=4", "--set", "prompt_tokens=8", *_ONE_THREAD],
    "seed-static-cache": ["--model", "tiny", "--set", "new_tokens=4", "--set", "compile=false", "--set", "warmup_steps=2",
                          "--set", "batch_size=2,4", "--set", "num_prompts=4", "--set", "prompt_tokens=8", *_ONE_THREAD],
    "seed-classify": ["--model", "tiny-qwen2-cls", "--set", "num_samples=16", *_TINY_TEXT],
    "seed-classify-matrix": ["--model", "tiny-qwen2-cls", "--set", "num_samples=16", *_TINY_TEXT,
                             "--only", "batch_size=1,8,32"],
    # layers=-1: the preset's 8 is past the tiny model's 2 layers, and vLLM's sweep takes the last layer only
    "seed-hidden-states": ["--model", "tiny", "--set", "num_prompts=16", "--set", "layers=-1", *_TINY_TEXT],
    "conformer-baseline": ["--model", "tiny-qwen3", "--set", "num_molecules=2", "--set", "max_requests=4",
                           "--set", "batch_size=2", "--set", "dtype=float32", "--set", "compile=false",
                           "--set", "warmup_steps=2", *_ONE_THREAD],
    "engine-vs-hf": ["--model", "tiny", "--set", "dtype=float32", "--only", "backend=inferlab", "--only", "scenario=generate",
                     "--set", "new_tokens=4", "--set", "batch_size=2", "--set", "num_prompts=2",
                     "--set", "min_duration_s=0.1", "--set", "max_duration_s=0.3", *_ONE_THREAD],
    "conformer-engine": ["--model", "tiny-qwen3", "--set", "num_molecules=2", "--set", "batch_size=4",
                         "--set", "slots=4", "--set", "dtype=float32", *_ONE_THREAD],
    # tiny-qwen3 for every model (the conformer cells need the qwen3-chem tokenizer); vLLM cells are
    # `unavailable` rows here without vLLM
    "engine-vs-peers": ["--model", "tiny-qwen3", "--set", "dtype=float32", "--set", "new_tokens=4", "--set", "batch_size=2",
                        "--set", "num_prompts=2", "--set", "prompt_tokens=8", "--set", "min_duration_s=0.1",
                        "--set", "max_duration_s=0.3", "--set", "num_molecules=2", "--set", "num_conformers=2",
                        "--set", "max_requests=4", "--set", "slots=2", "--set", "min_heavy_atoms=0",
                        "--set", "max_heavy_atoms=0", "--set", "warmup_steps=2", *_ONE_THREAD],
    # tiny-gemma: the preset's family (gemma-2b is a Gemma 1), through the engine's Gemma forward and its taps
    "steering": ["--model", "tiny-gemma", "--set", "num_prompts=8", "--set", "prompt_min_tokens=4", "--set",
                 "prompt_max_tokens=12", "--set", "new_tokens=6", "--set", "batch_size=4", "--set", "steer_layer=0",
                 "--set", "collect_layers=0:-1", "--set", "dtype=float32", "--set", "check_prompts=2",
                 "--set", "warmup_tokens=2", *_ONE_THREAD],
    # tiny-qwen3 has 512 positions: molecules of 6-12 heavy atoms fit
    "conformer-pipeline": ["--model", "tiny-qwen3", *_TINY_CONFORMERS, "--set", "batch_size=6", "--set", "slots=4"],
    "conformer-soak": ["--model", "tiny-qwen3", *_TINY_CONFORMERS],
    "scale-out": ["--model", "tiny-qwen3", *_TINY_CONFORMERS, "--set", "device=cpu"],  # CPU workers
    "engine-speed": ["--model", "tiny", "--only", "scenario=generate,batching", "--set", "dtype=float32",
                     "--set", "new_tokens=4", "--set", "batch_size=2", "--set", "num_prompts=2", "--set", "num_requests=4",
                     "--set", "min_new_tokens=2", "--set", "max_new_tokens=6", "--set", "min_duration_s=0.1",
                     "--set", "max_duration_s=0.3", *_ONE_THREAD],
    "benchmarks/plans/engine-kernels.toml": ["--only", "group=constraint-step", "--set", "tokenizer=builtin",
                                             "--set", "vocab=2048", "--set", "rows=4", "--set", "layers=2",
                                             "--set", "device=cpu", *_ONE_THREAD],
    # 2 molecules x 4 of 4-8 heavy atoms on tiny (the built-in tokenizer: a small vocabulary keeps the 11 cells
    # short on a CPU), 2 seeds; the fp8 cells are `unavailable` here
    "conformer-quality": ["--model", "tiny", "--set", "num_molecules=2", "--set", "num_references=2",
                          "--set", "subset_molecules=1", "--set", "num_seeds=2", "--set", "min_heavy_atoms=4",
                          "--set", "max_heavy_atoms=8", "--set", "dtype=float32", "--set", "slots=4",
                          "--set", "workers=1", *_ONE_THREAD],
    # the decode-profile cells on tiny (no fp8 cache on CPU); the generate sweep validates with 8 new tokens
    "decode-roofline": ["--model", "tiny", "--only", "scenario=decode-profile", "--only", "kv_dtype=auto",
                        "--set", "batch_size=4", "--set", "context_tokens=24", "--set", "dtype=float32",
                        "--set", "min_duration_s=0", "--set", "min_repeats=3", "--set", "warmup=1",
                        "--set", "new_tokens=8", *_ONE_THREAD],
}


def _gpu_slug(run_dir: Path) -> str:
    env_path = run_dir / "env.json"
    env = json.loads(env_path.read_text()) if env_path.is_file() else {}
    name = env.get("gpu") or "cpu"
    match = re.search(r"\b([A-Z]\d{2,4}[A-Z]?)\b", name)  # "NVIDIA H100 80GB HBM3" -> "h100"
    return (match.group(1) if match else name).lower().replace(" ", "-")[:20]


def gpu_count() -> int:
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in listed.splitlines())


def plan_args(source: str) -> list[str]:
    """`inferlab bench`'s flags for a part's preset or plan file."""
    return ["--plan", str(REPO / source)] if source.endswith(".toml") else ["--preset", source]


def run_part(part: str, runs: Path, deadline: float, smoke: bool, log: list[str], only: list[str] = ()) -> None:
    preset, run_name = PARTS[part]
    remaining = deadline - time.monotonic()
    if remaining < 30:
        log.append(f"{part}: not started, the budget is spent (run this script again to continue)")
        return
    package = NEEDS.get(part)
    if package and not smoke and importlib.util.find_spec(package) is None:
        log.append(f"{part}: not started, {package} is not importable here (on the device: carry .dev2 in the call "
                   "right after .dev1's, on the same warm machine; benchmarks/README.md, \"Procedure: a device "
                   "session\")")
        return
    if part in NEEDS_TWO_GPUS and not smoke and gpu_count() < 2:
        log.append(f"{part}: not started, it needs two GPUs (nvidia-h100-x2 / nvidia-h200-x2)")
        return
    if part == "peers-vllm" and not smoke and importlib.util.find_spec("flashinfer") is not None:
        ready, line = warm_flashinfer(min(FLASHINFER_WARM_S, remaining - 30))
        if not ready:  # every vLLM cell would fail the same way: they run with vLLM's own sampler, and say so
            os.environ["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
        log.append(line)
        print(line, flush=True)
        remaining = deadline - time.monotonic()
    argv = ["bench", *plan_args(preset), "--run-dir", str(runs / run_name), "--model-cache", str(runs / "cache"),
            "--limit-seconds", str(int(remaining)), "--no-report"]
    argv += PART_FILTERS.get(part, [])
    argv += SMOKE_ARGS[preset] if smoke else []
    argv += [arg for value in only for arg in ("--only", value)]
    print(f"\n=== {part}: inferlab {' '.join(argv)}", flush=True)
    code = inferlab(argv)
    log.append(f"{part}: inferlab bench exited {code}")


def run_tune(runs: Path, out: Path, deadline: float, smoke: bool, log: list[str], molecules: int) -> None:
    """Part tune-conformers: qwen3-0.6b (random weights, the qwen3-chem tokenizer) on drug-sized NCI molecules x 8,
    every candidate warm and timed in 3 passes, the grid doubling max_slots up to the memory plan's largest for the
    model dtype and fp8. The checkpoint, the sample and the measured candidates stay in runs/tune (--work-dir), and
    the tune stops before a candidate that would pass the budget (exit 3): the next call resumes. Writes
    tuned-conformers.json (once every candidate is measured) and tune.log under --out/tune."""
    from inferlab.models.checkpoint_init import init_checkpoint
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    if deadline - time.monotonic() < 60:
        log.append(f"{TUNE_PART}: not started, the budget is spent (run this script again to continue)")
        return
    work, target = runs / "tune", out / "tune"
    target.mkdir(parents=True, exist_ok=True)
    preset, dtype, count, atoms, k = ("tiny", "float32", 2, (6, 9), 2) if smoke else (
        "qwen3-0.6b", "bfloat16", molecules, (20, 50), 8)
    model = work / f"{preset}-{dtype}"
    if not (model / "config.json").exists():  # smoke: the built-in tokenizer (a 151k vocabulary is slow on CPU)
        partial = work / f"{preset}-{dtype}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        init_checkpoint(preset, partial, seed=0, dtype=dtype, tokenizer_dir=None if smoke else qwen3_chem_tokenizer_dir())
        partial.rename(model)
    sample = drug_sized_molecules(work / f"molecules-{count}.smi", count, *atoms)
    command = [sys.executable, "-u", "-m", "inferlab.cli", "tune", "--model", str(model), "--workload", "conformers",
               "--sample", str(sample), "--sample-rows", str(count), "--num-conformers", str(k),
               "--min-seconds", "0" if smoke else "2", "--device", "cpu" if smoke else "cuda",
               "--work-dir", str(work / f"measured-{model.name}-{count}x{k}"),
               "--budget-s", str(max(1, int(deadline - time.monotonic()))), "--out", str(target / "tuned-conformers.json")]
    print(f"\n=== {TUNE_PART}: {' '.join(command)}", flush=True)
    with (target / "tune.log").open("a") as tune_log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in process.stdout:  # type: ignore[union-attr]
            sys.stdout.write(line)
            tune_log.write(line)
        code = process.wait()
    log.append(f"{TUNE_PART}: inferlab tune exited {code}" + (" (not finished: run this part again)" if code == 3 else ""))


def run_reference_recipe(runs: Path, out: Path, deadline: float, smoke: bool, log: list[str]) -> None:
    """Part reference-recipe: `build-data` into runs/reference-data (all cores; ~2 CPU-hours, so it may take
    more than one call: the build resumes from its chunks), then `reproduce` (the recipe's training and the
    comparison with the committed checkpoint, reproduction.json) into runs/reference-recipe, then, when the
    weights are not bitwise identical, the constrained bf16 conformer-quality cells on the new checkpoint (run
    RECIPE_QUALITY_RUN), whose figures must fall within the committed table's spread. Under --cpu-smoke: a
    one-molecule-per-split build and 2 steps on the CPU, compared the same way."""
    data, ckpt, target = runs / "reference-data", runs / "reference-recipe", out / RECIPE_PART
    target.mkdir(parents=True, exist_ok=True)
    training = [sys.executable, "-u", "-m", "inferlab.workloads.conformers.training"]
    if not (data / "data_manifest.json").is_file():
        build = [*training, "build-data", "--out", str(data), "--workers", "0" if smoke else str(os.cpu_count() or 1),
                 *(["--limit", "1"] if smoke else [])]
        if not _logged_run(build, target / "build-data.log", deadline, log, RECIPE_PART):
            return
    if not (ckpt / "reproduction.json").is_file():
        if deadline - time.monotonic() < (30 if smoke else RECIPE_TRAIN_S):
            log.append(f"{RECIPE_PART}: the data is built; training not started, the budget is spent (run again)")
            return
        shutil.rmtree(ckpt, ignore_errors=True)  # a training cut short leaves no checkpoint to resume
        if smoke:
            trial = [*training, "train", "--data", str(data), "--out", str(ckpt), "--steps", "2", "--device", "cpu"]
            if _logged_run(trial, target / "train.log", deadline, log, RECIPE_PART):
                from inferlab.workloads.conformers.training.reproduction import compare_checkpoints

                (ckpt / "reproduction.json").write_text(json.dumps(compare_checkpoints(ckpt, ckpt), indent=1) + "\n")
        elif not _logged_run([*training, "reproduce", "--data", str(data), "--out", str(ckpt)],
                             target / "train.log", deadline, log, RECIPE_PART):
            return
    for name in ("reproduction.json", "training.json", "training_log.jsonl", "README.md", "loss_curve.png"):
        if (ckpt / name).is_file():
            shutil.copyfile(ckpt / name, target / name)
    comparison = json.loads((ckpt / "reproduction.json").read_text())
    log.append(f"{RECIPE_PART}: {'identical weights' if comparison['identical'] else 'weights differ'} "
               f"({comparison['tensors_differing']} of {comparison['tensors']} tensors, largest |difference| "
               f"{comparison['max_abs_difference']:.3g}); {target / 'reproduction.json'}")
    if comparison["identical"] and not smoke:
        return  # the committed quality table is this checkpoint's
    argv = ["bench", "--preset", "conformer-quality", "--model", str(ckpt), "--run-dir", str(runs / RECIPE_QUALITY_RUN),
            "--limit-seconds", str(max(1, int(deadline - time.monotonic()))), "--no-report",
            "--only", "backend=inferlab", "--only", "constraint=on", "--only", "kv_dtype=auto"]
    if smoke:  # the trial tokenizer knows only the trial's molecules: its held-out one, at the smoke shapes
        argv += ["--set", f"molecules_file={data / 'held_out.smi'}", "--set", "num_molecules=1", "--set",
                 "min_heavy_atoms=0", "--set", "max_heavy_atoms=0", "--set", "num_references=2", "--set",
                 "subset_molecules=1", "--set", "num_seeds=2", "--set", "dtype=float32", "--set", "slots=4",
                 "--set", "workers=1", *_ONE_THREAD]
    print(f"\n=== {RECIPE_PART}: inferlab {' '.join(argv)}", flush=True)
    log.append(f"{RECIPE_PART}: inferlab bench exited {inferlab(argv)}")


def _logged_run(command: list[str], log_path: Path, deadline: float, log: list[str], part: str) -> bool:
    """Run `command` until the deadline, its output to stdout and appended to log_path; True when it exited 0."""
    print(f"\n=== {part}: {' '.join(command)}", flush=True)
    with log_path.open("a") as log_file:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            for line in process.stdout:  # type: ignore[union-attr]
                sys.stdout.write(line)
                log_file.write(line)
                if time.monotonic() > deadline:
                    process.terminate()
                    break
            code = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
    if code != 0:
        log.append(f"{part}: `{' '.join(command[3:5])}` exited {code}" + (
            " at the budget (run this part again: it resumes)" if time.monotonic() > deadline else ""))
    return code == 0


def drug_sized_molecules(path: Path, count: int, min_atoms: int, max_atoms: int) -> Path:
    """The first `count` molecules of RDKit's NCI first_5K with min-max heavy atoms, stereo assigned where the
    file leaves it open (the conformer-pipeline preset's selection), as a .smi file (kept: written once)."""
    from rdkit import Chem, rdBase

    from inferlab.bench.scenarios.molecules import nci_molecules_path, with_assigned_stereo

    if path.is_file() and len(path.read_text().splitlines()) == count:
        return path
    lines = []
    blocker = rdBase.BlockLogs()
    with nci_molecules_path().open() as f:
        for i, line in enumerate(f):
            mol = Chem.MolFromSmiles(line.split()[0]) if line.strip() else None
            if mol is not None and min_atoms <= mol.GetNumHeavyAtoms() <= max_atoms:
                lines.append(f"{with_assigned_stereo(mol)} nci{i}\n")
                if len(lines) == count:
                    break
    del blocker
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    return path


def warm_flashinfer(timeout_s: float) -> tuple[bool, str]:
    """FlashInfer JIT-compiles its kernels with nvcc on first use. vLLM's top-p/top-k sampler is FlashInfer's
    sampling module: built here once per machine (cached under FLASHINFER_WORKSPACE_BASE, device_env.sh), in a
    child process, with vLLM's FlashInfer backend imported as its sampler imports it, so that no vLLM cell's
    start-up or budget pays for it. Returns (ready, the log line)."""
    code = ("import torch, flashinfer.sampling as s, vllm.v1.attention.backends.flashinfer; "
            "x = torch.randn(8, 4096, device='cuda'); s.top_k_top_p_sampling_from_logits(x, 50, 0.9); "
            "s.top_p_sampling_from_probs(x.softmax(-1), 0.9); s.top_k_sampling_from_probs(x.softmax(-1), 50); "
            "torch.cuda.synchronize()")
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=max(timeout_s, 1))
    except subprocess.TimeoutExpired:
        return False, f"FlashInfer: its sampling module did not build in {timeout_s:.0f} s; vLLM runs its own sampler"
    seconds = time.monotonic() - started
    if done.returncode != 0:
        return False, (f"FlashInfer: its sampling module failed ({seconds:.0f} s), vLLM runs its own sampler: "
                       f"{done.stderr.strip()[-300:]}")
    return True, f"FlashInfer: sampling module ready in {seconds:.0f} s (built by nvcc, or from the JIT cache)"


def write_outputs(runs: Path, out: Path, smoke: bool, log: list[str]) -> list[str]:
    date = _dt.date.today().isoformat()
    summary: list[str] = []
    for run_name in dict.fromkeys([*(p[1] for p in PARTS.values()), RECIPE_QUALITY_RUN]):
        run_dir = runs / run_name
        if not (run_dir / "results.jsonl").is_file():
            continue
        what = run_name + ("-cpu-smoke" if smoke else "")
        stem = f"{date}-{_gpu_slug(run_dir)}-{what}"
        try:
            results = out / "benchmarks" / "results" / f"{stem}.jsonl"
            results.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run_dir / "results.jsonl", results)
            report_dir = out / "benchmarks" / "reports" / stem
            inferlab(["report", str(run_dir), "--out", str(report_dir), *REPORT_BASELINES.get(run_name, [])])
            summary += _summarise(run_dir, report_dir / "report.md", stem)
        except Exception:
            traceback.print_exc()
            log.append(f"outputs of {run_name}: failed (traceback above)")
    return summary


def _summarise(run_dir: Path, report: Path, stem: str) -> list[str]:
    from inferlab.bench.recommend import format_text, recommend
    from inferlab.bench.results import load_rows

    rows = load_rows([run_dir])
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    lines = [f"## {stem}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
    if counts.get("skipped"):
        lines.append(f"   {counts['skipped']} cells skipped by the budget: run this script again to resume them")
    for r in rows:
        if r["status"] not in ("ok", "skipped"):
            lines.append(f"   {r['status']:<11} {r.get('backend')} {_short_config(r)}: {r['message'][:160]}")
        elif r["status"] == "ok" and r.get("scenario") == "steering":
            lines.append("   " + _steering_line(r))
    text = report.read_text() if report.is_file() else ""
    if "## Do the seeds' findings hold?" in text:
        section = text.split("## Do the seeds' findings hold?", 1)[1].split("\n## ", 1)[0]
        lines += ["Do the seeds' findings hold?", section.strip()]
    if "## Labels beside transformers'" in text:
        section = text.split("## Labels beside transformers'", 1)[1].split("\n## ", 1)[0]
        lines += ["Labels beside transformers':", section.strip()]
    if "## Conformer quality" in text:
        lines += [text.split("## Conformer quality", 1)[1].split("\n## ", 1)[0].strip()]
    lines += ["Recommendations:", format_text(recommend(rows))]
    return lines


def _steering_line(row: dict) -> str:
    """One steering row: the headline, the engine's step costs per mode, its activation check."""
    m = row.get("metrics", {})

    def share(key: str) -> str:
        return f"{m[key] * 100:+.1f}%" if m.get(key) is not None else "-"

    check = m.get("activation_check") or {}
    checked = f", activations vs HF max rel err {check['max_rel_error']:.3g} ({'ok' if check['match'] else 'FAILED'})" \
        if check else ""
    return (f"{row.get('backend')} batch {row.get('batch_size')}: {m.get('output_tokens_per_s', 0):,.0f} tok/s "
            f"({m.get('headline_mode')}); step cost steer {share('steering_cost')}, collect "
            f"{share('collection_cost')}, both {share('steer_collect_cost')}{checked}")


def _short_config(row: dict) -> str:
    c = row.get("config", {})
    keys = ("kernel", "gqa", "attn_implementation", "sdpa_backend", "kv_cache", "processor", "quantization", "dtype",
            "pool", "sampling", "batch_size", "q_len", "kv_len")
    return " ".join(f"{k}={c[k]}" for k in keys if k in c)


def estimates(parts: list[str]) -> list[str]:
    """Estimated GPU minutes per part (cells shared with an earlier part counted once)."""
    from inferlab.bench.launcher import estimate_seconds
    from inferlab.bench.plan import build_plan, load_toml
    from inferlab.bench.plan_presets import get_plan_preset

    seen: set[str] = set()
    lines, total = [], 0.0
    for part in parts:
        if part == TUNE_PART:
            lines.append(f"  {part:<20}  ~15 min on an H100 in two calls (resumable: rerun until it writes the file)")
            continue
        if part == RECIPE_PART:
            lines.append(f"  {part:<20}  the data build (~2 CPU-hours: two calls on 16 cores?), ~4 min of training, "
                         "~3 min of quality cells when the weights differ")
            continue
        only = _only_filters(PART_FILTERS.get(part, []))
        source = PARTS[part][0]
        data = load_toml(REPO / source) if source.endswith(".toml") else get_plan_preset(source)
        cells = [c for c in build_plan(data, only=only).cells if c.key not in seen]
        seen.update(c.key for c in cells)
        typical, worst = estimate_seconds(cells, accelerator=True)
        total += typical
        lines.append(f"  {part:<20} {len(cells):>3} cells  ~{typical / 60:4.1f} min (at most {worst / 60:.0f} if every "
                     "cell hit its timeout)")
    return ["estimated minutes on one H100/H200:", *lines, f"  {'total':<20}      ~{total / 60:4.1f} min"]


def _only_filters(argv: list[str]) -> dict[str, list[str]]:
    """["--only", "backend=a,b", ...] -> {"backend": ["a", "b"]} (build_plan's `only`; --set pairs ignored)."""
    pairs = [argv[i + 1].split("=", 1) for i in range(0, len(argv), 2) if argv[i] == "--only"]
    return {name: values.split(",") for name, values in pairs}


def availability() -> list[str]:
    """What decides whether some cells can run at all here."""
    from inferlab.errors import InputError
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    notes = []
    for module, cells in (("torchao", "classify int8/fp8"), ("flash_attn", "flash-attn / flash_attention_2"),
                          ("vllm", "vllm (engine-vs-peers)"), ("xgrammar", "hf-xgrammar (engine-vs-peers)"),
                          ("flashinfer", "vLLM's FlashInfer sampler")):
        found = importlib.util.find_spec(module) is not None
        parts = [part for part, package in NEEDS.items() if package == module]
        missing = " will be `unavailable` rows" + (f"; part {', '.join(parts)} is not started unless --cpu-smoke"
                                                   if parts else "")
        notes.append(f"  {module}: {'found' if found else 'NOT installed'} ({cells} cells{'' if found else missing})")
    try:
        notes.append(f"  qwen3-chem tokenizer: {qwen3_chem_tokenizer_dir()}")
    except InputError as e:
        notes.append(f"  qwen3-chem tokenizer: NOT found, the conformer-baseline part will fail ({e})")
    return notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder for results, reports and the summary ($OUT on the device)")
    parser.add_argument("--parts", nargs="+", choices=[*PARTS, TUNE_PART, RECIPE_PART],
                        default=[*PARTS, TUNE_PART])
    parser.add_argument("--tune-molecules", type=int, default=90,
                        help=f"{TUNE_PART}: molecules x 8 conformers (90 on an H100, 160 on an H200: the sample must "
                             "reach the memory plan's largest max_slots for the grid to end there)")
    parser.add_argument("--budget-s", type=float, default=540.0, help="stop launching cells after this long (default 540)")
    parser.add_argument("--runs", default=str(REPO / "runs" / "lab"), help="where the run directories live")
    parser.add_argument("--cpu-smoke", action="store_true", help="shrink every preset to run on a CPU (tiny model/shapes)")
    parser.add_argument("--estimate", action="store_true", help="print the estimated minutes per part and exit")
    parser.add_argument("--only", action="append", default=[], metavar="KNOB=V1,V2",
                        help="passed to every part's `inferlab bench --only` (e.g. scenario=constrained)")
    args = parser.parse_args()
    print("\n".join(estimates(args.parts)), flush=True)
    if args.estimate:
        return 0
    if not args.out:
        parser.error("--out is required unless --estimate")
    print("\n".join(["availability:", *availability()]), flush=True)
    out, runs = Path(args.out), Path(args.runs)
    runs = runs.with_name(runs.name + "-cpu-smoke") if args.cpu_smoke else runs
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget_s
    log: list[str] = []
    for part in args.parts:
        try:
            if part == TUNE_PART:
                run_tune(runs, out, deadline, args.cpu_smoke, log, args.tune_molecules)
            elif part == RECIPE_PART:
                run_reference_recipe(runs, out, deadline, args.cpu_smoke, log)
            else:
                run_part(part, runs, deadline, args.cpu_smoke, log, args.only)
        except Exception:
            traceback.print_exc()
            log.append(f"{part}: raised (traceback above)")
    summary = write_outputs(runs, out, args.cpu_smoke, log)
    text = "\n".join(["", "==================== lab sweep summary ====================", *log, "", *summary])
    print(text)
    (out / "lab_summary.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
