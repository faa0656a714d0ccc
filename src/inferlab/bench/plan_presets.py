"""Named plans (the same schema as a TOML plan, see plan.py): `quick` for a CPU smoke run of a few
minutes (five of the ten scenarios, each on transformers and where it has one on the engine), the seed reproductions of BENCHMARKING.md for one GPU session (attention and generate here;
classify, hidden states and the conformer baseline in plan_presets_workloads.py), and the registry.

GPU budget (one H100/H200; `inferlab bench --list` prints each preset's estimate, docs/lab.md explains
the cuts): seed-attention ~2 min (26 cells, 4 of them known unavailable without flash-attn),
seed-generate ~6 min (11 cells), seed-static-cache ~7 min (12 cells, 2 shared with seed-generate).
What keeps them short without changing what they measure: warm-up calls stop after 16 decode steps
with every shape kept (the same graphs compile), a cell stops timing once 6 s of calls are timed (one
call of 1000 tokens at batch 16 takes ~10 s with a dynamic cache; every batch has the same shape), a
missing package is known before a process starts, the Python-processor twins of seed-static-cache skip
the kernel profile, forced SDPA math (measured at kernel level) and forced efficient with a static
cache (in no seed table) are left out, and the decode-shape grid of the kernel benchmark keeps its
corners.
Every cell has a timeout, so a hang costs at most that; `--limit-seconds` stops launching cells when a
budget is spent and a rerun resumes.
"""

from __future__ import annotations

import copy
from typing import Any

from inferlab.bench.plan_presets_conformers import CONFORMER_PIPELINE, CONFORMER_QUALITY, CONFORMER_SOAK, SCALE_OUT
from inferlab.bench.plan_presets_engine import (CONFORMER_ENGINE, DECODE_ROOFLINE, ENGINE_SPEED, ENGINE_VS_HF,
                                               PACKED_STEP_PROFILE, STEERING)
from inferlab.bench.plan_presets_peers import ENGINE_VS_PEERS
from inferlab.bench.plan_presets_workloads import (CONFORMER_BASELINE, SEED_CLASSIFY, SEED_CLASSIFY_MATRIX,
                                                   SEED_HIDDEN_STATES)
from inferlab.errors import ConfigError

_TINY_KERNEL_SHAPE = {"batch_size": 2, "q_heads": 4, "kv_heads": 2, "q_len": 128, "kv_len": 128, "head_dim": 32,
                      "causal": True, "dtype": "float32", "min_repeats": 5, "min_duration_s": 0.1, "warmup": 2}
_ALL_KERNELS = ["auto", "flash", "efficient", "cudnn", "math", "flash_attn"]

_TINY_GENERATE = {"compile": False, "batch_size": 4, "num_prompts": 8, "prompt_tokens": 16, "new_tokens": 16,
                  "dtype": "float32", "warmup_steps": 4}
_TINY_TEXT_PACKED = {"min_tokens": 8, "max_tokens": 120, "dtype": "float32", "min_repeats": 5, "min_duration_s": 0.2,
                     "max_duration_s": 0.5, "warmup": 1}  # the engine packs rows: no batch_size
_TINY_TEXT = {**_TINY_TEXT_PACKED, "batch_size": 4}

# The scenarios quick leaves out: each needs GPU-sized work to mean anything, conformer-quality a trained model
# and its references too (their presets: `bench --list`).
QUICK_LEAVES_OUT = ("batching", "decode-profile", "steering", "conformer-pipeline", "conformer-quality")

QUICK: dict[str, Any] = {
    "name": "quick",
    "description": "tiny models, CPU-sized: attention kernels; generate, classify, hidden states and constrained "
                   "conformers on transformers and on the engine; not " + ", ".join(QUICK_LEAVES_OUT) + " (GPU-sized: "
                   "their presets)",
    "timeout_s": 120,
    # one torch thread: on a small shared CPU, threads spinning against each other cost more than they give
    "defaults": {scenario: {"cpu_threads": 1}
                 for scenario in ("attention-kernels", "generate", "classify", "hidden-states", "constrained")},
    "sweep": [
        {"scenario": "attention-kernels", "set": {**_TINY_KERNEL_SHAPE, "kernel": ["auto", "math", "cudnn", "flash_attn"]}},
        {"scenario": "attention-kernels",
         "set": {**_TINY_KERNEL_SHAPE, "kernel": "auto", "batch_size": 8, "q_len": 1, "kv_len": 256, "causal": False}},
        {"scenario": "generate", "model": "tiny", "backend": "hf",
         "set": {**_TINY_GENERATE, "attn_implementation": "sdpa", "kv_cache": ["dynamic", "static"],
                 "processor": "none"}},
        {"scenario": "generate", "model": "tiny", "backend": "hf",
         "set": {**_TINY_GENERATE, "attn_implementation": "eager", "kv_cache": "dynamic", "processor": "python"}},
        {"scenario": "generate", "model": "tiny", "backend": "inferlab",
         "set": {k: v for k, v in _TINY_GENERATE.items() if k != "compile"}},
        {"scenario": "classify", "model": "tiny-qwen2-cls", "set": {**_TINY_TEXT, "num_samples": 16}},
        {"scenario": "classify", "model": "tiny-qwen2-cls", "backend": "inferlab",
         "set": {**_TINY_TEXT_PACKED, "num_samples": 16, "check_texts": 16}},
        {"scenario": "hidden-states", "model": "tiny", "set": {**_TINY_TEXT, "num_prompts": 16, "layers": "1,-1",
                                                              "pool": "mean"}},
        {"scenario": "hidden-states", "model": "tiny", "backend": "inferlab",
         "set": {**_TINY_TEXT_PACKED, "num_prompts": 16, "layers": "1,-1", "pool": "mean"}},
        # the seeds' Python processor beside the engine's constraint (torch on a CPU), on the same small molecules
        *({"scenario": "constrained", "model": "tiny-qwen3", "backend": backend,
           "set": {"num_molecules": 2, "num_conformers": 1, "batch_size": 2, "sampling": "greedy", "dtype": "float32",
                   "warmup_steps": 4, "max_heavy_atoms": 6, **extra}}
          for backend, extra in (("hf", {"kv_cache": "dynamic"}), ("inferlab", {}))),
    ],
}

# Kernel cells are short: process start and CUDA init dominate, so the timed part stays brief.
_KERNEL_PROTOCOL = {"warmup": 2, "min_repeats": 10, "min_duration_s": 0.3}
_DECODE = {"q_heads": 16, "kv_heads": 8, "q_len": 1, "head_dim": 64, "causal": False, "dtype": "bfloat16",
           **_KERNEL_PROTOCOL}
# Two corners of the decode grid (a small batch over a short cache, a large batch over a long one) say
# what the full 2 x 2 grid said about the kernels' order, in half the cells.
_DECODE_CORNERS = ({"batch_size": 16, "kv_len": 512}, {"batch_size": 256, "kv_len": 2048})

# The seeds' kernel benchmark: [4,16,2048,64] bf16 causal and the flash-attn test shape [16,32,512,64];
# decode-like: one query over a KV cache (batch 16 over 512 positions, batch 256 over 2048), GQA 16q / 8kv.
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
        *({"scenario": "attention-kernels", "set": {**_DECODE, **corner, "kernel": _ALL_KERNELS, "gqa": "expand"}}
          for corner in _DECODE_CORNERS),
        # ...and grouped natively (enable_gqa; HF's path without a mask), where dispatch picks the kernel.
        *({"scenario": "attention-kernels", "set": {**_DECODE, **corner, "kernel": "auto", "gqa": "native"}}
          for corner in _DECODE_CORNERS),
    ],
}

# BENCHMARKING.md's full-model setting: Llama-380M shape, prompt 48 tokens, 1000 new tokens, top-p 0.9.
_SEED_MODEL = {"scenario": "generate", "model": "llama-380m", "backend": "hf"}
# A call of 1000 tokens at batch 16 takes ~10 s with a dynamic cache (~3.3 s static): a few seconds of
# such calls (thousands of decode steps) is a long enough timed run (max_duration_s: one dynamic call, two
# static ones), and the warm-up stops after warmup_steps=16 (the default) with every shape kept.
_SEED_GENERATE_SET = {"dtype": "bfloat16", "prompt_tokens": 48, "new_tokens": 1000, "do_sample": True, "top_p": 0.9,
                      "batch_size": 16, "num_prompts": 64, "max_duration_s": 6.0}

SEED_GENERATE: dict[str, Any] = {
    "name": "seed-generate",
    "description": "Llama-380M shape, 64 prompts, batch 16, 1000 new tokens: every attention variant x dynamic/static",
    # the slowest legitimate cells (eager dynamic ~25 s; static with a cold compile ~50-60 s) stay well
    # inside; a hang (the seeds saw cudnn hang with a dynamic cache) costs 2 minutes
    "timeout_s": 120,
    "sweep": [
        {**_SEED_MODEL, "set": {**_SEED_GENERATE_SET, "attn_implementation": ["eager", "sdpa", "flash_attention_2"],
                                "kv_cache": ["dynamic", "static"]}},
        # SDPA forced to one backend, as the seeds did: flash and cudnn with both caches (the seeds' findings
        # are about them), efficient with the dynamic cache (the seeds' table); math is measured at kernel
        # level in seed-attention and is nobody's choice for a full model.
        {**_SEED_MODEL, "set": {**_SEED_GENERATE_SET, "attn_implementation": "sdpa",
                                "sdpa_backend": ["flash", "cudnn"], "kv_cache": ["dynamic", "static"]}},
        {**_SEED_MODEL, "set": {**_SEED_GENERATE_SET, "attn_implementation": "sdpa", "sdpa_backend": "efficient",
                                "kv_cache": "dynamic"}},
    ],
}

# The Python processor does not change the forward, so its cells skip the kernel profile (their twin
# without the processor says which kernel ran) and, with inductor's on-disk cache, reuse its compiled graph.
SEED_STATIC_CACHE: dict[str, Any] = {
    "name": "seed-static-cache",
    "description": "static vs dynamic KV cache, with and without the Python processor, batch 16/64/256 (full batches)",
    "sweep": [
        {**_SEED_MODEL, "timeout_s": timeout,
         "set": {**_SEED_GENERATE_SET, "attn_implementation": "sdpa", "kv_cache": ["static", "dynamic"],
                 "processor": processor, "profile_kernels": processor == "none", "batch_size": batch,
                 "num_prompts": prompts}}
        for batch, prompts, timeout in ((16, 64, 120), (64, 128, 150), (256, 256, 200))
        for processor in ("none", "python")
    ],
}

PLAN_PRESETS: dict[str, dict[str, Any]] = {
    p["name"]: p for p in (QUICK, SEED_ATTENTION, SEED_GENERATE, SEED_STATIC_CACHE, SEED_CLASSIFY, SEED_CLASSIFY_MATRIX,
                           SEED_HIDDEN_STATES, CONFORMER_BASELINE, ENGINE_VS_HF, ENGINE_SPEED, CONFORMER_ENGINE,
                           CONFORMER_PIPELINE, CONFORMER_SOAK, SCALE_OUT, ENGINE_VS_PEERS, STEERING, DECODE_ROOFLINE,
                           PACKED_STEP_PROFILE, CONFORMER_QUALITY)
}


def get_plan_preset(name: str) -> dict[str, Any]:
    """A deep copy (callers may edit it) of the named plan."""
    try:
        return copy.deepcopy(PLAN_PRESETS[name])
    except KeyError:
        raise ConfigError(f"unknown plan preset {name!r}; choose one of: {', '.join(PLAN_PRESETS)}") from None
