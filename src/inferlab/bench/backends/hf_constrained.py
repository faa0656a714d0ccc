"""Backend `hf` of the `constrained` scenario: the seeds' way to generate conformers, kept as the
baseline. transformers `generate` with the per-token Python LogitsProcessor of
workloads/conformers/evaluation/hf_baseline_processor.py (a skeleton with placeholder coordinates per
molecule, COPY/FREE per position, a Python loop over rows each step).

- prepare: each request's baseline template (its skeleton tokenised once per molecule), the
  vocabulary masks, and one shape for every batch: prompts left-padded to the longest prompt rounded
  up to 64 (the seeds padded to multiples of 64) and max_new_tokens = the longest skeleton + 1 (EOS),
  so a static cache is sized and compiled once;
- kv_cache dynamic / static, compile (default: on exactly for a static cache, as HF does),
  compile_backend, attn_implementation.
Heavy imports happen in the child only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from inferlab.bench.backends import hf_knobs
from inferlab.bench.backends.base import BackendSpec, ConstrainedSpec, one_call_of, unprepared
from inferlab.bench.backends.hf_compile import compile_config_for
from inferlab.bench.backends.hf_model import HFModelBackend, load_with_tokenizer, padded_length
from inferlab.errors import UnsupportedError
from inferlab.types import Request, Result
from inferlab.workloads.backend import Supports, finished_result

KNOBS = (
    hf_knobs.ATTN_IMPLEMENTATION, hf_knobs.KV_CACHE, hf_knobs.COMPILE,
    hf_knobs.compile_backend_knob("torch.compile backend with compile=true (see the generate hf backend)"),
)
PROMPT_PAD_MULTIPLE = 64


class HFConstrainedBackend(HFModelBackend):
    """Requests carry a ConformerConstraint and share their sampling within a call; others are error Results."""

    name = "hf"
    supports = Supports(constraint=True)

    def __init__(self, config: dict[str, Any], spec: ConstrainedSpec) -> None:
        super().__init__(config, spec)
        self.tokenizer: Any = None
        self.masks: Any = None
        self.templates: dict[str, Any] = {}  # SMILES -> BaselineTemplate (the K conformers of a molecule share it)
        self.prompt_length = 0  # every batch is left-padded to this
        self.max_new_tokens = 0  # every batch generates up to this (the longest skeleton + EOS)
        self.compile_config: Any = None

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        import transformers

        c = self.config
        self.model, self.tokenizer, self.eos_token_ids = load_with_tokenizer(c["attn_implementation"], model_dir,
                                                                             device, dtype)
        auto_compile = hasattr(self.model, "_valid_auto_compile_criteria")
        if c["compile"] and not auto_compile:
            raise UnsupportedError(f"transformers {transformers.__version__} does not compile generate by itself; "
                                   "the constrained hf backend needs transformers >= 4.48 for compile=true")
        if c["compile"]:
            self.compile_config = compile_config_for(c["compile_backend"], device)

    def prepare(self, requests: list[Request]) -> None:
        from inferlab.workloads.conformers.chemistry.profiles import get_profile
        from inferlab.workloads.conformers.evaluation.hf_baseline_processor import (
            SeedsVocabMasks,
            build_baseline_template,
        )

        profile = get_profile(self.spec.profile)
        vocab = self.model.config.get_text_config().vocab_size
        self.masks = SeedsVocabMasks.build(self.tokenizer, vocab, self.model.device)
        for r in requests:
            smiles = r.constraint.smiles
            if smiles not in self.templates:
                self.templates[smiles] = build_baseline_template(smiles, profile, self.tokenizer)
        self.prompt_length = padded_length(max(len(r.prompt_ids) for r in requests), PROMPT_PAD_MULTIPLE)
        self.max_new_tokens = max(len(t) for t in self.templates.values()) + 1

    def unsupported(self, request: Request) -> str | None:
        return unprepared(request, self.templates, self.name) or super().unsupported(request)

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        import torch

        from inferlab.bench.backends.hf_generate_options import generate_options, stop_at
        from inferlab.workloads.conformers.evaluation.hf_baseline_run import run_baseline_batch

        runs, not_run = one_call_of(self, requests)
        if not runs:
            return iter(not_run)
        c = self.config
        kwargs = generate_options(runs[0].sampling, c["kv_cache"], c["compile"], self.compile_config,
                                  self.model.generation_config)
        if stop_after_steps is not None:
            kwargs["stopping_criteria"] = stop_at(self.prompt_length + stop_after_steps)
        torch.manual_seed(self.spec.seed)
        templates = [self.templates[r.constraint.smiles] for r in runs]
        rows = run_baseline_batch(self.model, self.tokenizer, templates, self.masks, max_new_tokens=self.max_new_tokens,
                                  pad_to_multiple_of=self.prompt_length, **kwargs)
        return iter(not_run + [finished_result(r, list(row.token_ids), self.eos_token_ids)
                                       for r, row in zip(runs, rows)])

    def extra_metrics(self) -> dict[str, Any]:
        compiled = hasattr(self.model, "_compiled_call")
        extra: dict[str, Any] = {"compile_observed": compiled, "prompt_padded_to": self.prompt_length,
                                 "max_new_tokens": self.max_new_tokens, "warnings": []}
        if self.config["compile"] and not compiled:
            extra["warnings"].append("compile=true but transformers ran no compiled forward: the figures are uncompiled")
        if compiled:
            from inferlab.bench.compile_watch import inductor_cache_counts

            extra.update(inductor_cache_counts())
        return extra


BACKEND = BackendSpec(
    "hf", "transformers generate + the seeds' per-token Python LogitsProcessor (the baseline)",
    KNOBS, HFConstrainedBackend, hf_knobs.validate, hf_knobs.resolve, scenario="constrained",
    precheck=hf_knobs.precheck,
)
