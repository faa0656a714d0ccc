"""Backend `inferlab` of the `constrained` scenario: our engine with the conformer constraint on the device.

- prepare: compiles each molecule's ConstraintProgram once (the K conformers of a molecule share it),
  then builds the engine sized for the measured requests (max_seq_len = the longest prompt + program
  bound), so engine start-up (weights, Triton JIT, GEMM choice, graph capture) lands in `prepare_s`;
- generate: one Engine.generate over the batch; `slots` rows (0 = as many as the batch has requests),
  refilled continuously when the batch has more requests than rows;
- constraint=off: the same requests without the constraint, each asked for exactly the number of tokens a
  constrained pass over the same requests produced (that pass runs in prepare, untimed), so the two
  cells compare the step's cost at equal output lengths (its outputs are not conformers: validity ~0);
- kv_dtype=fp8: the engine's FP8 KV cache (the row's engine stats name it: engine.kv_dtype).
A warm-up call (stop_after_steps given) generates the batch's first `slots` requests in full: a
constrained request's length is its program's, so there is no shorter call with the same shapes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferlab.bench.backends import estimates
from inferlab.bench.backends.base import BackendSpec
from inferlab.bench.backends.constrained_base import ConformerRequest, ConstrainedSpec
from inferlab.bench.knobs import Knob

KNOBS = (
    Knob("slots", int, 0, "engine rows (KV slots); 0 = the scenario's batch_size", minimum=0),
    Knob("constraint", str, "on", "on: the GPU constraint; off: unconstrained at the constrained pass's lengths",
         choices=("on", "off"), baseline=("off",)),
    Knob("decode_steps_per_sync", int, 16, "decode steps between host reads of the finished flags", minimum=1),
    Knob("kv_dtype", str, "auto", "KV cache: auto (the model dtype) or fp8 (e4m3 + per-position scales; CUDA >= 8.9)",
         choices=("auto", "fp8")),
)


class InferlabConstrainedBackend:
    def __init__(self, config: dict[str, Any], spec: ConstrainedSpec) -> None:
        self.config = config
        self.spec = spec
        self.model_dir: Path | None = None
        self.device: Any = None
        self.dtype_name = ""
        self.tokenizer: Any = None
        self.engine: Any = None
        self.programs: dict[int, Any] = {}  # request index -> ConstraintProgram
        self.lengths: dict[int, int] = {}  # request index -> tokens of its constrained output (constraint=off)
        self.eos_token_ids: frozenset[int] = frozenset()
        self.calls = 0

    @property
    def slots(self) -> int:
        return self.config["slots"] or self.config["batch_size"]

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        import torch
        from inferlab.models.tokenizer_loading import load_hf_tokenizer

        self.model_dir, self.device = model_dir, device
        self.dtype_name = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[dtype]
        self.tokenizer = load_hf_tokenizer(model_dir)
        self.eos_token_ids = frozenset([self.tokenizer.eos_token_id])

    def prepare(self, requests: list[ConformerRequest]) -> None:
        from inferlab.constraints.program import compile_program
        from inferlab.engine import Engine, EngineConfig

        by_smiles: dict[str, Any] = {}
        for r in requests:
            if r.smiles not in by_smiles:
                by_smiles[r.smiles] = compile_program(r.template.segments, self.tokenizer)
            self.programs[r.index] = by_smiles[r.smiles]
        longest = max(len(r.prompt_ids) + self.programs[r.index].max_new_tokens for r in requests)
        self.engine = Engine(EngineConfig(
            model=str(self.model_dir), device=str(self.device), dtype=self.dtype_name, max_slots=self.slots,
            max_seq_len=longest, seed=self.spec.seed, decode_steps_per_sync=self.config["decode_steps_per_sync"],
            cuda_graphs=self.device.type == "cuda", kv_dtype=self.config["kv_dtype"], decode_text=False,
        ))
        if self.config["constraint"] == "off":
            results = self.engine.generate(self._requests(requests, constrained=True))
            self.lengths = {r.index: len(out.token_ids) for r, out in zip(requests, results)}

    def _requests(self, requests: list[ConformerRequest], constrained: bool) -> list[Any]:
        from inferlab.types import Request, SamplingParams

        s = self.spec
        temperature = s.temperature if s.do_sample else 0.0
        self.calls += 1
        out = []
        for r in requests:
            if constrained:
                sampling = SamplingParams(temperature=temperature, top_p=s.top_p, top_k=s.top_k)
                out.append(Request(id=f"{self.calls}-{r.index}", prompt_ids=r.prompt_ids, sampling=sampling,
                                   constraint=self.programs[r.index]))
            else:
                n = self.lengths[r.index]
                sampling = SamplingParams(temperature=temperature, top_p=s.top_p, top_k=s.top_k, max_new_tokens=n,
                                          min_new_tokens=n, ignore_eos=True)
                out.append(Request(id=f"{self.calls}-{r.index}", prompt_ids=r.prompt_ids, sampling=sampling))
        return out

    def generate(self, requests: list[ConformerRequest], stop_after_steps: int | None = None) -> list[list[int]]:
        if stop_after_steps is not None:
            requests = requests[: self.slots]
        results = self.engine.generate(self._requests(requests, constrained=self.config["constraint"] == "on"))
        return [list(r.token_ids) for r in results]

    def close(self) -> None:
        """End the engine's life (Engine.close): the scenario calls it after its last use."""
        if self.engine is not None:
            self.engine.close()

    def extra_metrics(self) -> dict[str, Any]:
        stats = self.engine.stats.as_dict()
        extra: dict[str, Any] = {"engine": stats, "slots": self.slots, "graph_capture_s": stats.get("capture_s"),
                                 "constraint_setup_s": stats.get("constraint_setup_s"), "warnings": []}
        if self.config["constraint"] == "off":
            extra["warnings"].append("constraint=off: unconstrained outputs at the constrained pass's lengths "
                                     "(a speed reference; its outputs are not conformers)")
        return extra


BACKEND = BackendSpec(
    name="inferlab",
    description="the inferlab engine with the conformer constraint inside the captured decode step",
    knobs=KNOBS,
    create=lambda config, spec: InferlabConstrainedBackend(config, spec),
    scenario="constrained",
    estimate_s=estimates.inferlab_constrained,
)
