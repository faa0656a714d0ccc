"""Backend `hf` of the `constrained` scenario: the seeds' way to generate conformers, kept as the
baseline. transformers `generate` with the per-token Python LogitsProcessor of
workloads/conformers/hf_baseline_processor.py (a skeleton with placeholder coordinates per molecule,
COPY/FREE per position, a Python loop over rows each step).

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
from typing import Any

from inferlab.bench.backends import hf_knobs
from inferlab.bench.backends.base import BackendSpec, require_attention_package
from inferlab.bench.backends.constrained_base import ConformerRequest, ConstrainedSpec
from inferlab.bench.backends.hf_compile import COMPILE_BACKENDS, compile_config_for
from inferlab.bench.knobs import Knob
from inferlab.errors import UnsupportedError

KNOBS = (
    Knob("attn_implementation", str, "sdpa", "transformers attention implementation",
         choices=("eager", "sdpa", "flash_attention_2")),
    Knob("kv_cache", str, "dynamic", "KV cache implementation", choices=("dynamic", "static")),
    Knob("compile", bool, None, "compile the decode step (static cache only); default: on with a static cache, "
         "as HF does by itself"),
    Knob("compile_backend", str, "inductor", "torch.compile backend with compile=true (see the generate hf backend)",
         choices=COMPILE_BACKENDS),
)
PROMPT_PAD_MULTIPLE = 64


class HFConstrainedBackend:
    def __init__(self, config: dict[str, Any], spec: ConstrainedSpec) -> None:
        self.config = config
        self.spec = spec
        self.model: Any = None
        self.tokenizer: Any = None
        self.masks: Any = None
        self.templates: dict[int, Any] = {}  # request index -> BaselineTemplate
        self.prompt_length = 0  # every batch is left-padded to this
        self.max_new_tokens = 0  # every batch generates up to this (the longest skeleton + EOS)
        self.compile_config: Any = None
        self.eos_token_ids: frozenset[int] = frozenset()

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from inferlab.workloads.hf_loading import from_pretrained_for_inference

        c = self.config
        require_attention_package(c["attn_implementation"])
        self.model = from_pretrained_for_inference(AutoModelForCausalLM, model_dir, dtype, c["attn_implementation"],
                                                   device)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.eos_token_ids = frozenset([self.tokenizer.eos_token_id])
        auto_compile = hasattr(self.model, "_valid_auto_compile_criteria")
        if c["compile"] and not auto_compile:
            raise UnsupportedError(f"transformers {transformers.__version__} does not compile generate by itself; "
                                   "the constrained hf backend needs transformers >= 4.48 for compile=true")
        if c["compile"]:
            self.compile_config = compile_config_for(c["compile_backend"], device)

    def prepare(self, requests: list[ConformerRequest]) -> None:
        from inferlab.workloads.conformers.chemistry.profiles import get_profile
        from inferlab.workloads.conformers.evaluation.hf_baseline_processor import (
            SeedsVocabMasks,
            build_baseline_template,
        )

        profile = get_profile(self.spec.profile)
        vocab = self.model.config.get_text_config().vocab_size
        self.masks = SeedsVocabMasks.build(self.tokenizer, vocab, self.model.device)
        by_smiles: dict[str, Any] = {}  # the K conformers of a molecule share its template
        for r in requests:
            if r.smiles not in by_smiles:
                by_smiles[r.smiles] = build_baseline_template(r.smiles, profile, self.tokenizer)
            self.templates[r.index] = by_smiles[r.smiles]
        longest_prompt = max(len(r.prompt_ids) for r in requests)
        self.prompt_length = -(-longest_prompt // PROMPT_PAD_MULTIPLE) * PROMPT_PAD_MULTIPLE
        self.max_new_tokens = max(len(t) for t in by_smiles.values()) + 1

    def generate(self, requests: list[ConformerRequest], stop_after_steps: int | None = None) -> list[list[int]]:
        import torch
        from transformers import StoppingCriteriaList

        from inferlab.bench.backends.hf_stop_after import StopAtLength
        from inferlab.workloads.conformers.evaluation.hf_baseline_run import run_baseline_batch

        s = self.spec
        kwargs: dict[str, Any] = {"do_sample": s.do_sample}
        if s.do_sample:
            kwargs.update(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)
        if self.config["kv_cache"] == "static":
            kwargs["cache_implementation"] = "static"
        if not self.config["compile"] and hasattr(self.model.generation_config, "disable_compile"):
            kwargs["disable_compile"] = True
        if self.compile_config is not None:
            kwargs["compile_config"] = self.compile_config
        if stop_after_steps is not None:
            kwargs["stopping_criteria"] = StoppingCriteriaList([StopAtLength(self.prompt_length + stop_after_steps)])
        torch.manual_seed(s.seed)
        rows = run_baseline_batch(self.model, self.tokenizer, [self.templates[r.index] for r in requests], self.masks,
                                  max_new_tokens=self.max_new_tokens, pad_to_multiple_of=self.prompt_length, **kwargs)
        return [list(row.token_ids) for row in rows]

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
    name="hf",
    description="transformers generate + the seeds' per-token Python LogitsProcessor (the baseline)",
    knobs=KNOBS,
    create=lambda config, spec: HFConstrainedBackend(config, spec),
    validate=lambda cell: hf_knobs.check_cache_and_compile(cell.config),
    resolve=hf_knobs.resolve,
    scenario="constrained",
    precheck=hf_knobs.precheck,
)
