"""Backend `hf-continuous` of the `generate` scenario: transformers' own continuous batching
(`model.generate_batch`: paged KV cache, a scheduler, CUDA graphs), configured for throughput as its
documentation and source (5.17, the device's version) describe, so it counts as a peer.

The configuration (ContinuousBatchingConfig), and why:
- attention: the model's `attn_implementation`, which transformers turns into its paged form
  (`paged|sdpa`); `flash_attention_2` (where flash-attn is installed) is what its docs recommend: only
  flash gives the decode fast path (`flash_attn_with_kvcache` over a block table). Without it every step
  attends with SDPA over the gathered KV of all rows under a block-diagonal mask, whose cost grows with
  batch x context: the row says which path ran (`hf_continuous.decode_fast_path`);
- CUDA graphs on (`use_cuda_graph=True`): transformers turns them off by itself for attentions that need
  a mask; on, its padding presets (queries to 64 tokens, KV to 16,384) keep the number of graphs small;
- `block_size` 256 (its default; the fast path's block table is counted in blocks), `num_blocks` = every
  row of the batch at full length (prompt + new tokens + one spare block per row, its own sizing rule), so
  all rows stay resident as in every other system's rows (no eviction, no offloading), instead of
  0.9 x free memory; `max_requests_per_batch` = batch_size (all rows decode in one step);
  `max_batch_tokens` 2,048 (at least batch_size) instead of its 8,192: without flash, paged SDPA builds a
  mask of queries x cached tokens, and its graphs are warmed up at the largest (queries, KV) sizes
  (8,192 x ~390k tokens at batch 256 would be a 6 GB mask); a batch of 48-token prompts still prefills in
  a few steps of the ~1,000; `max_blocks_per_request` set from the lengths, so the sizing does not depend
  on which call created the manager;
- `allow_block_sharing=False`: its docs advise it for few short prompts with long generations (ours:
  48 tokens, less than one block, and timed calls repeat the same prompts);
- the manager persists across calls (`persistent_manager=True`): graphs captured once, as a user of a
  long job gets; graphs for longer KV sizes are captured when first met, so warm up over the full length
  (`warmup_steps=0`, as the engine-vs-peers preset does);
- exactly `new_tokens` per row: continuous batching drops `min_new_tokens`, so EOS is suppressed
  (`suppress_tokens`), which is what min_new_tokens == max_new_tokens does in the other rows;
- `seed` = the scenario's seed; `default_compile_level` 0 (its default; knob `compile_level`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterator

from inferlab.bench.backends import estimates, hf_knobs
from inferlab.bench.backends.base import BackendSpec, GenerateSpec, one_call_of
from inferlab.bench.backends.hf_model import HFModelBackend, eos_and_pad, load_causal_lm
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.errors import ConfigError
from inferlab.types import Request, Result, SamplingParams
from inferlab.workloads.backend import finished_result

KNOBS = (
    Knob("attn_implementation", str, "sdpa", "attention, made paged by transformers (flash_attention_2 enables the "
         "decode fast path)", choices=("eager", "sdpa", "flash_attention_2")),
    Knob("cuda_graphs", bool, True, "capture CUDA graphs for the varlen and decode paths"),
    Knob("block_size", int, 256, "tokens per KV block (transformers' default)", minimum=4),
    Knob("max_batch_tokens", int, 2048, "tokens per forward (prefill chunks + decoding rows); at least batch_size",
         minimum=1),
    Knob("compile_level", int, 0, "transformers' default_compile_level (0 = no torch.compile; 1-3 = more compile, "
         "longer warm-up)", choices=(0, 1, 2, 3)),
)
HF_DEFAULT_BLOCK_SIZE = 256


def validate(cell: Cell) -> None:
    c = cell.config
    if c["attn_implementation"] == "flash_attention_2" and c["dtype"] == "float32":
        raise ConfigError("flash_attention_2 runs only bfloat16/float16; set dtype=bfloat16")


def blocks_per_request(prompt_tokens: int, new_tokens: int, block_size: int) -> int:
    """transformers' own rule (initialization.resolve_using_hints): the blocks of the longest request plus
    one, rounded up to an even number."""
    blocks = -(-(prompt_tokens + new_tokens) // block_size) + 1
    return blocks + blocks % 2


def continuous_batching_config(c: dict[str, Any], new_tokens: int, seed: int) -> Any:
    """The ContinuousBatchingConfig of the module docstring (transformers 5.17 calls the block size
    `block_size`, later versions `page_size`)."""
    from transformers.generation import ContinuousBatchingConfig

    per_request = blocks_per_request(c["prompt_tokens"], new_tokens, c["block_size"])
    fields = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    size_name = "page_size" if "page_size" in fields else "block_size"
    return ContinuousBatchingConfig(**{
        size_name: c["block_size"], "num_blocks": c["batch_size"] * per_request,
        "max_batch_tokens": max(c["max_batch_tokens"], c["batch_size"]), "max_requests_per_batch": c["batch_size"],
        "max_blocks_per_request": per_request, "allow_block_sharing": False, "use_cuda_graph": c["cuda_graphs"],
        "default_compile_level": c["compile_level"], "seed": seed,
    })


class HFContinuousBackend(HFModelBackend):
    """Requests of one call share their sampling (one GenerationConfig per call); others are error Results."""

    name = "hf-continuous"

    def __init__(self, config: dict[str, Any], spec: GenerateSpec) -> None:
        super().__init__(config, spec)
        self.pad_token_id: int | None = None
        self.generation_configs: dict[SamplingParams, Any] = {}  # one per sampling setting, made at its first call
        self.cb_config: Any = None

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        self.model = load_causal_lm(self.config["attn_implementation"], model_dir, device, dtype)
        self.eos_token_ids, self.pad_token_id = eos_and_pad(self.model)
        self.cb_config = continuous_batching_config(self.config, self.spec.new_tokens, self.spec.seed)

    def _generation_config(self, sampling: SamplingParams) -> Any:
        """Continuous batching drops min_new_tokens: a request asking for exactly max_new_tokens has EOS
        suppressed instead, which is what min_new_tokens == max_new_tokens does in the other rows."""
        from transformers import GenerationConfig

        from inferlab.bench.backends.hf_generate_options import generate_options

        if sampling not in self.generation_configs:
            exact = sampling.min_new_tokens >= sampling.max_new_tokens
            self.generation_configs[sampling] = GenerationConfig(
                max_new_tokens=sampling.max_new_tokens,
                eos_token_id=min(self.eos_token_ids) if self.eos_token_ids else None, pad_token_id=self.pad_token_id,
                suppress_tokens=(sorted(self.eos_token_ids) or None) if exact else None, **generate_options(sampling),
            )
        return self.generation_configs[sampling]

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        runs, not_run = one_call_of(self, requests)
        if not runs:
            return iter(not_run)
        sampling = runs[0].sampling
        new_tokens = min(stop_after_steps, sampling.max_new_tokens) if stop_after_steps else sampling.max_new_tokens
        results = self.model.generate_batch(
            [list(r.prompt_ids) for r in runs], generation_config=self._generation_config(sampling),
            continuous_batching_config=self.cb_config, persistent_manager=True, progress_bar=False,
            max_new_tokens=new_tokens,
        )
        failed = [r.error for r in results.values() if r.error is not None]
        if failed or len(results) != len(runs):
            raise RuntimeError(f"generate_batch returned {len(results)} of {len(runs)} rows; errors: {failed[:2]}")
        return iter(not_run + [finished_result(r, list(out.generated_tokens), self.eos_token_ids)
                                       for r, out in zip(runs, results.values())])

    def extra_metrics(self) -> dict[str, Any]:
        manager = getattr(self.model, "_cached_continuous_batching_manager", None)
        resolved = getattr(manager, "continuous_batching_config", None)
        if resolved is None:
            return {"hf_continuous": "unknown (no persistent manager was found)"}
        size = getattr(resolved, "page_size", getattr(resolved, "block_size", None))
        return {"hf_continuous": {
            "attention": f"paged|{self.config['attn_implementation']}",
            "block_size": size, "num_blocks": resolved.num_blocks, "max_batch_tokens": resolved.max_batch_tokens,
            "max_requests_per_batch": resolved.max_requests_per_batch,
            "decode_fast_path": bool(resolved.max_blocks_per_request), "cuda_graphs": list(resolved.cuda_graph_booleans),
            "async_batching": resolved.use_async_batching, "compile_level": resolved.default_compile_level,
        }}


BACKEND = BackendSpec(
    "hf-continuous", "transformers' continuous batching (generate_batch): paged KV, CUDA graphs, persistent manager",
    KNOBS, HFContinuousBackend, validate, precheck=hf_knobs.precheck, estimate_s=estimates.hf_continuous,
)
