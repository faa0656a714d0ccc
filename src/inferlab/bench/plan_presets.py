"""Named plans (the same schema as a TOML plan, see plan.py): `quick` for a CPU smoke run in about a
minute, and the seed reproductions of BENCHMARKING.md for one GPU session.

GPU budget (one H100/H200, estimates, see docs/lab.md): seed-attention ~4 min (40 short cells),
seed-generate ~13 min (14 cells: 64 prompts x 1000 tokens each, plus a warm-up batch and, for static
caches, compilation), seed-static-cache ~10 min (12 cells; its 2 batch-16 cells without a processor are
the same cells as seed-generate's sdpa ones, so running both into one run directory runs them once).
Every cell has a timeout, so a hang costs at most that; `--limit-seconds` stops launching cells when a
budget is spent and a rerun resumes.
"""

from __future__ import annotations

import copy
from typing import Any

from inferlab.errors import ConfigError

_TINY_KERNEL_SHAPE = {"batch_size": 2, "q_heads": 4, "kv_heads": 2, "q_len": 128, "kv_len": 128, "head_dim": 32,
                      "causal": True, "dtype": "float32", "min_repeats": 5, "min_duration_s": 0.1, "warmup": 2}
_ALL_KERNELS = ["auto", "flash", "efficient", "cudnn", "math", "flash_attn"]

QUICK: dict[str, Any] = {
    "name": "quick",
    "description": "tiny model, CPU-sized: attention kernels on small shapes + HF generate eager/sdpa x dynamic/static x processor",
    "timeout_s": 120,
    "sweep": [
        {"scenario": "attention-kernels", "set": {**_TINY_KERNEL_SHAPE, "kernel": _ALL_KERNELS}},
        {"scenario": "attention-kernels",
         "set": {**_TINY_KERNEL_SHAPE, "kernel": ["auto", "math"], "batch_size": 8, "q_len": 1, "kv_len": 256, "causal": False}},
        {"scenario": "generate", "model": "tiny", "backend": "hf",
         "set": {"attn_implementation": ["eager", "sdpa"], "kv_cache": ["dynamic", "static"], "compile": False,
                 "processor": ["none", "python"], "batch_size": 4, "num_prompts": 8, "prompt_tokens": 16,
                 "new_tokens": 16, "dtype": "float32"}},
    ],
}

# Kernel cells are short: process start and CUDA init dominate, so the timed part stays brief.
_KERNEL_PROTOCOL = {"warmup": 2, "min_repeats": 10, "min_duration_s": 0.3}
_DECODE_SHAPES = {"batch_size": [16, 256], "q_heads": 16, "kv_heads": 8, "q_len": 1, "kv_len": [512, 2048],
                  "head_dim": 64, "causal": False, "dtype": "bfloat16", **_KERNEL_PROTOCOL}

# The seeds' kernel benchmark: [4,16,2048,64] bf16 causal and the flash-attn test shape [16,32,512,64];
# decode-like: one query over a KV cache of 512 / 2048 positions, batch 16 / 256, GQA 16q / 8kv heads.
SEED_ATTENTION: dict[str, Any] = {
    "name": "seed-attention",
    "description": "SDPA backends and flash-attn on the seeds' shapes and on decode-like shapes",
    "timeout_s": 120,
    "sweep": [
        {"scenario": "attention-kernels",
         "set": {"kernel": _ALL_KERNELS, "batch_size": 4, "q_heads": 16, "kv_heads": 16, "q_len": 2048, "kv_len": 2048,
                 "head_dim": 64, "causal": True, "dtype": "bfloat16", **_KERNEL_PROTOCOL}},
        {"scenario": "attention-kernels",
         "set": {"kernel": _ALL_KERNELS, "batch_size": 16, "q_heads": 32, "kv_heads": 32, "q_len": 512, "kv_len": 512,
                 "head_dim": 64, "causal": True, "dtype": "bfloat16", **_KERNEL_PROTOCOL}},
        # kv heads repeated to 16 before the call (what HF does whenever a mask is present, e.g. static
        # caches): every backend can take it, so the kernels compare on equal work...
        {"scenario": "attention-kernels",
         "set": {**_DECODE_SHAPES, "kernel": _ALL_KERNELS, "gqa": "expand"}},
        # ...and grouped natively (enable_gqa; HF's path without a mask), where dispatch picks the kernel.
        {"scenario": "attention-kernels", "set": {**_DECODE_SHAPES, "kernel": "auto", "gqa": "native"}},
    ],
}

# BENCHMARKING.md's full-model setting: Llama-380M shape, prompt 48 tokens, 1000 new tokens, top-p 0.9.
_SEED_MODEL = {"scenario": "generate", "model": "llama-380m", "backend": "hf"}
_SEED_GENERATE_SET = {"dtype": "bfloat16", "prompt_tokens": 48, "new_tokens": 1000, "do_sample": True, "top_p": 0.9,
                      "batch_size": 16, "num_prompts": 64}

SEED_GENERATE: dict[str, Any] = {
    "name": "seed-generate",
    "description": "Llama-380M shape, 64 prompts, batch 16, 1000 new tokens: every attention variant x dynamic/static",
    "timeout_s": 180,  # the slowest legitimate cell (eager, dynamic) needs about 70 s on an H100/H200
    "sweep": [
        {**_SEED_MODEL, "set": {**_SEED_GENERATE_SET, "attn_implementation": ["eager", "sdpa", "flash_attention_2"],
                                "kv_cache": ["dynamic", "static"]}},
        {**_SEED_MODEL, "set": {**_SEED_GENERATE_SET, "attn_implementation": "sdpa",
                                "sdpa_backend": ["flash", "efficient", "cudnn", "math"], "kv_cache": ["dynamic", "static"]}},
    ],
}

SEED_STATIC_CACHE: dict[str, Any] = {
    "name": "seed-static-cache",
    "description": "static vs dynamic KV cache, with and without the Python processor, batch 16/64/256 (full batches)",
    "sweep": [
        {**_SEED_MODEL, "timeout_s": timeout,
         "set": {**_SEED_GENERATE_SET, "attn_implementation": "sdpa", "kv_cache": ["static", "dynamic"],
                 "processor": ["none", "python"], "batch_size": batch, "num_prompts": prompts}}
        for batch, prompts, timeout in ((16, 64, 180), (64, 128, 180), (256, 256, 300))
    ],
}

PLAN_PRESETS: dict[str, dict[str, Any]] = {
    p["name"]: p for p in (QUICK, SEED_ATTENTION, SEED_GENERATE, SEED_STATIC_CACHE)
}


def get_plan_preset(name: str) -> dict[str, Any]:
    """A deep copy (callers may edit it) of the named plan."""
    try:
        return copy.deepcopy(PLAN_PRESETS[name])
    except KeyError:
        raise ConfigError(f"unknown plan preset {name!r}; choose one of: {', '.join(PLAN_PRESETS)}") from None
