"""Named plans for the workloads beyond plain generation, sized for one GPU session (estimates on one
H100/H200; `inferlab bench --list` prints them):

- seed-classify (~4 min): seed 004's job (the Qwen2-0.5B-shaped classifier, 256 texts of 131-5,557 tokens,
  the seed's 524-22,229 characters, log-uniformly spread, bf16) on the three backends: transformers at its
  best (length-sorted batches, SDPA, batch 16 / 32 / 64 / 128), the engine's packed prefill (bf16 and FP8 weights,
  both checked against transformers' labels on every text; with a 50 ms latency cap; and on texts of
  1,024-5,557 tokens, the compute-bound case), and vLLM's pooling runner (the whole sample in one call); then
  the trained classifier (qwen2-cls-aromatic) on 990 held-out molecules, the engine in bf16 and FP8 weights
  checked against transformers: label agreement where margins are real, and accuracy.
- seed-classify-matrix (~4-5 min, 21 cells of ~12 s: process, load and quantization dominate): seed 004's
  own test matrix on transformers: batch 1/8/16/32 x fp16 vs int8 x flash off/on (eager / sdpa: the seed's
  "flash" is PyTorch SDPA), then batch 64, bf16 and fp8 at batch 32, and one length-bucketed cell against the
  seeds' consecutive batches.
- seed-hidden-states (~3 min): pooled activations of 512 prompts of 100-1,000 tokens on the Llama-380M shape
  (the checkpoint seed-generate also builds): transformers (batch 16 / 64 / 128) and the engine (last / mean
  pooling) on layers 8 and -1, then the final layer alone, mean-pooled, on the three backends (vLLM's
  pooling runner gives only that one).
- conformer-baseline (~3 min): the seeds' HF generate + per-token Python processor on the Qwen3-0.6B
  shape with the qwen3-chem tokenizer, top-p 1.0 at T = 1: batch 32 with a dynamic cache (the seeds'
  setting) and batch 256 with dynamic and static caches, each on the same first 256 of the 2,000
  requests (1,000 NCI molecules x 2): the rate is what is compared with the engine.

Torchao (int8, fp8) must be importable on the device, else those cells are `unavailable` rows (known
before a process starts); docs/workloads.md says how to carry its wheel. vLLM cells need vLLM (the .dev2
carry: benchmarks/README.md); scripts/gpu/lab_sweep.py runs them as parts of their own.
"""

from __future__ import annotations

from typing import Any

# Short cells: process start and load dominate, so each times at most 2 s of batches after 8 at least.
_TEXT_PROTOCOL = {"warmup": 1, "min_repeats": 8, "min_duration_s": 1.0, "max_duration_s": 2.0}
_SEED_004_TEXTS = {"num_samples": 256, "min_tokens": 131, "max_tokens": 5557, "length_distribution": "log-uniform",
                   **_TEXT_PROTOCOL}
_CLASSIFIER = {"scenario": "classify", "model": "qwen2-cls"}
_BF16 = {**_SEED_004_TEXTS, "dtype": "bfloat16"}
# The trained classifier on its held-out SMILES (997 rows of 6-196 tokens), every text checked
_MOLECULES = {"texts": "nci-aromatic-rings", "num_samples": 990, "min_tokens": 1, "max_tokens": 512,
              "dtype": "bfloat16", "check_texts": 990, **_TEXT_PROTOCOL}

SEED_CLASSIFY: dict[str, Any] = {
    "name": "seed-classify",
    "description": "seed 004's job on qwen2-cls, bf16: transformers at its best (sorted batches 16-128, sdpa), the "
                   "engine (bf16, fp8, a 50 ms latency cap, texts >= 1k tokens; profiled by kernel family), vLLM's "
                   "pooling runner; the trained classifier's labels (bf16, fp8) on held-out molecules",
    "timeout_s": 240,
    "sweep": [
        {**_CLASSIFIER, "backend": "hf", "set": {**_BF16, "bucket_by_length": True, "attn_implementation": "sdpa",
                                                  "batch_size": [16, 32, 64, 128]}},
        {**_CLASSIFIER, "backend": "inferlab", "set": {**_BF16, "weights": ["auto", "fp8"], "check_texts": 256,
                                                        "profile": True}},
        {**_CLASSIFIER, "backend": "inferlab", "set": {**_BF16, "max_batch_latency_ms": 50.0}},
        {**_CLASSIFIER, "backend": "inferlab", "set": {**_BF16, "min_tokens": 1024, "profile": True}},
        {**_CLASSIFIER, "backend": "vllm", "set": {**_BF16, "check_texts": 256}},
        {"scenario": "classify", "model": "qwen2-cls-aromatic", "backend": "inferlab",
         "set": {**_MOLECULES, "weights": ["auto", "fp8"]}},
    ],
}

_SEED_004_MATRIX = {**_SEED_004_TEXTS, "bucket_by_length": False}

SEED_CLASSIFY_MATRIX: dict[str, Any] = {
    "name": "seed-classify-matrix",
    "description": "seed 004's matrix on the qwen2-cls shape (transformers): batch 1-32 x fp16/int8 x eager/sdpa, "
                   "plus batch 64, bf16, fp8 and length bucketing",
    "timeout_s": 150,
    "sweep": [
        {**_CLASSIFIER, "set": {**_SEED_004_MATRIX, "dtype": "float16", "quantization": ["none", "int8"],
                                "attn_implementation": ["eager", "sdpa"], "batch_size": [1, 8, 16, 32]}},
        {**_CLASSIFIER, "set": {**_SEED_004_MATRIX, "dtype": "float16", "quantization": ["none", "int8"],
                                "attn_implementation": "sdpa", "batch_size": 64}},
        {**_CLASSIFIER, "set": {**_SEED_004_MATRIX, "dtype": "bfloat16", "quantization": ["none", "fp8"],
                                "attn_implementation": "sdpa", "batch_size": 32}},
        {**_CLASSIFIER, "set": {**_SEED_004_MATRIX, "dtype": "float16", "quantization": "none",
                                "attn_implementation": "sdpa", "batch_size": 32, "bucket_by_length": True}},
    ],
}

_PROMPTS = {"num_prompts": 512, "min_tokens": 100, "max_tokens": 1000, "length_distribution": "uniform",
            "layers": "8,-1", "dtype": "bfloat16", **_TEXT_PROTOCOL}
_LLAMA = {"scenario": "hidden-states", "model": "llama-380m"}
_FINAL_MEAN = {**_PROMPTS, "layers": "-1", "pool": "mean"}

SEED_HIDDEN_STATES: dict[str, Any] = {
    "name": "seed-hidden-states",
    "description": "pooled hidden states of 512 prompts on the llama-380m shape: transformers vs the engine on layers "
                   "8 and last; the final layer mean-pooled on transformers, the engine and vLLM",
    "timeout_s": 240,
    "sweep": [
        {**_LLAMA, "backend": "hf", "set": {**_PROMPTS, "batch_size": [16, 64, 128], "pool": "mean"}},
        {**_LLAMA, "backend": "inferlab", "set": {**_PROMPTS, "pool": ["last", "mean"], "check_texts": 64,
                                                   "profile": True}},
        {**_LLAMA, "backend": "hf", "set": {**_FINAL_MEAN, "batch_size": [64, 128]}},
        {**_LLAMA, "backend": "inferlab", "set": _FINAL_MEAN},
        {**_LLAMA, "backend": "vllm", "set": {**_FINAL_MEAN, "check_texts": 64}},
    ],
}

_CONFORMERS = {"num_molecules": 1000, "num_conformers": 2, "max_requests": 256, "sampling": "top-p",
               "profile": "v3-fixed4", "dtype": "bfloat16"}

CONFORMER_BASELINE: dict[str, Any] = {
    "name": "conformer-baseline",
    "description": "the seeds' HF + Python-processor conformer baseline on qwen3-0.6b: b32 dynamic (their setting), "
                   "b256 dynamic and static, on the first 256 requests of 1000 NCI molecules x 2",
    "timeout_s": 300,
    "sweep": [
        {"scenario": "constrained", "model": "qwen3-0.6b", "backend": "hf",
         "set": {**_CONFORMERS, "batch_size": 32, "kv_cache": "dynamic"}},
        {"scenario": "constrained", "model": "qwen3-0.6b", "backend": "hf",
         "set": {**_CONFORMERS, "batch_size": 256, "kv_cache": ["dynamic", "static"]}},
    ],
}
