"""What a backend is (BackendSpec, declared in the parent) and what a generate backend does in the
child (GenerateBackend). Backends are thin: the scenario owns prompts, timing, token counting and
metrics; a backend loads a model, runs one batch of prompts and returns the raw generated ids.

A BackendSpec belongs to one scenario (`generate` unless it says otherwise): the same name (`hf`,
`inferlab`) can serve several scenarios with different knobs and a different child-side protocol (the
`constrained` scenario's is in backends/constrained_base.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, knob_table
from inferlab.errors import ConfigError, UnsupportedError


@dataclass(frozen=True)
class GenerateSpec:
    """What every backend must produce, identical across backends of one comparison."""

    new_tokens: int  # every row produces exactly this many tokens (min == max new tokens)
    do_sample: bool
    temperature: float
    top_p: float
    top_k: int
    seed: int

    def __post_init__(self) -> None:
        if self.new_tokens < 1:
            raise ConfigError(f"new_tokens={self.new_tokens} must be >= 1")


class GenerateBackend(Protocol):
    """The child-side object. `generate` must leave the device busy-free on return only if the caller
    synchronises; the scenario synchronises before reading clocks."""

    eos_token_ids: frozenset[int]  # tokens that end a row; counting stops after the first one

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None: ...

    def generate(self, prompt_ids: Any, stop_after_steps: int | None = None) -> Any:
        """prompt_ids  # [batch, prompt_tokens] int64 on the device. Returns the generated ids only,
        [batch, new] as a tensor or a list of lists; rows may be padded after their EOS.
        stop_after_steps: end after that many decode steps without changing any shape (for profiling)."""
        ...

    def extra_metrics(self) -> dict[str, Any]:
        """Backend-specific figures for the row (e.g. whether compile ran, graph capture time); a
        `warnings` list, if present, goes to the row's warnings instead."""
        ...

    # Optional, on any backend of any scenario:
    #   kernels_visible: bool = True   False when the model runs in another process (vLLM's engine core):
    #                                  the cell's kernel profile would see nothing, so it is skipped
    #   close() -> None                ends what the backend started (a peer's engine process) once the
    #                                  figures are taken; called through close_backend


def close_backend(backend: Any) -> None:
    """Call the backend's optional close() (see GenerateBackend)."""
    close = getattr(backend, "close", None)
    if close is not None:
        close()


def _no_checks(cell: Cell) -> None:
    return None


def _unchanged(config: dict[str, Any]) -> dict[str, Any]:
    return config


def _nothing_missing(cell: Cell) -> str | None:
    return None


@dataclass(frozen=True)
class BackendSpec:
    name: str
    description: str
    knobs: tuple[Knob, ...]
    create: Callable[[dict[str, Any], Any], Any]  # child only, imports inside: (config, spec) -> backend
    validate: Callable[[Cell], None] = _no_checks
    resolve: Callable[[dict[str, Any]], dict[str, Any]] = _unchanged
    scenario: str = "generate"  # the scenario whose cells this backend serves
    # Parent side, no torch: the reason this cell certainly cannot run here (e.g. a package that is not
    # installed), or None. The launcher then records `unavailable` without starting a process.
    precheck: Callable[[Cell], str | None] = _nothing_missing
    # Rough seconds of a cell (cell, accelerator present) when the scenario's own model does not fit this
    # backend (a peer's start-up, an engine's step time); None = the scenario's estimate. Used to plan budgets.
    estimate_s: Callable[[Cell, bool], float] | None = None

    @property
    def knob_map(self) -> dict[str, Knob]:
        return knob_table(self.knobs)


def require_attention_package(attn_implementation: str) -> None:
    """In the cell: flash_attention_2 needs flash-attn importable (the parent only saw that it can be found;
    a build for another torch fails here), else UnsupportedError (an `unavailable` row)."""
    if attn_implementation != "flash_attention_2":
        return
    try:
        import flash_attn  # noqa: F401
    except Exception as e:
        raise UnsupportedError(f"flash_attention_2 needs the flash-attn package: {type(e).__name__}: {e}") from None

