"""What a backend of the `constrained` scenario receives and does (child side). The scenario owns the
molecules, their templates, the prompts, batching, timing, token counting and the validity check; a
backend only turns a batch of requests into generated token ids, under the conformer constraint in its
own way (the seeds' per-token Python LogitsProcessor for `hf`; the GPU constraint for `inferlab`).

An `inferlab` backend (the engine) implements the same protocol: `prepare` compiles each distinct
template's ConstraintProgram (engine.constraints.program.compile_program over `template.segments`) and
`generate` runs Engine.generate with each row's program, returning the token ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from inferlab.errors import ConfigError

if TYPE_CHECKING:  # the parent process validates plans without RDKit
    from inferlab.workloads.conformers.chemistry.template import ConformerTemplate


@dataclass(frozen=True)
class ConformerRequest:
    """One conformer to generate: molecule `molecule_index` (its `conformer_index`-th of K)."""

    index: int  # position in the scenario's request list (stable across backends)
    molecule_index: int
    conformer_index: int
    smiles: str  # as read from the input
    template: "ConformerTemplate"  # prompt text, constraint segments, strict check
    prompt_ids: tuple[int, ...]  # template.prompt tokenised with the tokenizer's special tokens


@dataclass(frozen=True)
class ConstrainedSpec:
    """What every backend must honour, identical across backends of one comparison."""

    do_sample: bool
    temperature: float
    top_p: float
    top_k: int  # 0 disables
    seed: int
    profile: str  # the format profile of the templates

    def __post_init__(self) -> None:
        if self.do_sample and self.temperature <= 0:
            raise ConfigError("sampling needs temperature > 0; use greedy decoding instead")


class ConstrainedBackend(Protocol):
    eos_token_ids: frozenset[int]  # a row's output ends at its first one (included in the count)

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None: ...

    def prepare(self, requests: list[ConformerRequest]) -> None:
        """Host-side work for every request that will be generated (templates, compiled constraints),
        done once before any call; the scenario times it as `prepare_s`, apart from the figures."""
        ...

    def generate(self, requests: list[ConformerRequest], stop_after_steps: int | None = None) -> list[list[int]]:
        """One batch -> each row's generated token ids (up to and including EOS; padding after it is
        allowed). stop_after_steps: end after that many decode steps with every shape unchanged (warm-up)."""
        ...

    def extra_metrics(self) -> dict[str, Any]:
        """Backend-specific figures; a `warnings` list goes to the row's warnings."""
        ...
