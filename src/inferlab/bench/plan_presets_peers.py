"""The preset `engine-vs-peers`: the engine beside vLLM 0.26 and transformers' own continuous batching on
the issue's cases, and beside vLLM's structured outputs and HF + xgrammar on the conformer workload, every
system in one run directory. On the device it runs as scripts/gpu/lab_sweep.py parts peers-engine-hf,
peers-vllm-generate and peers-rest, one scripts/gpu/device_call.sh each (vLLM's bundle carried in .dev1 and
.dev2: benchmarks/README.md, "Procedure: a device session"), and its conformer rows on 800 requests as the
part peers-conformers, in a run directory of their own.

Unconstrained (generate), the issue's five cases: llama-380m at batch 16 (top-p 0.9) and 256 (top-p 0.9
and 1.0; 48-token prompts, exactly 1000 new tokens) and qwen3-0.6b at batch 256 (29-token prompts, 600
new; top-p 0.9 and 1.0), T = 1, top-k off, for `inferlab` and `vllm`; `hf-continuous` on llama-380m b256
top-p 0.9 and qwen3-0.6b b256 top-p 1.0 (its cells are the preset's slowest). One batch of prompts per call (num_prompts = batch_size), timed
for >= 3 s and cut at 6 s (at least one call); start-up (vLLM's compile and graph capture, our engine's
capture) is load_s / first_call_s, apart. hf-continuous warms up over the full length (warmup_steps=0):
its CUDA graphs are captured per padded KV size as the KV grows, so a short warm-up would leave captures
inside the timed call.

Conformers (constrained): qwen3-0.6b with the qwen3-chem tokenizer, the first 400 NCI first_5K molecules
with 20-50 heavy atoms that fit the context (the conformer-pipeline preset's molecules), K = 8 (3,200
requests), top-p 1.0 at T = 1, profile v3-fixed4, one call over all requests with 256 rows refilled as
they finish: `inferlab` (the constraint on the GPU), `vllm` with structured_outputs xgrammar and guidance
(one regex per request). `hf-xgrammar` runs the first 32 requests (4 molecules x 8) in one batch of 32:
it is a Python loop per row per step, so its rate is measured on a prefix (the row says so).

Estimates (H100/H200, backends/estimates.py; `lab_sweep.py --estimate --parts peers-engine-hf
peers-vllm-generate peers-rest` prints them): ~3.6 min for the engine's cells, ~6.4 for hf-continuous (its
paged SDPA without flash-attn grows with batch x context: a guess), ~7.6 for vLLM's generate cells
(start-up ~70 s each), ~8.1 for the peers' conformer cells: ~26 min, three calls of <= 9 minutes, a fourth
if the guesses are short (each call resumes where the last stopped).
"""

from __future__ import annotations

from typing import Any

_TIMING = {"warmup": 1, "min_repeats": 1, "min_duration_s": 3.0, "max_duration_s": 6.0}
_SAMPLING = {"dtype": "bfloat16", "do_sample": True, "temperature": 1.0, "top_k": 0}
_LLAMA = {"prompt_tokens": 48, "new_tokens": 1000}
_QWEN = {"prompt_tokens": 29, "new_tokens": 600}
# the five cases: (model, shape, batch, top-p)
_CASES = [("llama-380m", _LLAMA, 16, 0.9), ("llama-380m", _LLAMA, 256, 0.9), ("llama-380m", _LLAMA, 256, 1.0),
          ("qwen3-0.6b", _QWEN, 256, 0.9), ("qwen3-0.6b", _QWEN, 256, 1.0)]
# transformers' continuous batching on two of them (its cells are the slowest of the preset: see Estimates)
_HF_CONTINUOUS_CASES = [_CASES[1], _CASES[4]]

_CONFORMERS = {"num_molecules": 400, "num_conformers": 8, "min_heavy_atoms": 20, "max_heavy_atoms": 50,
               "assign_stereo": True, "profile": "v3-fixed4", "sampling": "top-p", "dtype": "bfloat16", "warmup": 1,
               "min_repeats": 1}  # the conformer-pipeline preset's molecules
_ALL_REQUESTS = {"max_requests": 0, "batch_size": 3200}


def _generate_sweeps() -> list[dict[str, Any]]:
    def sweep(backend: str, case: tuple, extra: dict[str, Any]) -> dict[str, Any]:
        model, shape, batch, top_p = case
        return {"scenario": "generate", "model": model, "backend": backend,
                "set": {**_SAMPLING, **_TIMING, **shape, "batch_size": batch, "num_prompts": batch, "top_p": top_p,
                        **extra}}

    return ([sweep(backend, case, {}) for backend in ("inferlab", "vllm") for case in _CASES]
            + [sweep("hf-continuous", case, {"warmup_steps": 0}) for case in _HF_CONTINUOUS_CASES])


ENGINE_VS_PEERS: dict[str, Any] = {
    "name": "engine-vs-peers",
    "description": "the engine beside vLLM and HF continuous batching (llama-380m b16/b256, qwen3-0.6b b256, top-p "
                   "0.9/1.0) and beside vLLM structured outputs (xgrammar, guidance) and HF + xgrammar on 400 "
                   "drug-sized NCI molecules x 8",
    "timeout_s": 300,
    "sweep": [
        *_generate_sweeps(),
        {"scenario": "constrained", "model": "qwen3-0.6b", "backend": "inferlab", "timeout_s": 420,
         "set": {**_CONFORMERS, **_ALL_REQUESTS, "slots": 256}},
        {"scenario": "constrained", "model": "qwen3-0.6b", "backend": "vllm", "timeout_s": 480,
         "set": {**_CONFORMERS, **_ALL_REQUESTS, "slots": 256, "structured_outputs": ["xgrammar", "guidance"]}},
        {"scenario": "constrained", "model": "qwen3-0.6b", "backend": "hf-xgrammar", "timeout_s": 300,
         "set": {**_CONFORMERS, "max_requests": 32, "batch_size": 32, "kv_cache": "dynamic"}},
    ],
}
