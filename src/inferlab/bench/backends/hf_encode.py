"""Backend `hf` of the `classify` and `hidden-states` scenarios: transformers, as `inferlab classify` /
`hidden-states --backend hf` run it (workloads/encode_backends.py HFEncodeBackend). Batches of batch_size rows
padded to their longest; by length (sorted, as the commands batch) or consecutive (as the seeds did). The lab's
baseline: its best is the best batch size with length-sorted batches and SDPA.
"""

from __future__ import annotations

from typing import Any

from inferlab.bench.backends.base import BackendSpec, require_attention_package
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.packages import missing_package
from inferlab.errors import ConfigError
from inferlab.workloads.encode_backends import EncodeSpec, HFEncodeBackend


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


def create(config: dict[str, Any], spec: EncodeSpec) -> HFEncodeBackend:
    require_attention_package(config["attn_implementation"])
    return HFEncodeBackend(spec, config["attn_implementation"], config.get("quantization", "none"),
                           config["batch_size"], config["bucket_by_length"])


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
                knobs=_knobs(8, quantization=True), create=create,
                validate=validate, scenario="classify", precheck=precheck),
    BackendSpec(name="hf", description="transformers + forward hooks: padded batches of batch_size rows (the baseline)",
                knobs=_knobs(16, quantization=False), create=create,
                validate=validate, scenario="hidden-states", precheck=precheck),
]
