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
from typing import Any

from inferlab.bench.backends.base import BackendSpec, require_attention_package
from inferlab.bench.backends.steering_base import PassOutput, SteeringSpec
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.errors import ConfigError

KNOBS = (
    Knob("attn_implementation", str, "sdpa", "transformers attention implementation",
         choices=("eager", "sdpa", "flash_attention_2")),
    Knob("kv_cache", str, "dynamic", "KV cache implementation (static: transformers compiles the step)",
         choices=("dynamic", "static")),
)


def validate(cell: Cell) -> None:
    if cell.config["attn_implementation"] == "flash_attention_2" and cell.config["dtype"] == "float32":
        raise ConfigError("flash_attention_2 needs bfloat16 or float16; set dtype or attn_implementation=sdpa")


class HFSteeringBackend:
    def __init__(self, config: dict[str, Any], spec: SteeringSpec) -> None:
        self.config = config
        self.spec = spec
        self.model: Any = None
        self.taps: Any = None
        self.entry: Any = None
        self.pad_id = 0
        self.calls = 0

    def load(self, model_dir: Path, device: Any, dtype: Any, vector: Any) -> None:
        from transformers import AutoModelForCausalLM

        from inferlab.engine import SteerEntry
        from inferlab.workloads.hf_loading import from_pretrained_for_inference
        from inferlab.workloads.hf_steering import HFTaps

        require_attention_package(self.config["attn_implementation"])
        self.model = from_pretrained_for_inference(AutoModelForCausalLM, model_dir, dtype,
                                                   self.config["attn_implementation"], device)
        self.taps = HFTaps(self.model)
        self.entry = SteerEntry(self.spec.layer, vector, self.spec.scale, b"")
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else self.model.config.eos_token_id
        eos = eos[0] if isinstance(eos, (list, tuple)) else eos
        self.pad_id = gen.pad_token_id if gen.pad_token_id is not None else (eos if eos is not None else 0)

    def run(self, prompts: list[list[int]], mode: str, new_tokens: int | None = None,
            pool: str | None = None) -> PassOutput:
        import torch

        from inferlab.bench.backends.hf_stop_after import StopAtLength
        from inferlab.engine import CollectPlan
        from inferlab.workloads.batching import pad_batch

        s, rows = self.spec, self.config["batch_size"]
        n = new_tokens or s.new_tokens
        plan = CollectPlan(s.collect_layers, pool or s.collect_pool, s.new_tokens) if "collect" in mode else None
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # length-sorted: least padding
        activations: list[Any] = [None] * len(prompts)
        token_ids: list[list[int]] = [[] for _ in prompts]
        kwargs: dict[str, Any] = dict(max_new_tokens=s.new_tokens, min_new_tokens=s.new_tokens, do_sample=s.do_sample,
                                      num_beams=1, pad_token_id=self.pad_id, use_cache=True)
        if s.do_sample:
            kwargs.update(temperature=s.temperature, top_p=s.top_p, top_k=0)
        if self.config["kv_cache"] == "static":
            kwargs["cache_implementation"] = "static"
        tokens = 0
        for start in range(0, len(order), rows):
            batch = order[start : start + rows]
            input_ids, mask = pad_batch([prompts[i] for i in batch], self.pad_id, side="left")
            input_ids, mask = input_ids.to(self.model.device), mask.to(self.model.device)
            if n < s.new_tokens:  # a short call with the shapes of a full one (a static cache keeps its size)
                from transformers import StoppingCriteriaList

                kwargs["stopping_criteria"] = StoppingCriteriaList([StopAtLength(input_ids.shape[1] + n)])
            steering = [[self.entry] if "steer" in mode else [] for _ in batch]
            torch.manual_seed(s.seed + self.calls)
            self.calls += 1
            with torch.inference_mode(), self.taps.attached(steering, plan.layers if plan else ()) as recording:
                out = self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
            new = out[:, input_ids.shape[1]:]  # [rows, n]
            tokens += new.numel()
            pooled = recording.pooled([new.shape[1]] * len(batch), [plan] * len(batch))
            for k, i in enumerate(batch):
                token_ids[i] = new[k].tolist()
                activations[i] = pooled[k]
        return PassOutput(tokens, activations if plan is not None else None, token_ids=token_ids)

    def extra_metrics(self) -> dict[str, Any]:
        return {"attention_kernel_requested": self.config["attn_implementation"],
                "compile_observed": hasattr(self.model, "_compiled_call")}


BACKEND = BackendSpec(
    name="hf",
    description="transformers generate with forward hooks adding the vector and recording hidden states",
    knobs=KNOBS,
    create=lambda config, spec: HFSteeringBackend(config, spec),
    validate=validate,
    scenario="steering",
)
