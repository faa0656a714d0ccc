"""Backend `inferlab` of the `classify` and `hidden-states` scenarios: the engine's packed prefill
(workloads/encode_backends.py EngineEncodeBackend), batched as `inferlab classify` / `hidden-states` batch it
(consecutive rows up to max_batch_tokens tokens, no padding; with max_batch_latency_ms, batches whose expected
device time is over it are cut). Start-up (weights, FP8 quantization, the attention choice, a warm-up batch)
is the row's load_s; the engine's own figures (attention chosen, device-clock TFLOP/s) go to `engine`.
"""

from __future__ import annotations

from typing import Any

from inferlab.bench.backends import estimates
from inferlab.bench.backends.base import BackendSpec
from inferlab.bench.knobs import Knob
from inferlab.workloads.encode_backends import EncodeSpec, EngineEncodeBackend

KNOBS = (
    Knob("max_batch_tokens", int, 32768, "tokens of one packed batch (a longer row runs alone)", minimum=1),
    Knob("max_batch_latency_ms", float, 0.0, "cut batches whose expected device time is over this (0: off): "
         "smaller batches, lower p95", minimum=0.0),
    Knob("weights", str, "auto", "projection weights: the model dtype, or fp8 (e4m3, per-channel scales; CUDA >= 8.9)",
         choices=("auto", "fp8")),
    Knob("kernels", str, "auto", "Triton kernels (auto: on CUDA) or plain torch", choices=("auto", "torch", "triton")),
    Knob("attention", str, "auto", "packed attention: auto (checked and timed at start-up) or one implementation",
         choices=("auto", "torch", "triton", "flash")),
)


def create(config: dict[str, Any], spec: EncodeSpec) -> EngineEncodeBackend:
    options = {"weights": config["weights"], "max_batch_tokens": config["max_batch_tokens"],
               "max_length": config["max_tokens"], "kernels": config["kernels"], "attention": config["attention"]}
    return EngineEncodeBackend(spec, options, config["max_batch_latency_ms"] or None)


BACKENDS = [
    BackendSpec(name="inferlab", description=f"the engine's packed prefill ({task})", knobs=KNOBS,
                create=create, scenario=task,
                estimate_s=estimates.inferlab_encode)
    for task in ("classify", "hidden-states")
]
