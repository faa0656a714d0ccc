"""Plain dataclasses shared by the engine, the workloads and the lab: what a request asks for and what
comes back. No behaviour beyond validation lives here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from inferlab.errors import ConfigError


# The accepted temperatures besides 0 (greedy). Below the floor sampling is greedy in all but near-ties,
# and in fp32 logit / T overflows to +-inf for small enough T, which the race and the constraint's mask
# cannot rank (1e-45 once gave 0% valid conformers); above the ceiling every allowed token is about as
# likely, and T = inf turns the masked logits into NaN.
MIN_TEMPERATURE = 1e-3
MAX_TEMPERATURE = 1e3
_INT32_MAX = 2**31 - 1  # token ids and top_k sit in the engine's int32/int64 device tables


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class SamplingParams:
    """How one request's tokens are chosen and when it stops.

    temperature == 0 means greedy; any other temperature is a finite number in [MIN_TEMPERATURE,
    MAX_TEMPERATURE]. top_k == 0 and top_p == 1.0 and min_p == 0.0 disable those filters. Filters apply in
    the order of transformers: temperature, top-k, top-p, min-p. Every value is checked here, however it
    arrives (a flag, a JSONL line, the Python API): a NaN, an infinity or a value of the wrong type is a
    ConfigError naming the field and the range.
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
        for name in ("temperature", "top_p", "min_p"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value):
                raise ConfigError(f"{name}={value!r} must be a finite number")
        for name in ("top_k", "max_new_tokens", "min_new_tokens"):
            if not _is_int(getattr(self, name)):
                raise ConfigError(f"{name}={getattr(self, name)!r} must be a whole number")
        if self.temperature != 0 and not MIN_TEMPERATURE <= self.temperature <= MAX_TEMPERATURE:
            raise ConfigError(f"temperature={self.temperature} is outside {MIN_TEMPERATURE:g}..{MAX_TEMPERATURE:g}; "
                              "use 0 for greedy decoding, or a temperature in that range")
        if not 0 <= self.top_k <= _INT32_MAX:
            raise ConfigError(f"top_k={self.top_k} must be in [0, {_INT32_MAX}]; use 0 to disable top-k")
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
        if isinstance(self.stop_token_ids, list):  # as a JSON line gives it; the params stay hashable
            object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if not isinstance(self.stop_token_ids, tuple) or not all(
                _is_int(t) and 0 <= t <= _INT32_MAX for t in self.stop_token_ids):
            raise ConfigError(f"stop_token_ids={self.stop_token_ids!r} must be a tuple of token ids (whole numbers "
                              ">= 0)")
        if not isinstance(self.ignore_eos, bool):
            raise ConfigError(f"ignore_eos={self.ignore_eos!r} must be true or false")
        if self.seed is not None and not _is_int(self.seed):
            raise ConfigError(f"seed={self.seed!r} must be a whole number or None")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


POOLS = ("last", "mean", "all")


@dataclass(frozen=True)
class Steer:
    """Add `scale * vector` to the residual stream after decoder layer `layer` (0-based; negative counts from
    the end), at every position of the prompt and of the output: what a forward hook on transformers'
    `model.model.layers[layer]` adding it to the layer's output does. `vector` is the values (a 1-D tensor,
    array or list of hidden-size floats) or the name of an entry of a SteeringVectors set registered with
    the engine (`Engine.add_steering_vectors`). The vector and the scale are checked at intake (length,
    finite values); a bad one makes the request an error Result."""

    layer: int
    vector: Any
    scale: float = 1.0


@dataclass(frozen=True)
class Collect:
    """Hidden states to collect while generating: the residual stream after each decoder layer in `layers`
    (0-based, negative from the end; after any steering at that layer; transformers' `hidden_states[l + 1]`
    for every layer but the last, whose `hidden_states` entry is final-normed), taken at the step that
    produced each generated token (the prompt's last position for the first token, then each fed-back
    token's position). `pool`: "last" (the step that produced the last token), "mean" (over every
    generated token) or "all" (one vector per generated token, the first `max_tokens` of them).
    Result.activations then holds {layer: fp32 tensor}: [hidden] for last and mean, [tokens, hidden] for all.
    """

    layers: tuple[int, ...]
    pool: str = "mean"
    max_tokens: int | None = None  # "all" only: keep the first this many tokens (None: every generated token)

    def __post_init__(self) -> None:
        if not self.layers or not all(isinstance(x, int) and not isinstance(x, bool) for x in self.layers):
            raise ConfigError(f"Collect.layers={self.layers!r} must be a non-empty tuple of layer numbers")
        if len(set(self.layers)) != len(self.layers):
            raise ConfigError(f"Collect.layers={self.layers!r} names a layer twice; list each layer once")
        if self.pool not in POOLS:
            raise ConfigError(f"Collect.pool={self.pool!r} is not one of {', '.join(POOLS)}")
        if self.max_tokens is not None and (self.pool != "all" or self.max_tokens < 1):
            raise ConfigError(f"Collect.max_tokens={self.max_tokens} applies to pool='all' only and must be >= 1")


@dataclass(frozen=True)
class Request:
    """One generation job. Give `prompt_ids` (already tokenised) or `prompt` (text, tokenised by the engine).

    `constraint` is an optional compiled constraint program (inferlab.constraints) that the engine
    enforces on the GPU; None means unconstrained. `steering` adds vectors to the residual stream (Steer,
    or (layer, vector, scale) tuples); `collect` asks for hidden states of the generated tokens.
    """

    id: str
    prompt_ids: tuple[int, ...] | None = None
    prompt: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    constraint: Any = None
    metadata: Any = None  # the caller's own object (a workload's task), handed back on the Result untouched
    steering: tuple[Any, ...] = ()  # Steer(layer, vector, scale) or (layer, vector, scale) entries
    collect: Collect | None = None

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
    metadata: Any = None  # the Request's metadata, the same object
    # Request.collect's hidden states: {layer: fp32 tensor}, [hidden] (last, mean) or [tokens, hidden] (all)
    activations: dict[int, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.finish_reason != "error"
