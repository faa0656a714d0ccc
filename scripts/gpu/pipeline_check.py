#!/usr/bin/env python
"""Device check of the conformer pipeline, `inferlab demo`, the HF fallback of `inferlab generate` and
`inferlab tune` (issues 4, 5), on one GPU, in one run. Each part runs in its own child process (a clean
device, a time limit); a failure is printed with its traceback and the next part runs.

Parts:
  demo          `inferlab demo` through the CLI (tiny random checkpoint, 8 NCI molecules x 2).
  conformers    the pipeline on NCI molecules with a random qwen3-0.6b-shaped checkpoint (qwen3-chem
                tokenizer): summary figures (conformers/s, tok/s, validity, where the time went), then a
                rerun that must write nothing (resume), and the row count and ids checked.
  tune-conformers  `inferlab tune --workload conformers` on the first molecules, then the pipeline again
                with the best measured max_slots (figures beside the automatic slots of `conformers`).
  fallback      a tiny GPT-2 (not in the engine's registry): backend auto falls back to transformers and
                its greedy rows equal transformers' generate prompt by prompt (float32); then the same
                prompts on qwen3-0.6b with the engine and with --backend hf (output tok/s of each).
  tune-generate, tune-classify  `inferlab tune` sweeps (qwen3-0.6b prompts; qwen2-cls texts).

GPU:  PYTHONPATH=src python scripts/gpu/pipeline_check.py --out $OUT --parts demo,conformers,fallback
      PYTHONPATH=src python scripts/gpu/pipeline_check.py --out $OUT --parts tune-conformers,tune-generate,tune-classify
      (each about 4-6 minutes on one H100; --budget-s, default 560, caps a run: parts past it are skipped)
CPU:  PYTHONPATH=src python scripts/gpu/pipeline_check.py --out /tmp/pc --device cpu --quick
Writes parts/<part>.json (figures) and <part>.log (the child's output) under --out, and summary.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

PARTS = ["demo", "conformers", "tune-conformers", "fallback", "tune-generate", "tune-classify"]
TIMEOUT_S = {"demo": 240, "conformers": 300, "tune-conformers": 300, "fallback": 180, "tune-generate": 200,
             "tune-classify": 150}
# (gpu, quick) sizes
MOLECULES = (512, 6)
CONFORMERS_K = (4, 2)
PROMPTS = (256, 8)
NEW_TOKENS = (128, 8)
TEXTS = (512, 16)


def pick(pair: tuple, quick: bool):
    return pair[1] if quick else pair[0]


def model_dir(args, preset: str, dtype: str = "bfloat16") -> Path:
    from inferlab.models.checkpoint_init import init_checkpoint
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    if args.quick:
        preset = {"qwen3-0.6b": "tiny-qwen3", "qwen2-cls": "tiny-qwen2-cls"}[preset]
        dtype = "float32"
    path = Path(args.scratch) / f"{preset}-{dtype}"
    if not (path / "config.json").exists():
        tokenizer = qwen3_chem_tokenizer_dir() if "qwen3" in preset else None
        init_checkpoint(preset, path, seed=0, dtype=dtype, tokenizer_dir=tokenizer)
    return path


def write_molecules(path: Path, rows: int) -> Path:
    from rdkit import RDConfig

    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        path.write_text("".join(f"{line.split()[0]} nci{i}\n" for i, line in zip(range(rows), f)))
    return path


def write_prompts(path: Path, rows: int) -> Path:
    with path.open("w") as f:
        for i in range(rows):
            words = 8 + (i * 37) % 113  # lengths vary
            f.write(json.dumps({"id": f"p{i:05d}", "prompt": " ".join(f"w{(i + j) % 997}" for j in range(words))}) + "\n")
    return path


def part_demo(args, work: Path) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "inferlab.cli", "demo", "--work-dir", str(work / "demo"),
                           "--device", args.device], capture_output=True, text=True, timeout=TIMEOUT_S["demo"] - 10,
                          check=False)
    print(done.stdout[-3000:], done.stderr[-2000:])
    assert done.returncode == 0, f"inferlab demo exited {done.returncode}"
    return {"wall_s": round(time.perf_counter() - started, 1), "stdout_tail": done.stdout[-1500:]}


def _pipeline(args, model: Path, inp: Path, out: Path, **engine: Any) -> dict[str, Any]:
    from inferlab.workloads.conformers.pipeline.config import PipelineConfig
    from inferlab.workloads.conformers.pipeline.generate import generate_conformers

    config = PipelineConfig(num_conformers=pick(CONFORMERS_K, args.quick), seed=0)
    options = {"device": args.device, **engine}  # EngineConfig fields: max_slots, kv_dtype
    return generate_conformers(model, inp, out, config, options).as_dict()


def part_conformers(args, work: Path) -> dict[str, Any]:
    model = model_dir(args, "qwen3-0.6b")
    inp = write_molecules(work / "molecules.smi", pick(MOLECULES, args.quick))
    first = _pipeline(args, model, inp, work / "out.sdf")
    print(json.dumps(first, indent=1))
    again = _pipeline(args, model, inp, work / "out.sdf")
    rows = [json.loads(line) for line in (work / "out.jsonl").read_text().splitlines()]
    k, molecules = pick(CONFORMERS_K, args.quick), pick(MOLECULES, args.quick)
    checks = {"rows": len(rows), "expected_rows": k * molecules, "unique_ids": len({r["id"] for r in rows}),
              "rerun_wrote": again["conformers_ok"] + again["conformers_error"],
              "rerun_skipped": again["conformers_skipped"]}
    print(checks)
    assert checks["rows"] == checks["unique_ids"] == checks["expected_rows"] and checks["rerun_wrote"] == 0
    return {"summary": first, "checks": checks}


def part_tune_conformers(args, work: Path) -> dict[str, Any]:
    from inferlab.workloads.tune.sweep import TuneSettings, run_sweep
    from inferlab.workloads.tune.tuned_file import write_tuned_config

    model = model_dir(args, "qwen3-0.6b")
    inp = write_molecules(work / "molecules.smi", pick(MOLECULES, args.quick))
    settings = TuneSettings("conformers", str(model), str(inp), sample_rows=pick((32, 2), args.quick),
                            device=args.device, num_conformers=pick(CONFORMERS_K, args.quick),
                            min_seconds=pick((2.0, 0.0), args.quick))
    tuned = run_sweep(settings)
    write_tuned_config(tuned, work / "tuned.json")
    print(json.dumps([{**c["settings"], **c.get("figures", {"error": c.get("error")})} for c in tuned.candidates],
                     indent=1, default=str))
    best = tuned.best  # the recommendation may name no knob (no clear winner): run the best measured
    with_tuned = _pipeline(args, model, inp, work / "tuned.sdf", **best)
    return {"recommended": tuned.recommended, "best": best, "verdicts": tuned.verdicts,
            "margin": tuned.runner_up_margin, "candidates": tuned.candidates, "pipeline_with_best": with_tuned}


def part_fallback(args, work: Path) -> dict[str, Any]:
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        GPT2Config,
        GPT2LMHeadModel,
    )

    from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
    from inferlab.types import SamplingParams
    from inferlab.workloads.text import open_backend, run_text_generation

    gpt2 = work / "tiny-gpt2"
    tokenizer = build_builtin_tokenizer()
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=256, n_embd=64, n_layer=2, n_head=4,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(gpt2)
    tokenizer.save_pretrained(gpt2)
    prompts = work / "gpt2-prompts.jsonl"  # short: prompt + 16 new tokens within the 256 positions
    prompts.write_text("".join(json.dumps({"id": f"g{i}", "prompt": "count to " * (1 + i % 6)}) + "\n"
                               for i in range(16)))
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
    options = {"device": args.device, "dtype": "float32", "max_slots": 8}
    run_text_generation(prompts, work / "gpt2-out.jsonl", lambda: open_backend("auto", str(gpt2), options), greedy)
    rows = {r["id"]: r for r in map(json.loads, (work / "gpt2-out.jsonl").read_text().splitlines())}
    reference = AutoModelForCausalLM.from_pretrained(str(gpt2), dtype=torch.float32).to(
        "cuda" if args.device != "cpu" else "cpu").eval()
    ref_tok = AutoTokenizer.from_pretrained(str(gpt2))
    equal, lines = 0, prompts.read_text().splitlines()
    for line in lines:
        data = json.loads(line)
        ids = torch.tensor([ref_tok(data["prompt"]).input_ids], device=reference.device)
        with torch.inference_mode():
            out = reference.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16,
                                     eos_token_id=ref_tok.eos_token_id, pad_token_id=ref_tok.pad_token_id)
        new = out[0, ids.shape[1]:].tolist()
        new = new[: new.index(ref_tok.eos_token_id) + 1] if ref_tok.eos_token_id in new else new
        equal += rows[data["id"]]["token_ids"] == new
    result: dict[str, Any] = {"gpt2_rows": len(rows), "gpt2_error_rows": sum(r["error"] is not None for r in rows.values()),
                              "gpt2_equal_to_transformers": equal}
    print(result)
    model = model_dir(args, "qwen3-0.6b")
    prompts = write_prompts(work / "prompts.jsonl", pick(PROMPTS, args.quick))
    sampling = SamplingParams(temperature=0.0, max_new_tokens=pick(NEW_TOKENS, args.quick), ignore_eos=True)
    for backend in ("inferlab", "hf"):
        options = {"device": args.device, "max_slots": pick((256, 8), args.quick)}
        holder = {"b": open_backend(backend, str(model), options)}
        started = time.perf_counter()
        summary = run_text_generation(prompts, work / f"{backend}.jsonl", lambda held=holder: held["b"], sampling)
        seconds = time.perf_counter() - started
        result[f"{backend}_output_tokens_per_s"] = round(summary.output_tokens / seconds, 1)
        result[f"{backend}_errors"] = summary.errors
        holder.clear()  # free the model before the next backend loads
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        print(backend, result[f"{backend}_output_tokens_per_s"], "tok/s")
    assert equal == len(lines), f"{len(lines) - equal} GPT-2 rows differ from transformers' generate"
    return result


def _tune(args, work: Path, workload: str, model: Path, sample: Path, **extra) -> dict[str, Any]:
    from inferlab.workloads.tune.sweep import TuneSettings, run_sweep
    from inferlab.workloads.tune.tuned_file import write_tuned_config

    settings = TuneSettings(workload, str(model), str(sample), device=args.device,
                            min_seconds=pick((2.0, 0.2), args.quick), **extra)
    tuned = run_sweep(settings)
    write_tuned_config(tuned, work / "tuned.json")
    table = [{**c["settings"], tuned.metric: (c.get("figures") or {}).get(tuned.metric), "error": c.get("error")}
             for c in tuned.candidates]
    print(json.dumps(table, indent=1, default=str))
    return {"recommended": tuned.recommended, "verdicts": tuned.verdicts, "margin": tuned.runner_up_margin,
            "candidates": tuned.candidates}


def part_tune_generate(args, work: Path) -> dict[str, Any]:
    prompts = write_prompts(work / "prompts.jsonl", pick(PROMPTS, args.quick))
    return _tune(args, work, "generate", model_dir(args, "qwen3-0.6b"), prompts,
                 max_new_tokens=pick(NEW_TOKENS, args.quick))


def part_tune_classify(args, work: Path) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from inferlab.workloads.measure import synthetic_texts

    model = model_dir(args, "qwen2-cls")
    texts = synthetic_texts(AutoTokenizer.from_pretrained(str(model)), pick(TEXTS, args.quick), 16, 256, seed=0,
                            distribution="log-uniform")
    sample = work / "texts.jsonl"
    sample.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    return _tune(args, work, "classify", model, sample)


RUNNERS = {"demo": part_demo, "conformers": part_conformers, "tune-conformers": part_tune_conformers,
           "fallback": part_fallback, "tune-generate": part_tune_generate, "tune-classify": part_tune_classify}


def run_child(args) -> int:
    work = Path(args.out) / "work" / args.child
    shutil.rmtree(work, ignore_errors=True)  # fresh outputs: a rerun of the script measures again
    work.mkdir(parents=True)
    result = RUNNERS[args.child](args, work)
    (Path(args.out) / "parts").mkdir(exist_ok=True)
    (Path(args.out) / "parts" / f"{args.child}.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="tiny models and inputs (CPU proof of the script)")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--scratch", default=None, help="checkpoints (default OUT/models; reused)")
    ap.add_argument("--budget-s", type=float, default=560,
                    help="the whole run: a part gets at most what is left; none starts with under 30 s left")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.scratch = args.scratch or str(Path(args.out) / "models")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.child:
        return run_child(args)
    lines = ["| part | status | seconds | figures |", "|---|---|---|---|"]
    run_started = time.perf_counter()
    for part in args.parts.split(","):
        started = time.perf_counter()
        limit = min(TIMEOUT_S[part], args.budget_s - (started - run_started))
        if limit < 30:
            print(f"[{part}] skipped: {limit:.0f} s of --budget-s left", flush=True)
            lines.append(f"| {part} | skipped (budget) | 0 | rerun with --parts {part} |")
            continue
        command = [sys.executable, __file__, "--out", args.out, "--device", args.device, "--scratch", args.scratch,
                   "--child", part] + (["--quick"] if args.quick else [])
        log = Path(args.out) / f"{part}.log"
        try:
            with log.open("w") as f:
                done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, timeout=limit, check=False)
            status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
        except subprocess.TimeoutExpired:
            status = f"timeout {limit:.0f} s"
        except OSError:  # the child could not start: report, go on
            status = "harness error"
            traceback.print_exc()
        seconds = time.perf_counter() - started
        figures = _headline(part, Path(args.out) / "parts" / f"{part}.json") if status == "ok" else _tail(log)
        print(f"[{part}] {status} in {seconds:.0f} s: {figures}", flush=True)
        lines.append(f"| {part} | {status} | {seconds:.0f} | {figures} |")
    (Path(args.out) / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _headline(part: str, path: Path) -> str:
    data = json.loads(path.read_text())
    if part == "conformers":
        s = data["summary"]
        return (f"{s['conformers_ok']} valid / {s['conformers_generated']} generated, {s['conformers_per_s']:.1f} conf/s, "
                f"{s['output_tokens_per_s']:,.0f} tok/s ({s['generate_output_tokens_per_s']:,.0f} in the engine), "
                f"start {s['engine_start_s']} s, template wait {s['template_wait_s']} s; rerun wrote "
                f"{data['checks']['rerun_wrote']}")
    if part.startswith("tune-"):
        extra = ""
        if "pipeline_with_best" in data:
            extra = f"; pipeline with the best: {data['pipeline_with_best']['conformers_per_s']:.1f} conf/s"
        return f"recommended {data['recommended']} (margin {data['margin']}){extra}"
    if part == "fallback":
        return ", ".join(f"{k}={v}" for k, v in data.items())
    return " / ".join(line.split(":", 1)[1].strip()[:90] for line in data.get("stdout_tail", "").splitlines()
                      if line.startswith(("valid:", "graph:", "speed:")))


def _tail(log: Path) -> str:
    try:
        return log.read_text()[-400:].replace("\n", " / ").replace("|", "/")
    except OSError:
        return "no log"


if __name__ == "__main__":
    sys.exit(main())
