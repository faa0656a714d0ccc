"""The "hf" backend of the text workload (workloads/text.py): transformers' `generate` behind the backend
protocol (workloads/backend.py), as the engine is, Requests in and Results out as batches finish, so `inferlab generate` keeps one
input format (prompts, token ids, per-line sampling overrides) and one row format on either path.

It serves any causal LM transformers loads: the fallback for architectures the engine does not implement.
The batching is hf_text's: requests grouped by sampling parameters (generate takes one set per call),
length-sorted, left-padded batches under a row and token budget, OOM back-off (halve and retry; a row that
fails alone is an error Result), every knob passed to generate explicitly.

The engine's configuration (EngineConfig) maps as: model, device, dtype -> loading; max_slots -> rows per batch (default 32); max_seq_len ->
prompt + new tokens per row (default: the model's positions); seed -> the seed of requests without one
(generate draws from torch's global generator, seeded per batch: a sampled row depends on its batch-mates,
greedy rows do not). The engine's other knobs (kernels, graphs, batching mode, memory fraction) do not
apply and are ignored. Constrained requests are refused (constraints run inside the engine only).

Steering and collection (Request.steering, Request.collect) run through forward hooks (hf_steering.py)
with the engine's semantics and checks: a batch may mix steered and unsteered rows (per-row deltas), and
Result.activations holds the same pooled hidden states. Named vectors come from add_steering_vectors.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.engine import (CollectPlan, EngineConfig, SteerEntry, SteeringVectors, resolve_collect, resolve_steering,
                             wants_steering_or_collection)
from inferlab.errors import ConfigError
from inferlab.types import Request, Result, SamplingParams, Timings
from inferlab.workloads.backend import Backend, Supports, dtype_name, error_result
from inferlab.workloads.batching import BatchLimits
from inferlab.workloads.hf_loading import (
    LoadedModel,
    ModelLoadConfig,
    load_hf_model,
    model_max_positions,
)
from inferlab.workloads.hf_steering import HFResidualHooks
from inferlab.workloads.hf_text import Generated, HFTextGenerator
from inferlab.workloads.oom import BackoffRunner, free_device_memory
from inferlab.workloads.rows import TextRow, plan_row_batches

log = logging.getLogger(__name__)

DEFAULT_BATCH_ROWS = 32
MAX_STEERED_LAYERS = 64  # per request; the hooks have no table to size
MAX_BATCH_TOKENS = 262144  # rows x (longest prompt + new tokens) of one batch, as hf_text's default


@dataclass(frozen=True)
class HFBackendSettings:
    batch_rows: int = DEFAULT_BATCH_ROWS
    max_seq_len: int | None = None
    seed: int = 0

    @staticmethod
    def from_engine_config(config: EngineConfig) -> HFBackendSettings:
        return HFBackendSettings(config.max_slots or DEFAULT_BATCH_ROWS, config.max_seq_len, config.seed)


def hf_backend(config: EngineConfig, steering: SteeringVectors | None = None) -> HFTextBackend:
    """BACKENDS["hf"]: `config.model` loaded with AutoModelForCausalLM, sized by the engine's knobs (see above)."""
    backend = HFTextBackend(HFBackendSettings.from_engine_config(config))
    backend.load(str(config.model), config.device, config.dtype)
    if steering is not None:
        backend.add_steering_vectors(steering)
    return backend


@dataclass(frozen=True)
class _Checked:
    ids: list[int]
    steering: list[SteerEntry]
    collect: CollectPlan | None


class HFTextBackend(Backend):
    name = "hf"  # the rows' "backend"
    supports = Supports(steering=True, collect=True)

    def __init__(self, settings: HFBackendSettings) -> None:
        self.settings = settings
        self.loaded: LoadedModel | None = None
        self.named: dict[str, SteeringVectors] = {}  # entry name -> its registered set

    def load(self, model_dir: str | Path, device: Any = "auto", dtype: Any = "auto") -> None:
        from transformers import AutoModelForCausalLM

        load = ModelLoadConfig(str(model_dir), dtype=dtype_name(dtype), device=str(device))
        self.loaded = load_hf_model(load, AutoModelForCausalLM)
        self.context = self.settings.max_seq_len or model_max_positions(self.loaded.model)
        if self.context is None:
            raise ConfigError("the model config has no max_position_embeddings; pass --max-seq-len")
        self.vocab_size = self.loaded.model.get_input_embeddings().num_embeddings
        self.hooks = HFResidualHooks(self.loaded.model)

    def add_steering_vectors(self, vectors: SteeringVectors) -> None:
        self.named.update({name: vectors for name in vectors.names})

    def close(self) -> None:
        """Drop the model (the text workload closes its backend when a run ends)."""
        self.loaded = None
        free_device_memory()

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        groups: dict[SamplingParams, list[tuple[TextRow, Request, _Checked]]] = {}
        for position, request in enumerate(requests):
            checked = self._check(request)
            if isinstance(checked, Result):
                yield checked
                continue
            sampling = request.sampling
            if sampling.seed is None:  # one seed per group, so rows without their own seed can share batches
                sampling = dataclasses.replace(sampling, seed=self.settings.seed)
            row = TextRow(position, request.id, checked.ids, len(checked.ids))
            groups.setdefault(sampling, []).append((row, request, checked))
        for sampling, items in groups.items():
            yield from self._generate(sampling, items)

    def _check(self, request: Request) -> _Checked | Result:
        """The request's prompt ids, steering and collection, or an error Result naming the problem."""
        problem = self.unsupported(request)
        if problem is not None:
            return error_result(request, problem)
        if request.prompt_ids is not None:
            ids = [int(t) for t in request.prompt_ids]
        elif not request.prompt.strip():  # as the engine: a BOS alone is no prompt
            return error_result(request, "the prompt is empty; give at least one token of text")
        else:
            ids = list(self.loaded.tokenizer(request.prompt).input_ids)  # special tokens as the engine adds them
        if not ids:
            return error_result(request, "the prompt is empty (0 tokens); give at least one token")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            return error_result(request, f"prompt token ids {bad[:5]} are outside the vocabulary [0, {self.vocab_size})",
                          len(ids))
        need = len(ids) + request.sampling.max_new_tokens
        if need > self.context:
            return error_result(request, f"prompt of {len(ids)} tokens + max_new_tokens={request.sampling.max_new_tokens} "
                                   f"= {need} exceeds the {self.context} positions of this model; shorten the "
                                   "prompt or lower max_new_tokens", len(ids))
        steering, collect = [], None
        if wants_steering_or_collection(request):
            hooks = self.hooks
            steering = resolve_steering(request.steering or (), self.named, hooks.num_layers, hooks.hidden_size,
                                        hooks.dtype, MAX_STEERED_LAYERS)
            if isinstance(steering, str):
                return error_result(request, steering, len(ids))
            if request.collect is not None:
                collect = resolve_collect(request.collect, hooks.num_layers, request.sampling.max_new_tokens)
                if isinstance(collect, str):
                    return error_result(request, collect, len(ids))
        return _Checked(ids, steering, collect)

    def _generate(self, sampling: SamplingParams, items: list[tuple[TextRow, Request, _Checked]]) -> Iterator[Result]:
        generator = HFTextGenerator(self.loaded, sampling)
        by_id = {row.id: (request, checked) for row, request, checked in items}
        finished: list[Result] = []

        def on_done(rows: list[TextRow], results: list[tuple[Generated, dict | None]], seconds: float) -> None:
            now = time.perf_counter()
            texts = generator.decode([generated for generated, _ in results])
            for row, (generated, activations), text in zip(rows, results, texts):
                request = by_id[row.id][0]
                finished.append(Result(row.id, generated.token_ids, text, generated.finish_reason, len(row.token_ids),
                                       Timings(finished_s=now), metadata=request.metadata, activations=activations))

        def on_oom_row(row: TextRow, message: str) -> None:
            finished.append(error_result(by_id[row.id][0], message, len(row.token_ids)))

        def run_batch(rows: list[TextRow]) -> list[tuple[Generated, dict | None]]:
            checked = [by_id[r.id][1] for r in rows]
            layers = sorted({layer for c in checked if c.collect is not None for layer in c.collect.layers})
            with self.hooks.attached([c.steering for c in checked], layers) as recording:
                generated = generator.generate([r.token_ids for r in rows])
            activations = recording.pooled([len(g.token_ids) for g in generated], [c.collect for c in checked])
            return list(zip(generated, activations))

        new = sampling.max_new_tokens
        runner: BackoffRunner[TextRow, tuple[Generated, dict | None]] = BackoffRunner(
            run_batch=run_batch,
            cost=lambda rows: len(rows) * (max(len(r.token_ids) for r in rows) + new),
            on_done=on_done,
            on_oom_row=on_oom_row,
        )
        limits = BatchLimits(self.settings.batch_rows, MAX_BATCH_TOKENS)
        for batch in plan_row_batches([row for row, _, _ in items], limits, extra_tokens=new):
            runner.run([batch])
            yield from finished
            finished.clear()


