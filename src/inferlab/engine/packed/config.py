"""EncoderConfig: the knobs of the packed-prefill encoder (engine/packed/encoder.py), validated when built."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inferlab.engine.config import DTYPE_NAMES, KERNEL_SETS
from inferlab.errors import ConfigError

TASKS = ("classify", "hidden-states")
WEIGHTS = ("auto", "fp8")
ATTENTION = ("auto", "torch", "triton", "flash")


@dataclass(frozen=True)
class EncoderConfig:
    model: str | Path  # a local checkpoint folder: a ...ForSequenceClassification (classify) or any engine family
    task: str = "classify"  # "classify" (the score head) or "hidden-states" (no head)
    device: str = "auto"  # "auto" (cuda if available), "cpu", "cuda", "cuda:1", ...
    dtype: str = "auto"  # auto: float32 on CPU, the checkpoint's half type (else bfloat16) on CUDA
    weights: str = "auto"  # "auto" (the model dtype) or "fp8" (e4m3 + per-channel scales; CUDA >= 8.9, bfloat16)
    max_batch_tokens: int = 32768  # tokens of one packed batch (a longer row runs alone)
    max_length: int | None = None  # the longest row accepted (rope tables); None: the model's max positions
    kernels: str = "auto"  # "torch", "triton" or "auto" (triton on CUDA)
    attention: str = "auto"  # packed attention: "auto" (checked and timed at start-up), or one implementation
    pad_id: int | None = None  # classify reads each row's last token that is not this id; None: config.json's

    def __post_init__(self) -> None:
        if not str(self.model):
            raise ConfigError("model is empty; pass a local HuggingFace checkpoint folder")
        for name, value, allowed in (("task", self.task, TASKS), ("dtype", self.dtype, DTYPE_NAMES),
                                     ("weights", self.weights, WEIGHTS), ("kernels", self.kernels, KERNEL_SETS),
                                     ("attention", self.attention, ATTENTION)):
            if value not in allowed:
                raise ConfigError(f"{name}={value!r} is not one of {', '.join(allowed)}")
        if self.max_batch_tokens < 1:
            raise ConfigError(f"max_batch_tokens={self.max_batch_tokens} must be >= 1")
        if self.max_length is not None and self.max_length < 1:
            raise ConfigError(f"max_length={self.max_length} must be >= 1 (or None for the model's limit)")
