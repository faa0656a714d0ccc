"""Measure the GEMM plans of our model shapes on this GPU and write them where the package ships them.

    python -m inferlab.engine.gemm_plans.measure [--out DIR] [--models qwen3-0.6b,llama-380m] [--dtype bfloat16]

For each preset shape (default: every causal-LM preset of models/presets.py, the ones our benchmarks, the
demo and the tests run) the engine's own timing (gemm_plan.tune_gemm_plan) runs over weights of that shape
(random values: only the shapes and the dtype set the timings) at every decode bucket <= 64 rows, and the
plan goes into DIR/<gpu-slug>.json under its shipped key (gemm_plans/__init__.py), merged with the file's
other entries (an entry with an equal key is replaced). Presets whose key is equal (e.g. the tiny Llama and
Mistral) share one entry. Needs a CUDA GPU; DIR defaults to this package's folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch


def preset_spec(name: str):
    """The ModelSpec of a preset shape (its HF config written to a temporary folder and read back)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from inferlab.models.config import read_model_spec
    from inferlab.models.presets import get_preset

    config = get_preset(name).make_config()
    config.architectures = config.architectures or [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(config.to_json_string())
        return read_model_spec(folder)


def measure(name: str, dtype: torch.dtype, device: torch.device) -> dict:
    """One preset's plan entry: {"models": [name], "key": shipped_key, "value": plan JSON + buckets}."""
    from inferlab.engine import gemm_plan
    from inferlab.engine.gemm_plans import shipped_key
    from inferlab.engine.graphs import bucket_sizes
    from inferlab.engine.ops import select_ops
    from inferlab.models.loader import placeholder_weights
    from inferlab.engine.forwards.registry import forward_class
    from inferlab.models.rope import RotaryTables

    spec = preset_spec(name)
    weights = placeholder_weights(spec, dtype, device)
    for layer in weights.layers:
        for tensor in (layer.qkv, layer.o, layer.gate_up, layer.down):
            tensor.normal_(std=0.02)
    rotary = RotaryTables.build(spec.rope, spec.head_dim, 16, device)
    model = forward_class(spec.architecture)(spec, weights, select_ops("triton", device), rotary)
    buckets = [b for b in bucket_sizes(256) if b <= gemm_plan.MAX_ROWS]
    activation = model.gemm.activation
    plan, timings = gemm_plan.tune_gemm_plan(weights, buckets, model.gemm.act_mul, device, activation)
    value = {**gemm_plan.plan_to_json(plan, timings), "buckets": buckets}
    return {"models": [name], "key": shipped_key(weights, device, activation), "value": value}


def main(argv: list[str] | None = None) -> int:
    from inferlab.engine.gemm_plans import plan_file, write_entries
    from inferlab.models.presets import PRESETS

    causal = [p.name for p in PRESETS.values() if p.task == "causal-lm"]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder of the plan files (default: this package)")
    parser.add_argument("--models", default=",".join(causal), help="comma-separated preset names")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("measure: needs a CUDA GPU (the plans are timings on the device)", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    gpu = torch.cuda.get_device_name(device)
    dtype = getattr(torch, args.dtype)
    entries: dict[str, dict] = {}
    started = time.perf_counter()
    for name in [m for m in args.models.split(",") if m]:
        t = time.perf_counter()
        with torch.inference_mode():
            entry = measure(name, dtype, device)
        torch.cuda.empty_cache()
        known = entries.setdefault(json.dumps(entry["key"], sort_keys=True), entry)
        if known is not entry:
            known["models"].append(name)
        chosen = len(entry["value"]["choices"])
        print(f"{name}: {chosen} Triton choices of {3 * len(entry['value']['buckets'])} in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
    path = plan_file(gpu, args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_entries(path, gpu, list(entries.values()))
    print(f"{len(entries)} plans for {gpu} in {time.perf_counter() - started:.1f} s -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
