"""GPU check of the seeds-style baseline: HF `generate` + the per-token Python LogitsProcessor.

What it shows, per cell (batch size x KV cache x sampling): that the processor runs on the device with
dynamic and static caches, the output tokens per second it reaches (real tokens, up to each row's EOS),
molecules per second, the first call (compile) apart from the steady run, peak memory, the share of rows
whose structure is the template's (always 1.0 by design) and the share that strict decoding accepts
(random weights: low, because the seeds' FREE slots let junk such as `0,,-.` through).

Model: a random-weight preset (default qwen3-0.6b; tiny-qwen3 on CPU) with the qwen3-chem tokenizer, made
in memory. Molecules: RDKit's NCI first_5K.smi in file order, the first --molecules that parse, sorted by
template length, longest first (as the seeds' PR #11 did).

Run on the GPU machine (about 6 minutes with the defaults on an H100/H200; no cell starts after --budget-s):
    PYTHONPATH=src python scripts/gpu/conformer_hf_baseline.py --out $OUT
and here, on CPU, end to end with tiny shapes:
    PYTHONPATH=src python scripts/gpu/conformer_hf_baseline.py --device cpu --out /tmp/hfb
The qwen3-chem tokenizer is found as inferlab.models.shared_assets says (.carry/qwen3-chem on the device).
Files under --out: cells.jsonl (one lab-style row per cell), summary.txt, samples.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import traceback
from pathlib import Path

import torch
import transformers
from rdkit import RDConfig
from transformers import AutoModelForCausalLM, AutoTokenizer

from inferlab.errors import InferlabError
from inferlab.models.presets import get_preset
from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir
from inferlab.workloads.conformers.hf_baseline_processor import SeedsVocabMasks, build_baseline_template
from inferlab.workloads.conformers.hf_baseline_run import run_baseline_batch
from inferlab.workloads.conformers.profiles import get_profile
from inferlab.workloads.conformers.template import build_template

SAMPLING = {
    "greedy": {"do_sample": False},
    # The seeds' production setting top_p_sampling1: T=1, top-p 1.0, HF's default top-k (50) left on.
    "top-p": {"do_sample": True, "temperature": 1.0, "top_p": 1.0},
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default=None, help="default: qwen3-0.6b on cuda, tiny-qwen3 on cpu")
    p.add_argument("--profile", default="v3-fixed4")
    p.add_argument("--molecules", type=int, default=None, help="default: 256 on cuda, 4 on cpu")
    p.add_argument("--cells", default=None,
                   help="batch:cache:sampling,... default on cuda: 32:dynamic:greedy,32:static:greedy,"
                        "256:dynamic:greedy,256:static:greedy,256:static:top-p")
    p.add_argument("--budget-s", type=float, default=480.0, help="start no new cell after this many seconds")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def environment(device: str) -> dict:
    env = {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
           "device": device}
    if device.startswith("cuda") and torch.cuda.is_available():
        env.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda)
    return env


def load_molecules(count: int, profile, tokenizer, max_tokens: int) -> list[tuple]:
    """(smiles, baseline template, conformer template) of the first `count` NCI molecules that fit."""
    out = []
    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        for line in f:
            if len(out) >= count:
                break
            smiles = line.split()[0]
            try:
                baseline = build_baseline_template(smiles, profile, tokenizer)
            except InferlabError:
                continue
            if len(baseline) + 64 <= max_tokens:
                out.append((smiles, baseline, build_template(smiles, profile)))
    out.sort(key=lambda m: -len(m[1]))
    return out


def structure_ok(row, baseline) -> bool:
    return row.ended_with_eos and len(row.token_ids) == len(baseline) + 1 and all(
        tok == ref for tok, ref, kind in zip(row.token_ids, baseline.ref_ids, baseline.kinds) if kind == 0)


def run_cell(model, tokenizer, masks, molecules, batch: int, cache: str, sampling: str, profile, device) -> dict:
    kwargs = dict(SAMPLING[sampling])
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    max_new = max(len(m[1]) for m in molecules) + 1  # one shape for every batch (a static cache needs it)
    batches = [molecules[i : i + batch] for i in range(0, len(molecules), batch)]

    def generate(chunk):
        return run_baseline_batch(model, tokenizer, [m[1] for m in chunk], masks, max_new_tokens=max_new,
                                  pad_to_multiple_of=64, **kwargs)

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    sync()
    t0 = time.perf_counter()
    generate(batches[0])  # first call: compilation and warm-up, reported apart
    sync()
    first_call_s = time.perf_counter() - t0
    rows, steady_s = [], 0.0
    for chunk in batches:
        sync()
        t0 = time.perf_counter()
        out = generate(chunk)
        sync()
        steady_s += time.perf_counter() - t0
        rows += list(zip(chunk, out))
    tokens = sum(len(r.token_ids) for _, r in rows)
    valid = 0
    for (_, _, template), r in rows:
        try:
            template.check(r.text, profile)
            valid += 1
        except InferlabError:
            pass
    return {
        "metrics": {
            "output_tokens": tokens,
            "output_tokens_per_s": tokens / steady_s,
            "requests_per_s": len(rows) / steady_s,
            "first_call_s": first_call_s,
            "steady_s": steady_s,
            "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None,
            "valid_fraction": valid / len(rows),
            "structure_fraction": sum(structure_ok(r, m[1]) for m, r in rows) / len(rows),
        },
        "samples": [r.text for _, r in rows[:2]],
    }


def main() -> int:
    args = parse_args()
    cpu = args.device == "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if cpu:
        torch.set_num_threads(1)  # full-vocabulary row ops contend badly across threads on small CPUs
    preset = args.preset or ("tiny-qwen3" if cpu else "qwen3-0.6b")
    n_molecules = args.molecules or (4 if cpu else 256)
    cells_text = args.cells or ("2:dynamic:greedy,2:static:top-p" if cpu else
                                "32:dynamic:greedy,32:static:greedy,256:dynamic:greedy,256:static:greedy,"
                                "256:static:top-p")
    cells = [(int(b), c, s) for b, c, s in (x.split(":") for x in cells_text.split(","))]
    env = environment(args.device)
    started = time.perf_counter()
    summary = [f"env: {json.dumps(env)}"]
    rows, samples = [], []
    try:
        profile = get_profile(args.profile)
        tokenizer = AutoTokenizer.from_pretrained(str(qwen3_chem_tokenizer_dir()))
        config = get_preset(preset).make_config()
        torch.manual_seed(args.seed)
        dtype = torch.float32 if cpu else torch.bfloat16
        with torch.device(args.device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
        masks = SeedsVocabMasks.build(tokenizer, config.vocab_size, args.device)
        t0 = time.perf_counter()
        molecules = load_molecules(n_molecules, profile, tokenizer, config.max_position_embeddings)
        build_s = time.perf_counter() - t0
        mean_len = sum(len(m[1]) for m in molecules) / len(molecules)
        summary.append(f"model {preset} ({dtype}), {len(molecules)} molecules, templates built in {build_s:.2f} s "
                       f"on the host, mean template {mean_len:.0f} tokens")
    except Exception:
        traceback.print_exc()
        summary.append("setup FAILED: " + traceback.format_exc().splitlines()[-1])
        cells = []
    for batch, cache, sampling in cells:
        row = {"run_id": f"hf-seeds-{batch}-{cache}-{sampling}", "scenario": "constrained",
               "backend": "hf-seeds-processor", "model": preset, "batch_size": batch, "env": env,
               "config": {"batch_size": batch, "cache": cache, "sampling": sampling, "profile": args.profile,
                          "molecules": n_molecules, "prompt_pad_multiple": 64}}
        if time.perf_counter() - started > args.budget_s:
            row.update(status="skipped", message=f"time budget {args.budget_s:.0f} s spent")
        else:
            try:
                result = run_cell(model, tokenizer, masks, molecules, batch, cache, sampling, profile, args.device)
                samples += [f"[{row['run_id']}] {t}" for t in result.pop("samples")]
                row.update(status="ok", message="", **result)
            except Exception:
                traceback.print_exc()
                row.update(status="error", message=traceback.format_exc()[-2000:])
        rows.append(row)
        m = row.get("metrics")
        summary.append(
            f"{row['run_id']:<32} {row['status']:<7} " + (
                f"{m['output_tokens_per_s']:>9.0f} tok/s {m['requests_per_s']:>7.2f} mol/s "
                f"first {m['first_call_s']:>6.1f} s steady {m['steady_s']:>6.1f} s "
                f"structure {m['structure_fraction']:.3f} valid {m['valid_fraction']:.3f}"
                + (f" peak {m['peak_memory_gb']:.1f} GB" if m["peak_memory_gb"] is not None else "")
                if m else row["message"].strip().splitlines()[-1] if row["message"] else ""))
    (out / "cells.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "samples.txt").write_text("\n".join(samples) + "\n")
    summary.append(f"total {time.perf_counter() - started:.0f} s")
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
    return 0 if all(r["status"] == "ok" for r in rows) and rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
