"""Plain dataclasses shared by the engine, the workloads and the lab: what a request asks for and what
comes back. No behaviour beyond validation lives here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferlab.errors import ConfigError


@dataclass(frozen=True)
class SamplingParams:
    """How one request's tokens are chosen and when it stops.

    temperature == 0 means greedy. top_k == 0 and top_p == 1.0 and min_p == 0.0 disable those filters.
    Filters apply in the order of transformers: temperature, top-k, top-p, min-p.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    max_new_tokens: int = 256
    min_new_tokens: int = 0  # EOS and stop tokens are masked out until this many tokens exist
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    seed: int | None = None  # per-request seed; None derives one from the engine seed and the request id

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"temperature={self.temperature} is negative; use 0 for greedy or a value > 0")
        if self.top_k < 0:
            raise ConfigError(f"top_k={self.top_k} is negative; use 0 to disable top-k")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p={self.top_p} must be in (0, 1]; use 1.0 to disable top-p")
        if not 0.0 <= self.min_p < 1.0:
            raise ConfigError(f"min_p={self.min_p} must be in [0, 1); use 0.0 to disable min-p")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens={self.max_new_tokens} must be >= 1")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise ConfigError(
                f"min_new_tokens={self.min_new_tokens} must be in [0, max_new_tokens={self.max_new_tokens}]"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class Request:
    """One generation job. Give `prompt_ids` (already tokenised) or `prompt` (text, tokenised by the engine).

    `constraint` is an optional compiled constraint program (inferlab.engine.constraints) that the engine
    enforces on the GPU; None means unconstrained.
    """

    id: str
    prompt_ids: tuple[int, ...] | None = None
    prompt: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    constraint: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)  # carried through to the Result untouched

    def __post_init__(self) -> None:
        if (self.prompt_ids is None) == (self.prompt is None):
            raise ConfigError(f"request {self.id!r}: give exactly one of prompt_ids or prompt")


@dataclass
class Timings:
    """Seconds on the engine's clock (time.perf_counter), measured on the host."""

    submitted_s: float = 0.0
    admitted_s: float = 0.0  # the request got a slot and its prefill was launched
    finished_s: float = 0.0  # the host saw the finished flag


@dataclass
class Result:
    """What came back for one Request. finish_reason: 'eos', 'stop', 'length' or 'error'."""

    id: str
    token_ids: list[int]
    text: str | None
    finish_reason: str
    prompt_tokens: int
    timings: Timings = field(default_factory=Timings)
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.finish_reason != "error"
