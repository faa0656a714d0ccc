"""Named plans that put our engine beside transformers in one run (estimates on one H100/H200):

- engine-vs-hf (~8 min): BENCHMARKING.md's setting (llama-380m, 48-token prompts, exactly 1000 new
  tokens, top-p 0.9): HF's best configurations (sdpa with a compiled static cache at batch 16 and 256, and
  sdpa with a dynamic cache at batch 256, which the seed-static-cache run found faster there) against the
  engine at batch 16 / 64 / 256; the Qwen3-0.6B shape at batch 256 (29-token prompts, 600 new tokens,
  top-p 1.0, as BENCHMARKING.md measured it); and continuous against static batching in the engine with
  output lengths drawn from 200-1000.
- engine-speed (~4.5 min by the estimates, plus building gemma-2b's checkpoint once): the
  engine alone, what its speed checks measure: llama-380m at batch 16 / 64 / 256
  (48-token prompts, exactly 1000 new tokens) with top-p 0.9 and with plain sampling (top-p 1.0), and at
  batch 16 with cuBLAS for every projection (the A/B of the skinny Triton GEMM); qwen3-0.6b at batch 256
  (29-token prompts, 600 new) with the model-dtype and the FP8 KV cache; gemma-2b at batch 64 (150 new,
  greedy and top-p 0.9); continuous vs static batching. The decode step kernel family by kernel family:
  decode-roofline.
- conformer-engine (~5 min): the engine on the conformer workload of conformer-baseline (qwen3-0.6b with
  the qwen3-chem tokenizer, 1,000 NCI molecules x 2 = 2,000 requests, 256 rows refilled continuously):
  constrained with top-p 1.0 at T = 1 and greedy, and unconstrained at the constrained pass's output
  lengths (the step's cost of the constraint). Run it into conformer-baseline's run directory so the
  report shows the engine and the seeds' HF baseline side by side.
- decode-roofline (~7 min): one decode step against its bound, per kernel family (scenario decode-profile), at
  qwen3-0.6b (context 330: the mean of 29-token prompts + 600 new tokens; top-p 1.0, the plain race; 1024, 256
  and 16 rows) and llama-380m (context 548: 48 + 1000 / 2; top-p 0.9, the rejection rounds; 256 and 16 rows), the bf16 and the
  fp8 KV cache; then the whole engine at qwen3-0.6b, 256 rows, 600 new tokens, both caches (generate, backend
  inferlab: its decode GB/s against the copy bandwidth). One device call:
  `inferlab bench --preset decode-roofline --limit-seconds 400`.
- packed-step-profile (~2.5 min, 8 cells of 16-19 s; the lab's estimate says 6): the constrained decode step per kernel family (scenario
  decode-profile, constraint=on: conformer programs of drug-sized NCI molecules) at qwen3-0.6b, context 330,
  top-p 1.0, 256 and 1024 rows, the bf16 and the fp8 KV cache, one token per row (forced_run_tokens 0) beside
  the packed step of forced tokens in bulk (4, the default budget: an eighth of the rows), so the families
  say where the packed step's extra time goes. One device call: `inferlab bench --preset packed-step-profile
  --limit-seconds 400`; one pair: `--only batch_size=256 --only kv_dtype=auto`.
- steering (~6.5 min with the gemma-2b checkpoint built once): seed 003's job on the gemma-2b shape:
  1,000 prompts of 400-1,200 tokens (the seed's prompts averaged 847, at most 1,205), 150 new tokens,
  sampling at T = 1, a steering vector after layer 6 and the mean hidden states of layers 6 and 17
  collected; the engine at batch 64 and 256, each cell timing plain / steer / collect / steer+collect
  passes over all 1,000 prompts (the steering cost is its steered vs plain decode step) and checking
  its activations against transformers on 4 prompts; transformers + forward hooks (sdpa, bf16, dynamic
  cache: hooks need no compilation there) at batch 64 and 256 on the first 512 prompts (cut to keep the
  preset in one 9-minute device call; a rate over 512 prompts of the same length distribution compares),
  plain and steer+collect.
"""

from __future__ import annotations

from typing import Any

_SEED_SETTING = {"dtype": "bfloat16", "prompt_tokens": 48, "new_tokens": 1000, "do_sample": True, "top_p": 0.9,
                 "warmup": 1, "min_repeats": 1, "min_duration_s": 3.0, "max_duration_s": 6.0}
_LLAMA = {"scenario": "generate", "model": "llama-380m"}
_QWEN_SETTING = {**_SEED_SETTING, "prompt_tokens": 29, "new_tokens": 600, "top_p": 1.0, "batch_size": 256,
                 "num_prompts": 256}
_QWEN = {"scenario": "generate", "model": "qwen3-0.6b"}


def _batches(*sizes: int) -> list[dict[str, Any]]:
    return [{"batch_size": b, "num_prompts": b} for b in sizes]


ENGINE_VS_HF: dict[str, Any] = {
    "name": "engine-vs-hf",
    "description": "the inferlab engine beside HF's best configurations (llama-380m b16/64/256, qwen3-0.6b b256), "
                   "and continuous vs static batching",
    "timeout_s": 240,
    "sweep": [
        *({**_LLAMA, "backend": "hf", "set": {**_SEED_SETTING, **b, "attn_implementation": "sdpa", "kv_cache": "static"}}
          for b in _batches(16, 256)),
        {**_LLAMA, "backend": "hf", "set": {**_SEED_SETTING, **_batches(256)[0], "attn_implementation": "sdpa",
                                            "kv_cache": "dynamic"}},
        *({**_LLAMA, "backend": "inferlab", "set": {**_SEED_SETTING, **b}} for b in _batches(16, 64, 256)),
        {**_QWEN, "backend": "hf", "set": {**_QWEN_SETTING, "attn_implementation": "sdpa",
                                           "kv_cache": ["static", "dynamic"]}},
        {**_QWEN, "backend": "inferlab", "set": _QWEN_SETTING},
        {"scenario": "batching", "model": "llama-380m",
         "set": {"batching": ["continuous", "static"], "batch_size": 128, "num_requests": 512, "prompt_tokens": 48,
                 "min_new_tokens": 200, "max_new_tokens": 1000, "temperature": 1.0, "top_p": 1.0}},
    ],
}

_GEMMA = {"scenario": "generate", "model": "gemma-2b"}

ENGINE_SPEED: dict[str, Any] = {
    "name": "engine-speed",
    "description": "the engine alone: llama-380m b16/64/256 (top-p 0.9, plain), cuBLAS A/B, qwen3-0.6b b256 bf16 "
                   "vs fp8 KV cache, gemma-2b b64, continuous vs static batching",
    "timeout_s": 240,
    "sweep": [
        *({**_LLAMA, "backend": "inferlab", "set": {**_SEED_SETTING, **b, "top_p": [0.9, 1.0]}}
          for b in _batches(16, 64, 256)),
        {**_LLAMA, "backend": "inferlab", "set": {**_SEED_SETTING, **_batches(16)[0], "gemm": "cublas"}},
        {**_QWEN, "backend": "inferlab", "set": {**_QWEN_SETTING, "kv_dtype": ["auto", "fp8"]}},
        {**_GEMMA, "backend": "inferlab", "set": {**_SEED_SETTING, **_batches(64)[0], "new_tokens": 150,
                                                  "do_sample": [False, True]}},
        {"scenario": "batching", "model": "llama-380m",
         "set": {"batching": ["continuous", "static"], "batch_size": 128, "num_requests": 512, "prompt_tokens": 48,
                 "min_new_tokens": 200, "max_new_tokens": 1000, "temperature": 1.0, "top_p": 1.0}},
    ],
}

_CONFORMERS = {"num_molecules": 1000, "num_conformers": 2, "max_requests": 0, "profile": "v3-fixed4",
               "dtype": "bfloat16", "batch_size": 2000, "slots": 256}

_STEERING = {"num_prompts": 1000, "prompt_min_tokens": 400, "prompt_max_tokens": 1200, "new_tokens": 150,
             "dtype": "bfloat16", "do_sample": True, "temperature": 1.0, "top_p": 1.0, "steer_layer": 6,
             "steer_scale": 8.0, "collect_layers": "6:-1", "collect_pool": "mean", "min_repeats": 1}

STEERING: dict[str, Any] = {
    "name": "steering",
    "description": "seed 003's steering job on gemma-2b (1,000 prompts, 150 new tokens, a steering vector, mean "
                   "hidden states): the engine per mode at batch 64 / 256 vs transformers + forward hooks",
    "timeout_s": 300,
    "sweep": [
        {"scenario": "steering", "model": "gemma-2b", "backend": "inferlab",
         "set": {**_STEERING, "batch_size": [64, 256]}},
        {"scenario": "steering", "model": "gemma-2b", "backend": "hf",
         "set": {**_STEERING, "batch_size": [64, 256], "num_prompts": 512, "modes": "plain:steer+collect",
                 "check_prompts": 0, "attn_implementation": "sdpa", "kv_cache": "dynamic"}},
    ],
}

CONFORMER_ENGINE: dict[str, Any] = {
    "name": "conformer-engine",
    "description": "the engine on 1000 NCI molecules x 2 with qwen3-0.6b: constrained (top-p 1.0, greedy) and "
                   "unconstrained at the same lengths, 256 rows",
    "timeout_s": 420,
    "sweep": [
        {"scenario": "constrained", "model": "qwen3-0.6b", "backend": "inferlab",
         "set": {**_CONFORMERS, "sampling": ["top-p", "greedy"], "constraint": "on"}},
        {"scenario": "constrained", "model": "qwen3-0.6b", "backend": "inferlab",
         "set": {**_CONFORMERS, "sampling": "top-p", "constraint": "off"}},
    ],
}


_ROOFLINE = {"dtype": "bfloat16", "temperature": 1.0, "batch_size": [256, 16], "kv_dtype": ["auto", "fp8"]}

DECODE_ROOFLINE: dict[str, Any] = {
    "name": "decode-roofline",
    "description": "one decode step against its bound per kernel family (qwen3-0.6b at 1024, 256 and 16 rows, "
                   "llama-380m at 256 and 16, bf16 and fp8 KV), and the engine's qwen3-0.6b bandwidth at 256 rows, 600 new tokens",
    "timeout_s": 180,
    "sweep": [
        {"scenario": "decode-profile", "model": "qwen3-0.6b",
         "set": {**_ROOFLINE, "batch_size": [1024, 256, 16], "context_tokens": 330, "top_p": 1.0}},
        {"scenario": "decode-profile", "model": "llama-380m", "set": {**_ROOFLINE, "context_tokens": 548, "top_p": 0.9}},
        {**_QWEN, "backend": "inferlab", "set": {**_QWEN_SETTING, "kv_dtype": ["auto", "fp8"]}},
    ],
}

PACKED_STEP_PROFILE: dict[str, Any] = {
    "name": "packed-step-profile",
    "description": "the constrained decode step per kernel family, one token per row beside the packed step of "
                   "forced runs (4 tokens): qwen3-0.6b at 256 and 1024 rows, bf16 and fp8 KV",
    "timeout_s": 180,
    "sweep": [
        {"scenario": "decode-profile", "model": "qwen3-0.6b",
         "set": {**_ROOFLINE, "batch_size": [256, 1024], "context_tokens": 330, "top_p": 1.0, "constraint": "on",
                 "forced_run_tokens": [0, 4]}},
    ],
}
