"""Backend `inferlab` of the `constrained` scenario: our engine with the conformer constraint on the device.

- prepare: compiles each molecule's ConstraintProgram once (the K conformers of a molecule share it),
  then builds the engine sized for the measured requests (max_seq_len = the longest prompt + program
  bound), so engine start-up (weights, Triton JIT, GEMM choice, graph capture) lands in `prepare_s`;
- generate: the batch streamed through the engine (workloads/engine_backend.py), each request's constraint
  replaced by its molecule's program; `slots` rows (0 = as many as the batch has requests), refilled
  continuously when the batch has more requests than rows;
- constraint=off: the same requests without the constraint, each asked for exactly the number of tokens a
  constrained pass over the same requests produced (that pass runs in prepare, untimed), so the two
  cells compare the step's cost at equal output lengths (its outputs are not conformers: validity ~0);
- kv_dtype=fp8: the engine's FP8 KV cache (the row's engine stats name it: engine.kv_dtype);
- forced_run_tokens=F: constrained steps feed each row up to F of its forced tokens as extra positions,
  within forced_run_budget x rows of them per step (engine/forced_runs.py; the row's engine stats:
  decode_steps, live_row_steps against the tokens).
A warm-up call (stop_after_steps given) generates the batch's first `slots` requests in full: a
constrained request's length is its program's, so there is no shorter call with the same shapes.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any, Iterator

from inferlab.bench.backends import estimates
from inferlab.bench.backends.base import BackendSpec, ConstrainedSpec, unprepared
from inferlab.bench.backends.inferlab_generate import DECODE_STEPS_PER_SYNC_KNOB, KV_DTYPE_KNOB
from inferlab.bench.knobs import FORCED_RUN_KNOBS, Knob
from inferlab.engine import EngineConfig
from inferlab.types import Request, Result
from inferlab.workloads.engine_backend import EngineBackend

KNOBS = (
    Knob("slots", int, 0, "engine rows (KV slots); 0 = the scenario's batch_size", minimum=0),
    Knob("constraint", str, "on", "on: the GPU constraint; off: unconstrained at the constrained pass's lengths",
         choices=("on", "off"), baseline=("off",)),
    DECODE_STEPS_PER_SYNC_KNOB,
    KV_DTYPE_KNOB,
    *FORCED_RUN_KNOBS,
)


class InferlabConstrainedBackend(EngineBackend):
    """The workloads' engine backend, built in prepare once the programs are known; requests carry a
    ConformerConstraint, replaced by its molecule's program (or, constraint=off, by exact lengths)."""

    def __init__(self, config: dict[str, Any], spec: ConstrainedSpec) -> None:
        super().__init__()
        self.config, self.seed = config, spec.seed
        self.max_seq_len: int | None = None  # set in prepare: the longest prompt + program
        self.model_dir: Path | None = None
        self.device_dtype: tuple[Any, Any] = (None, None)
        self.tokenizer: Any = None
        self.programs: dict[str, Any] = {}  # SMILES -> ConstraintProgram (the K conformers of a molecule share it)
        self.lengths: dict[tuple[int, int], int] = {}  # (molecule, conformer) -> its constrained output's tokens

    @property
    def slots(self) -> int:
        return self.config["slots"] or self.config["batch_size"]

    def config_for(self, model_dir: str | Path) -> EngineConfig:
        return EngineConfig(model=str(model_dir), max_slots=self.slots, max_seq_len=self.max_seq_len, seed=self.seed,
                            decode_steps_per_sync=self.config["decode_steps_per_sync"],
                            cuda_graphs=None,  # on for CUDA
                            kv_dtype=self.config["kv_dtype"], forced_run_tokens=self.config["forced_run_tokens"],
                            forced_run_budget=self.config["forced_run_budget"], decode_text=False)

    def load(self, model_dir: str | Path, device: Any = None, dtype: Any = None) -> None:
        from inferlab.models.tokenizer_loading import load_hf_tokenizer

        self.model_dir, self.device_dtype = Path(model_dir), (device, dtype)
        self.tokenizer = load_hf_tokenizer(model_dir)
        self.eos_token_ids = frozenset([self.tokenizer.eos_token_id])

    def prepare(self, requests: list[Request]) -> None:
        from inferlab.constraints.program import compile_program

        for r in requests:
            smiles = r.constraint.smiles
            if smiles not in self.programs:
                self.programs[smiles] = compile_program(r.constraint.template.segments, self.tokenizer)
        longest = max(len(r.prompt_ids) + self.programs[r.constraint.smiles].max_new_tokens for r in requests)
        self.max_seq_len = longest
        super().load(self.model_dir, *self.device_dtype)
        self.eos_token_ids = frozenset([self.tokenizer.eos_token_id])  # the templates' EOS, as load set it
        if self.config["constraint"] == "off":
            results = self.engine.generate([self._engine_request(r, constrained=True) for r in requests])
            self.lengths = {self._key(r): len(out.token_ids) for r, out in zip(requests, results)}

    @staticmethod
    def _key(request: Request) -> tuple[int, int]:
        return request.constraint.molecule, request.constraint.conformer

    def _engine_request(self, request: Request, constrained: bool) -> Request:
        if constrained:
            return dataclasses.replace(request, constraint=self.programs[request.constraint.smiles])
        n = self.lengths[self._key(request)]
        sampling = dataclasses.replace(request.sampling, max_new_tokens=n, min_new_tokens=n, ignore_eos=True)
        return dataclasses.replace(request, sampling=sampling, constraint=None)

    def unsupported(self, request: Request) -> str | None:
        return unprepared(request, self.programs, self.name)

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        """A warm-up call (stop_after_steps given) runs the first `slots` requests in full: a constrained
        request's length is its program's."""
        if stop_after_steps is not None:
            requests = requests[: self.slots]
        served, refused = self.split_supported(requests)
        constrained = self.config["constraint"] == "on"
        return itertools.chain(refused, self.engine.stream([self._engine_request(r, constrained) for r in served]))

    def extra_metrics(self) -> dict[str, Any]:
        stats = self.engine.stats.as_dict()
        extra: dict[str, Any] = {"engine": stats, "slots": self.slots, "graph_capture_s": stats.get("capture_s"),
                                 "constraint_setup_s": stats.get("constraint_setup_s"), "warnings": []}
        if self.config["constraint"] == "off":
            extra["warnings"].append("constraint=off: unconstrained outputs at the constrained pass's lengths "
                                     "(a speed reference; its outputs are not conformers)")
        return extra


BACKEND = BackendSpec(
    "inferlab", "the inferlab engine with the conformer constraint inside the captured decode step",
    KNOBS, InferlabConstrainedBackend, scenario="constrained", estimate_s=estimates.inferlab_constrained,
)
