"""Backend `vllm` of the `classify` and `hidden-states` scenarios: vLLM's pooling runner (`LLM(model,
runner="pooling")`), a peer, imported only inside its cell (vllm_support.py). classify: `LLM.classify` on
token-id prompts (`TokensPrompt`); vLLM returns softmax probabilities, handed to the scenario as their logs
(the same softmax, labels and probabilities). hidden-states: the causal LM converted to an embedding model
(`convert="embed"`) with the scenario's pooling (LAST or MEAN) and no normalisation (`use_activation=False`):
`LLM.embed` gives the final normed hidden state only, so the scenario's layers must be the last one (-1).

A batch is one call of requests_per_call requests (0: the whole sample), which vLLM schedules itself with
its defaults (max_num_batched_tokens, CUDA graphs, torch.compile); every request's latency is its call's
time, results coming back together. Prefix caching is off (the passes repeat the same texts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.backends import estimates, vllm_support
from inferlab.bench.backends.base import BackendSpec
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.errors import ConfigError, UnsupportedError
from inferlab.workloads.backend import Supports

KNOBS = (
    *vllm_support.COMMON_KNOBS,
    Knob("requests_per_call", int, 0, "requests per LLM.classify / LLM.embed call (0: the whole sample in one call, "
         "vLLM's best throughput; each request's latency is its call's time)", minimum=0),
    Knob("max_num_batched_tokens", int, 0, "vLLM's token budget of one scheduled batch (0: vLLM's default)", minimum=0),
)


class VllmEncodeBackend(vllm_support.VLLMBackend):
    name = "vllm"
    supports = Supports(encode=True)
    pads = False  # rows scheduled without padding

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        self.environment = vllm_support.prepare_environment()
        vllm = vllm_support.import_vllm()
        c = self.config
        kwargs: dict[str, Any] = dict(model=str(model_dir), runner="pooling", max_model_len=c["max_tokens"],
                                      enable_prefix_caching=False, **vllm_support.engine_arguments(c, device, dtype))
        if c["max_num_batched_tokens"]:
            kwargs["max_num_batched_tokens"] = c["max_num_batched_tokens"]
        if self.spec.task == "hidden-states":
            kwargs["convert"] = "embed"
            kwargs["pooler_config"] = _pooler_config(self.spec.pool)
        self.llm = vllm.LLM(**kwargs)

    def encode_batches(self, token_ids: list[list[int]]) -> list[list[int]]:
        size = self.config["requests_per_call"] or len(token_ids)
        return [list(range(i, min(i + size, len(token_ids)))) for i in range(0, len(token_ids), size)]

    def encode(self, rows: list[list[int]]) -> Any:
        import torch
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(r)) for r in rows]
        if self.spec.task == "classify":
            outputs = self.llm.classify(prompts, use_tqdm=False)
            return torch.tensor([o.outputs.probs for o in outputs], dtype=torch.float32).log()
        outputs = self.llm.embed(prompts, use_tqdm=False)
        return {self.spec.layers[-1]: torch.tensor([o.outputs.embedding for o in outputs], dtype=torch.float32)}

    def extra_metrics(self) -> dict[str, Any]:
        return vllm_support.engine_facts(self.llm, self.environment)


def _pooler_config(pool: str) -> Any:
    """vLLM's PoolerConfig for the pooling asked for, without normalisation (the field is `use_activation` in
    current vLLM, `normalize` in older releases)."""
    from vllm.config import PoolerConfig

    for flag in ("use_activation", "normalize"):
        try:
            return PoolerConfig(pooling_type=pool.upper(), **{flag: False})
        except TypeError:
            continue
    raise UnsupportedError("this vLLM's PoolerConfig takes neither use_activation nor normalize")


def validate_hidden_states(cell: Cell) -> None:
    """vLLM's pooling runner gives the final hidden state pooled LAST or MEAN only."""
    from inferlab.bench.scenarios.hidden_states import parse_layers

    config = model_refs.model_config(cell.model)
    num_layers = config.get("text_config", config)["num_hidden_layers"]
    layers = {layer % (num_layers + 1) for layer in parse_layers(cell.config["layers"])}
    if layers != {num_layers}:
        raise ConfigError(f"backend vllm returns the final hidden state only: set layers=-1 (asked: "
                          f"{cell.config['layers']})")
    if cell.config["pool"] not in ("last", "mean"):
        raise ConfigError("backend vllm pools last or mean (LLM.embed); pool=all is the engine's and transformers'")


BACKENDS = [
    BackendSpec(name="vllm", description="vLLM's pooling runner, LLM.classify (a peer)", knobs=KNOBS,
                create=VllmEncodeBackend, scenario="classify",
                precheck=vllm_support.precheck, estimate_s=estimates.vllm_encode),
    BackendSpec(name="vllm", description="vLLM's pooling runner, LLM.embed of the final hidden state (a peer)",
                knobs=KNOBS, create=VllmEncodeBackend, scenario="hidden-states",
                validate=validate_hidden_states, precheck=vllm_support.precheck, estimate_s=estimates.vllm_encode),
]
