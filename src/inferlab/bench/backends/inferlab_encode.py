"""Backend `inferlab` of the `classify` and `hidden-states` scenarios: the engine's packed prefill
(inferlab.engine.Encoder), batched as `inferlab classify` / `hidden-states` batch it (workloads/packed_run.py:
consecutive rows up to max_batch_tokens tokens, no padding; with max_batch_latency_ms, batches whose expected
device time is over it are cut). Start-up (weights, FP8 quantization, the attention choice, a warm-up batch)
is the row's load_s; the engine's own figures (attention chosen, device-clock TFLOP/s) go to `engine`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferlab.bench.backends import estimates
from inferlab.bench.backends.base import BackendSpec
from inferlab.bench.backends.encode_base import EncodeSpec
from inferlab.bench.knobs import Knob

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


class InferlabEncodeBackend:
    pads = False  # rows packed / scheduled without padding
    def __init__(self, config: dict[str, Any], spec: EncodeSpec) -> None:
        self.config = config
        self.spec = spec
        self.encoder: Any = None

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        from inferlab.engine import Encoder, EncoderConfig

        c = self.config
        self.encoder = Encoder(EncoderConfig(
            model=str(model_dir), task=self.spec.task, device=str(device), dtype=str(dtype).removeprefix("torch."),
            weights=c["weights"], max_batch_tokens=c["max_batch_tokens"], max_length=c["max_tokens"],
            kernels=c["kernels"], attention=c["attention"],
        ))

    def batches(self, token_ids: list[list[int]]) -> list[list[int]]:
        from inferlab.workloads.packed_run import PackedOptions, plan_packed_batches
        from inferlab.workloads.rows import TextRow

        options = PackedOptions(max_batch_latency_ms=self.config["max_batch_latency_ms"] or None)
        rows = [TextRow(i, str(i), ids, len(ids)) for i, ids in enumerate(token_ids)]
        planned = plan_packed_batches(rows, self.config["max_batch_tokens"], options, self.encoder.predict_s)
        return [[row.position for row in batch] for batch in planned]

    def run(self, rows: list[list[int]]) -> Any:
        batch = self.encoder.pack(rows)
        if self.spec.task == "classify":
            return self.encoder.classify(batch)
        return self.encoder.hidden_states(batch, self.spec.layers, self.spec.pool)

    def extra_metrics(self) -> dict[str, Any]:
        stats = self.encoder.stats.as_dict()
        return {"load_s": stats["startup_s"], "engine": stats, "attention_chosen": stats["attention"]}

    def close(self) -> None:
        if self.encoder is not None:
            self.encoder.close()


BACKENDS = [
    BackendSpec(name="inferlab", description=f"the engine's packed prefill ({task})", knobs=KNOBS,
                create=lambda config, spec: InferlabEncodeBackend(config, spec), scenario=task,
                estimate_s=estimates.inferlab_encode)
    for task in ("classify", "hidden-states")
]
