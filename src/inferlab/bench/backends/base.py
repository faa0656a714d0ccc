"""What a lab backend is in the parent (BackendSpec: its knobs, checks and estimate; `create` builds the child's
object) and what the scenarios make their backends for (the specs). In the child a backend is a
workloads.backend.Backend, the protocol the workloads' own backends implement: load, optional prepare,
generate (Requests in, Results out) or encode, close. Backends are thin: the scenario owns prompts, requests,
timing, token counting and metrics.

A BackendSpec belongs to one scenario (`generate` unless it says otherwise): the same name (`hf`, `inferlab`)
can serve several scenarios with different knobs and a different spec."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, knob_table
from inferlab.errors import ConfigError, UnsupportedError
from inferlab.types import Request, Result
from inferlab.workloads.backend import Backend, error_result

if TYPE_CHECKING:  # the parent process validates plans without RDKit
    from inferlab.workloads.conformers.chemistry.template import ConformerTemplate


@dataclass(frozen=True)
class GenerateSpec:
    """What a generating backend (scenarios generate and steering) is sized and seeded for; the requests carry
    the rest (prompts, sampling, steering, collection)."""

    new_tokens: int  # the most tokens a request asks for
    seed: int

    def __post_init__(self) -> None:
        if self.new_tokens < 1:
            raise ConfigError(f"new_tokens={self.new_tokens} must be >= 1")


@dataclass(frozen=True)
class ConstrainedSpec:
    """What every backend of the `constrained` scenario is made for."""

    seed: int
    profile: str  # the format profile of the templates


@dataclass(frozen=True)
class QualitySpec:
    """What every backend of the `conformer-quality` scenario is made for; each request carries its own seed
    (SamplingParams.seed) and output bound (max_new_tokens), and its molecule as a ConformerConstraint."""

    profile: str  # the format profile of the templates


@dataclass(frozen=True)
class ConformerConstraint:
    """A `constrained` request's constraint: conformer `conformer` of molecule `molecule` (its place in the
    scenario's molecules), whose SMILES (as read) and template (the prompt, the constraint segments Copy / Hole /
    EndOfSequence, the strict check) it carries. Each backend turns it into its own constraint once per molecule
    in prepare (a ConstraintProgram, a regex, the seeds' skeleton)."""

    smiles: str
    template: "ConformerTemplate"
    molecule: int
    conformer: int


def unprepared(request: Request, prepared: dict[str, Any], backend: str) -> str | None:
    """Why a constrained backend cannot run `request` (not a conformer request, or its molecule not in
    `prepared`, the backend's per-SMILES constraints), or None."""
    if not isinstance(request.constraint, ConformerConstraint) or request.constraint.smiles not in prepared:
        return f"the constrained backend {backend} runs conformer requests that were prepared (prepare(requests) first)"
    return None


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
    create: Callable[[dict[str, Any], Any], Any]  # child only, imports inside: (config, spec) -> Backend
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


def one_call(requests: list[Request], same_length: bool = False) -> tuple[list[Request], list[Result]]:
    """(the requests one batched call can run: those with the first request's sampling, and its prompt length
    with `same_length`; an error Result for each other)."""
    if not requests:
        return [], []
    first = requests[0]
    runs, refused = [], []
    for r in requests:
        if r.sampling != first.sampling:
            refused.append(error_result(r, "one call runs one sampling setting: send requests with other "
                                           "sampling in a call of their own"))
        elif same_length and len(r.prompt_ids or ()) != len(first.prompt_ids or ()):
            refused.append(error_result(r, "one call runs prompts of one length (no padding): send requests "
                                           "of other lengths in a call of their own"))
        else:
            runs.append(r)
    return runs, refused


def one_call_of(backend: Backend, requests: list[Request],
                same_length: bool = False) -> tuple[list[Request], list[Result]]:
    """(the requests `backend` runs in one batched call: those it supports, as one_call picks them; an error
    Result for each other)."""
    served, refused = backend.split_supported(requests)
    runs, other = one_call(served, same_length)
    return runs, refused + other
