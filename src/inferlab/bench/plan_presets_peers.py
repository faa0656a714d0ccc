"""The preset `engine-vs-peers`: the engine beside vLLM 0.26 and transformers' own continuous batching on
five generation cases, and beside vLLM's structured outputs and HF + xgrammar on the conformer workload,
every system in one run directory, each peer row beside an engine row of exactly the same work. On the
device it runs as scripts/gpu/lab_sweep.py parts (peers-hf, peers-engine-conformers, peers-xgrammar,
peers-vllm: benchmarks/README.md, "Procedure: a device session").

Unconstrained (generate), five cases: llama-380m at batch 16 (top-p 0.9) and 256 (top-p 0.9
and 1.0; 48-token prompts, exactly 1000 new tokens) and qwen3-0.6b at batch 256 (29-token prompts, 600
new; top-p 0.9 and 1.0), T = 1, top-k off, for `inferlab` and `vllm`; the qwen3-0.6b top-p 1.0 case also
with an FP8 KV cache on both (kv_dtype=fp8: ours e4m3 with per-position scales, vLLM's
kv_cache_dtype="fp8" with one scale per tensor). One batch of prompts per call (num_prompts = batch_size),
at least 3 timed calls (the spread `recommend` judges margins by) and 3 s; start-up (vLLM's compile and
graph capture, our engine's capture) is load_s / first_call_s, apart.

`hf-continuous` (transformers' generate_batch, paged SDPA: the device has no flash-attn) on two of the
cases, llama-380m b16 top-p 0.9 and qwen3-0.6b b256 top-p 1.0: its step attends over every row's KV under
a block-diagonal mask (the cost grows with batch x context), and it warms up over the full length
(warmup_steps=0: its CUDA graphs are captured per padded KV size as the KV grows), so its cells are the
slowest of the preset; one timed call each (its spread is then unknown), 240 s at most, sized so that
they run with the engine's generate cells in one device call (backends/estimates.py).

Conformers (constrained): qwen3-0.6b with the qwen3-chem tokenizer, the conformer-pipeline preset's
molecules (the first 400 NCI first_5K molecules with 20-50 heavy atoms that fit the context, stereo
assigned), K = 8, top-p 1.0 at T = 1, profile v3-fixed4. The first 800 requests (100 molecules x 8) in
one call with 256 rows refilled as they finish: `inferlab` (the constraint on the GPU) with the model
dtype and with fp8, `vllm` with structured outputs xgrammar (model dtype and fp8) and guidance (one regex
per request). `hf-xgrammar` is a Python loop per row per step: it runs the first 32 requests (4 molecules
x 8) in one batch of 32, beside `inferlab` on the same 32 requests with 32 rows.

`lab_sweep.py --estimate --parts peers-hf peers-engine-conformers peers-xgrammar peers-vllm` prints the
parts' estimates (backends/estimates.py); the parts fit several device calls, each resuming where the last
stopped.
"""

from __future__ import annotations

from typing import Any

_TIMING = {"warmup": 1, "min_repeats": 3, "min_duration_s": 3.0}
# cuda_graphs off: with them on, transformers 5.17's generate_batch fails in its warm-up (a sampling logits
# processor copies a pageable CPU tensor during graph capture), so a user runs it without
_HF_CONTINUOUS_TIMING = {"warmup": 1, "min_repeats": 1, "min_duration_s": 3.0, "max_duration_s": 6.0, "warmup_steps": 0,
                         "cuda_graphs": False}
_SAMPLING = {"dtype": "bfloat16", "do_sample": True, "temperature": 1.0, "top_k": 0}
_LLAMA = {"prompt_tokens": 48, "new_tokens": 1000}
_QWEN = {"prompt_tokens": 29, "new_tokens": 600}
# the five generation cases: (model, shape, batch, top-p)
_CASES = [("llama-380m", _LLAMA, 16, 0.9), ("llama-380m", _LLAMA, 256, 0.9), ("llama-380m", _LLAMA, 256, 1.0),
          ("qwen3-0.6b", _QWEN, 256, 0.9), ("qwen3-0.6b", _QWEN, 256, 1.0)]
_FP8_CASE = _CASES[4]  # qwen3-0.6b, 256 rows, 600 new, top-p 1.0: also with an FP8 KV cache
# transformers' continuous batching on two of them (its cells are the slowest of the preset: see the docstring)
_HF_CONTINUOUS_CASES = [_CASES[0], _CASES[4]]

_CONFORMERS = {"num_molecules": 400, "num_conformers": 8, "min_heavy_atoms": 20, "max_heavy_atoms": 50,
               "assign_stereo": True, "profile": "v3-fixed4", "sampling": "top-p", "dtype": "bfloat16", "warmup": 1,
               "min_repeats": 1}  # the conformer-pipeline preset's molecules
_FIRST_800 = {"max_requests": 800, "batch_size": 800, "slots": 256}
_FIRST_32 = {"max_requests": 32, "batch_size": 32}  # hf-xgrammar's prefix, and the engine on the same requests


def _generate(backend: str, case: tuple, extra: dict[str, Any]) -> dict[str, Any]:
    model, shape, batch, top_p = case
    return {"scenario": "generate", "model": model, "backend": backend,
            "set": {**_SAMPLING, **shape, "batch_size": batch, "num_prompts": batch, "top_p": top_p, **extra}}


def _generate_sweeps() -> list[dict[str, Any]]:
    return ([_generate(backend, case, _TIMING) for backend in ("inferlab", "vllm") for case in _CASES]
            + [_generate(backend, _FP8_CASE, {**_TIMING, "kv_dtype": "fp8"}) for backend in ("inferlab", "vllm")]
            + [_generate("hf-continuous", case, _HF_CONTINUOUS_TIMING) | {"timeout_s": 240}
               for case in _HF_CONTINUOUS_CASES])


def _conformers(backend: str, extra: dict[str, Any], timeout_s: int) -> dict[str, Any]:
    return {"scenario": "constrained", "model": "qwen3-0.6b", "backend": backend, "timeout_s": timeout_s,
            "set": {**_CONFORMERS, **extra}}


ENGINE_VS_PEERS: dict[str, Any] = {
    "name": "engine-vs-peers",
    "description": "the engine beside vLLM and HF continuous batching (llama-380m b16/b256, qwen3-0.6b b256, top-p "
                   "0.9/1.0; qwen3-0.6b also with fp8 KV) and beside vLLM structured outputs (xgrammar, guidance) and "
                   "HF + xgrammar on drug-sized NCI molecules x 8",
    "timeout_s": 300,
    "sweep": [
        *_generate_sweeps(),
        _conformers("inferlab", {**_FIRST_800, "kv_dtype": ["auto", "fp8"]}, 300),
        _conformers("inferlab", {**_FIRST_32, "slots": 32}, 240),
        _conformers("vllm", {**_FIRST_800, "structured_outputs": "xgrammar", "kv_dtype": ["auto", "fp8"]}, 300),
        _conformers("vllm", {**_FIRST_800, "structured_outputs": "guidance"}, 300),
        _conformers("hf-xgrammar", {**_FIRST_32, "kv_cache": "dynamic"}, 240),
    ],
}
