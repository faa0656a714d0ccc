"""What a backend of the `steering` scenario receives and does (child side). The scenario owns the prompts,
the steering vector, the modes, timing, token counting and the activation check; a backend only generates
for a list of prompts in one mode, its own way (the engine; transformers + forward hooks).

Modes: "plain" (neither), "steer" (scale x vector added after `layer` for every row), "collect" (the
hidden states of `collect_layers` pooled over the generated tokens, returned to the host with the
outputs), "steer+collect" (both: the seed's job). Every row generates exactly `new_tokens` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

MODES = ("plain", "steer", "collect", "steer+collect")


@dataclass(frozen=True)
class SteeringSpec:
    """What every backend must honour, identical across the backends of one comparison."""

    new_tokens: int
    do_sample: bool
    temperature: float
    top_p: float
    seed: int
    layer: int  # decoder layer (0-based, already resolved)
    scale: float  # steering adds scale * vector (the vector in the model dtype), as a hook writing `scale * v`
    collect_layers: tuple[int, ...]  # decoder layers (resolved)
    collect_pool: str  # last / mean / all


@dataclass
class PassOutput:
    tokens: int  # generated tokens counted (every row: new_tokens)
    activations: list[dict[int, Any]] | None  # per prompt (input order) with collection, else None
    decode_s: float | None = None  # device time of the decode steps (the engine's clock), if the backend knows it
    decode_steps: int | None = None
    token_ids: list[list[int]] | None = None  # per prompt (input order)


class SteeringBackend(Protocol):
    def load(self, model_dir: Path, device: Any, dtype: Any, vector: Any) -> None:
        """Load the model; `vector` [hidden] fp32 (CPU) is the steering vector, unscaled."""

    def run(self, prompts: list[list[int]], mode: str, new_tokens: int | None = None,
            pool: str | None = None) -> PassOutput:
        """Generate for every prompt (the backend batches them by the scenario's batch_size); new_tokens
        shortens the call (warm-up) without changing any shape that matters; pool overrides collect_pool."""

    def extra_metrics(self) -> dict[str, Any]: ...
