"""Backend `hf` of the `classify` and `hidden-states` scenarios: transformers, as `inferlab classify` /
`hidden-states --backend hf` run it (workloads/classify.py Classifier, workloads/activations.py
HiddenStateCollector: hooks on the layers asked for, the forward stopped after the deepest). Batches of
batch_size rows padded to their longest; by length (sorted, as the commands batch) or consecutive (as the
seeds did). The lab's baseline: its best is the best batch size with length-sorted batches and SDPA.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferlab.bench.backends.base import BackendSpec, require_attention_package
from inferlab.bench.backends.encode_base import EncodeSpec
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.packages import missing_package
from inferlab.errors import ConfigError


def _knobs(batch_size: int, quantization: bool) -> tuple[Knob, ...]:
    knobs = [
        Knob("batch_size", int, batch_size, "rows per forward, padded to the longest", minimum=1),
        Knob("bucket_by_length", bool, True, "batch texts of similar length (as the commands run); false: consecutive "
             "texts, padded to the longest of each batch (as the seeds measured)"),
        Knob("attn_implementation", str, "sdpa", "transformers attention implementation",
             choices=("sdpa", "eager", "flash_attention_2")),
    ]
    if quantization:
        knobs.append(Knob("quantization", str, "none", "weights through torchao: int8 weight-only, or fp8 (dynamic "
                          "activations x fp8 weights, compute capability >= 8.9)", choices=("none", "int8", "fp8")))
    return tuple(knobs)


class HfEncodeBackend:
    pads = True  # batches padded to their longest row
    def __init__(self, config: dict[str, Any], spec: EncodeSpec) -> None:
        self.config = config
        self.spec = spec
        self.runner: Any = None  # Classifier (predict) or HiddenStateCollector (collect)
        self.loaded: Any = None

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        from inferlab.workloads.hf_loading import ModelLoadConfig

        c = self.config
        require_attention_package(c["attn_implementation"])
        load = ModelLoadConfig(str(model_dir), str(dtype).removeprefix("torch."), c["attn_implementation"],
                               c.get("quantization", "none"), str(device))
        if self.spec.task == "classify":
            from inferlab.workloads.classify import load_classifier

            self.runner = load_classifier(load)
            self.loaded = self.runner.loaded
        else:
            from inferlab.workloads.activations import HiddenStateCollector
            from inferlab.workloads.hidden_states import load_base_model

            self.loaded = load_base_model(load)
            self.runner = HiddenStateCollector(self.loaded, self.spec.layers, self.spec.pool)

    def batches(self, token_ids: list[list[int]]) -> list[list[int]]:
        from inferlab.workloads.batching import BatchLimits, plan_batches

        size = self.config["batch_size"]
        if self.config["bucket_by_length"]:
            return plan_batches([len(t) for t in token_ids], BatchLimits(size))
        return [list(range(i, min(i + size, len(token_ids)))) for i in range(0, len(token_ids), size)]

    def run(self, rows: list[list[int]]) -> Any:
        if self.spec.task == "classify":
            return self.runner.predict(rows)
        return self.runner.collect(rows)

    def extra_metrics(self) -> dict[str, Any]:
        return {"load_s": self.loaded.load_s, "attn_loaded": self.loaded.attn,
                "quantized_layers": self.loaded.quantized_layers}


def validate(cell: Cell) -> None:
    if cell.config["attn_implementation"] == "flash_attention_2" and cell.config["dtype"] == "float32":
        raise ConfigError("flash_attention_2 runs only bfloat16/float16; set dtype=bfloat16")


def precheck(cell: Cell) -> str | None:
    c = cell.config
    if c["attn_implementation"] == "flash_attention_2":
        return missing_package("flash_attn", "attn_implementation=flash_attention_2", "pip install flash-attn")
    if c.get("quantization", "none") != "none":
        return missing_package("torchao", f"quantization={c['quantization']}",
                               "pip install torchao, or carry its wheel: docs/workloads.md")
    return None


BACKENDS = [
    BackendSpec(name="hf", description="transformers: padded batches of batch_size rows (the baseline)",
                knobs=_knobs(8, quantization=True), create=lambda config, spec: HfEncodeBackend(config, spec),
                validate=validate, scenario="classify", precheck=precheck),
    BackendSpec(name="hf", description="transformers + forward hooks: padded batches of batch_size rows (the baseline)",
                knobs=_knobs(16, quantization=False), create=lambda config, spec: HfEncodeBackend(config, spec),
                validate=validate, scenario="hidden-states", precheck=precheck),
]
