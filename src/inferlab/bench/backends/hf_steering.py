"""Backend `hf` of the `steering` scenario: transformers + forward hooks, the way a careful user writes it.

AutoModelForCausalLM in the cell's dtype with `attn_implementation` (sdpa by default); prompts sorted by
length and cut into batches of batch_size (left-padded: the least padding per batch); one `generate` per
batch with every knob explicit (exactly new_tokens tokens, EOS masked until then); steering and
collection through the hooks of workloads/hf_steering.py (a forward hook on the steered decoder layer
adds scale * vector to its output; hooks on the collected layers keep each call's last-position output,
pooled per row after the call and moved to the host, as the seed's job did). `kv_cache`: dynamic (the
default: hooks and a dynamic cache need no compilation) or static (transformers then compiles the decode
step itself, hooks included: whatever it makes of them is what the row measures).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from inferlab.bench.backends import hf_knobs
from inferlab.bench.backends.base import BackendSpec, GenerateSpec, one_call_of
from inferlab.bench.backends.hf_model import HFModelBackend, load_causal_lm
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.errors import ConfigError
from inferlab.types import Request, Result
from inferlab.workloads.backend import Supports, error_result

KNOBS = (
    hf_knobs.ATTN_IMPLEMENTATION,
    Knob("kv_cache", str, "dynamic", "KV cache implementation (static: transformers compiles the step)",
         choices=("dynamic", "static")),
)


def validate(cell: Cell) -> None:
    if cell.config["attn_implementation"] == "flash_attention_2" and cell.config["dtype"] == "float32":
        raise ConfigError("flash_attention_2 needs bfloat16 or float16; set dtype or attn_implementation=sdpa")


class HFSteeringBackend(HFModelBackend):
    """Requests of one call share their sampling; others are error Results. Steering names entries of the set
    add_steering_vectors registered, checked by the engine's rules (as the text workload's hf backend does)."""

    name = "hf"
    supports = Supports(steering=True, collect=True)

    def __init__(self, config: dict[str, Any], spec: GenerateSpec) -> None:
        super().__init__(config, spec)
        self.hooks: Any = None
        self.named: dict[str, Any] = {}  # entry name -> its SteeringVectors set
        self.pad_id = 0
        self.calls = 0

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        from inferlab.workloads.hf_steering import HFResidualHooks

        self.model = load_causal_lm(self.config["attn_implementation"], model_dir, device, dtype)
        self.hooks = HFResidualHooks(self.model)
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else self.model.config.eos_token_id
        eos = eos[0] if isinstance(eos, (list, tuple)) else eos
        self.pad_id = gen.pad_token_id if gen.pad_token_id is not None else (eos if eos is not None else 0)

    def add_steering_vectors(self, vectors: Any) -> None:
        self.named.update({name: vectors for name in vectors.names})

    def _checked(self, request: Request) -> tuple[list[Any], Any] | str:
        """The request's checked steering entries and collection plan, or why it cannot run."""
        from inferlab.engine import resolve_collect, resolve_steering
        from inferlab.workloads.hf_text_backend import MAX_STEERED_LAYERS

        hooks = self.hooks
        steering = resolve_steering(request.steering or (), self.named, hooks.num_layers, hooks.hidden_size,
                                    hooks.dtype, MAX_STEERED_LAYERS)
        if isinstance(steering, str) or request.collect is None:
            return steering if isinstance(steering, str) else (steering, None)
        plan = resolve_collect(request.collect, hooks.num_layers, request.sampling.max_new_tokens)
        return plan if isinstance(plan, str) else (steering, plan)

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        """Prompts sorted by length, batches of batch_size rows, left-padded; every row gets exactly
        max_new_tokens tokens (EOS masked until then)."""
        import torch

        from inferlab.bench.backends.hf_generate_options import generate_options, stop_at
        from inferlab.workloads.batching import pad_batch

        runs, not_run = one_call_of(self, requests)
        checked = {}
        for r in runs:
            entries = self._checked(r)
            if isinstance(entries, str):
                not_run.append(error_result(r, entries))
            else:
                checked[r.id] = entries
        runs = [r for r in runs if r.id in checked]
        if not runs:
            return iter(not_run)
        sampling, rows = runs[0].sampling, self.config["batch_size"]
        kwargs: dict[str, Any] = dict(max_new_tokens=sampling.max_new_tokens, min_new_tokens=sampling.min_new_tokens,
                                      num_beams=1, pad_token_id=self.pad_id, use_cache=True,
                                      **generate_options(sampling, self.config["kv_cache"]))
        order = sorted(runs, key=lambda r: len(r.prompt_ids))  # length-sorted: least padding
        results = []
        for start in range(0, len(order), rows):
            batch = order[start : start + rows]
            input_ids, mask = pad_batch([list(r.prompt_ids) for r in batch], self.pad_id, side="left")
            input_ids, mask = input_ids.to(self.model.device), mask.to(self.model.device)
            if stop_after_steps is not None and stop_after_steps < sampling.max_new_tokens:
                # a short call with the shapes of a full one (a static cache keeps its size)
                kwargs["stopping_criteria"] = stop_at(input_ids.shape[1] + stop_after_steps)
            steering = [checked[r.id][0] for r in batch]
            plans = [checked[r.id][1] for r in batch]
            layers = sorted({layer for plan in plans if plan is not None for layer in plan.layers})
            torch.manual_seed(self.spec.seed + self.calls)
            self.calls += 1
            with torch.inference_mode(), self.hooks.attached(steering, layers) as recording:
                out = self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
            new = out[:, input_ids.shape[1]:]  # [rows, n]
            pooled = recording.pooled([new.shape[1]] * len(batch), plans)
            for k, r in enumerate(batch):
                results.append(Result(r.id, new[k].tolist(), None, "length", len(r.prompt_ids), metadata=r.metadata,
                                      activations=pooled[k]))
        return iter(not_run + results)

    def extra_metrics(self) -> dict[str, Any]:
        return {"attention_kernel_requested": self.config["attn_implementation"],
                "compile_observed": hasattr(self.model, "_compiled_call")}


BACKEND = BackendSpec(
    "hf", "transformers generate with forward hooks adding the vector and recording hidden states",
    KNOBS, HFSteeringBackend, validate, scenario="steering",
)
