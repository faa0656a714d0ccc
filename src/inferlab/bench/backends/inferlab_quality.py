"""Backend `inferlab` of the `conformer-quality` scenario: the engine sampling conformers as the model writes
them, with the conformer constraint inside the captured step (constraint=on) or without it (off: the model's
own sampling, up to EOS or the request's output bound; an output that is not a valid conformer is a miss).
kv_dtype=fp8 is the engine's FP8 KV cache, measured on CUDA only: the CPU path emulates the cache, and its
quality would not be the GPU kernels'.

- prepare: each molecule's ConstraintProgram compiled once (constraint=on; the molecule's generations share
  it), then the engine sized for the requests (max_seq_len = the longest prompt + output bound, `slots` rows
  refilled continuously), so its start-up is the cell's `prepare_s`;
- generate: the requests streamed through the engine, each constraint replaced by its program (or removed).
Each request's SamplingParams.seed seeds its draws, so they do not depend on the batch or the row.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any, Iterator

from inferlab.bench.backends.base import BackendSpec, QualitySpec, unprepared
from inferlab.bench.backends.inferlab_generate import DECODE_STEPS_PER_SYNC_KNOB, KV_DTYPE_KNOB
from inferlab.bench.knobs import Knob
from inferlab.engine import EngineConfig
from inferlab.errors import UnsupportedError
from inferlab.types import Request, Result
from inferlab.workloads.engine_backend import EngineBackend

KNOBS = (
    Knob("constraint", str, "on", "on: the GPU constraint; off: the model's own sampling (invalid outputs are misses)",
         choices=("on", "off")),
    Knob("slots", int, 256, "engine rows (KV slots), refilled continuously", minimum=1),
    DECODE_STEPS_PER_SYNC_KNOB,
    KV_DTYPE_KNOB,
)


class InferlabQualityBackend(EngineBackend):
    """The workloads' engine backend, built in prepare once the programs and lengths are known."""

    def __init__(self, config: dict[str, Any], spec: QualitySpec) -> None:
        super().__init__()
        self.config = config
        self.max_seq_len: int | None = None  # set in prepare: the longest prompt + output bound
        self.constrained = config["constraint"] == "on"
        self.model_dir: Path | None = None
        self.device_dtype: tuple[Any, Any] = (None, None)
        self.tokenizer: Any = None
        self.programs: dict[str, Any] = {}  # SMILES -> its ConstraintProgram (None with constraint=off)

    def load(self, model_dir: str | Path, device: Any = None, dtype: Any = None) -> None:
        from inferlab.models.tokenizer_loading import load_hf_tokenizer

        if self.config["kv_dtype"] == "fp8" and getattr(device, "type", str(device)) != "cuda":
            raise UnsupportedError(f"kv_dtype=fp8 on {device}: the FP8 KV cache's quality is measured on CUDA (the "
                                   "CPU path emulates it); run this cell on a GPU")
        self.model_dir, self.device_dtype = Path(model_dir), (device, dtype)
        self.tokenizer = load_hf_tokenizer(model_dir)
        self.eos_token_ids = frozenset([self.tokenizer.eos_token_id])

    def prepare(self, requests: list[Request]) -> None:
        from inferlab.constraints.program import compile_program

        for r in requests:
            smiles = r.constraint.smiles
            if smiles not in self.programs:
                self.programs[smiles] = (compile_program(r.constraint.template.segments, self.tokenizer)
                                         if self.constrained else None)
        self.max_seq_len = max(len(r.prompt_ids) + self._bound(r) for r in requests)
        super().load(self.model_dir, *self.device_dtype)
        self.eos_token_ids = frozenset([self.tokenizer.eos_token_id])  # the templates' EOS, as load set it

    def config_for(self, model_dir: str | Path) -> EngineConfig:
        return EngineConfig(model=str(model_dir), max_slots=self.config["slots"], max_seq_len=self.max_seq_len, seed=0,
                            decode_steps_per_sync=self.config["decode_steps_per_sync"],
                            cuda_graphs=None,  # on for CUDA
                            kv_dtype=self.config["kv_dtype"], decode_text=False)

    def _bound(self, request: Request) -> int:
        program = self.programs[request.constraint.smiles]
        return program.max_new_tokens if program is not None else request.sampling.max_new_tokens

    def unsupported(self, request: Request) -> str | None:
        return unprepared(request, self.programs, self.name)

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        served, refused = self.split_supported(requests)
        engine_requests = [dataclasses.replace(r, constraint=self.programs[r.constraint.smiles]) for r in served]
        return itertools.chain(refused, self.engine.stream(engine_requests))

    def extra_metrics(self) -> dict[str, Any]:
        stats = self.engine.stats.as_dict()
        return {"engine": stats, "slots": self.config["slots"], "graph_capture_s": stats.get("capture_s")}


BACKEND = BackendSpec(
    "inferlab", "the inferlab engine sampling conformers, with the constraint in the captured step or without it",
    KNOBS, InferlabQualityBackend, scenario="conformer-quality",
)
