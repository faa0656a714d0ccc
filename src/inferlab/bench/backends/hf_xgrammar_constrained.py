"""Backend `hf-xgrammar` of the `constrained` scenario: transformers `generate` with xgrammar's own
transformers logits processor (`xgrammar.contrib.hf.LogitsProcessor`), one compiled regex grammar per
request (the conformer template as a regex: workloads/conformers/chemistry/template_regex.py): how an HF
user would constrain conformers with a grammar library today. A peer: xgrammar is imported only in the
cell, and where it cannot be found the cells are `unavailable` rows without a process.

- prepare: the tokenizer's xgrammar info (the model's full vocabulary, EOS as the stop token) and one
  compiled grammar per distinct template (the K conformers of a molecule share it); one shape for every
  batch, as the `hf` baseline does: prompts left-padded to the longest prompt rounded up to 64,
  max_new_tokens = the longest output bound (one token per skeleton character, each hole at most its
  grammar's longest tokenisation, EOS), so a static cache is sized and compiled once;
- generate: a fresh processor per call (xgrammar's is single-use), `generate` until every row's grammar
  has ended with EOS; each step the processor reads every row's last token to the host and fills its
  mask row by row on the CPU (its design);
- knobs as the `hf` baseline: kv_cache, compile, compile_backend, attn_implementation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from inferlab.bench.backends import estimates, hf_knobs
from inferlab.bench.backends.base import BackendSpec, ConstrainedSpec, one_call_of, unprepared
from inferlab.bench.backends.hf_compile import compile_config_for
from inferlab.bench.backends.hf_constrained import PROMPT_PAD_MULTIPLE
from inferlab.bench.backends.hf_model import HFModelBackend, load_with_tokenizer, padded_length
from inferlab.bench.cells import Cell
from inferlab.bench.packages import missing_package
from inferlab.errors import UnsupportedError
from inferlab.types import Request, Result
from inferlab.workloads.backend import Supports, finished_result

KNOBS = (
    hf_knobs.ATTN_IMPLEMENTATION, hf_knobs.KV_CACHE, hf_knobs.COMPILE, hf_knobs.compile_backend_knob(),
)


def precheck(cell: Cell) -> str | None:
    return (missing_package("xgrammar", "backend hf-xgrammar", "pip install xgrammar==0.2.8")
            or hf_knobs.precheck(cell))


class HFXGrammarBackend(HFModelBackend):
    """Requests carry a ConformerConstraint and share their sampling within a call; others are error Results."""

    name = "hf-xgrammar"
    supports = Supports(constraint=True)

    def __init__(self, config: dict[str, Any], spec: ConstrainedSpec) -> None:
        super().__init__(config, spec)
        self.tokenizer: Any = None
        self.compile_config: Any = None
        self.grammars: dict[str, Any] = {}  # SMILES -> xgrammar CompiledGrammar (a molecule's K conformers share it)
        self.prompt_length = 0
        self.max_new_tokens = 0

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        try:
            import xgrammar  # noqa: F401
        except Exception as e:
            raise UnsupportedError(f"xgrammar cannot be imported here: {type(e).__name__}: {e}") from None
        c = self.config
        self.model, self.tokenizer, self.eos_token_ids = load_with_tokenizer(c["attn_implementation"], model_dir,
                                                                             device, dtype)
        if c["compile"]:
            if not hasattr(self.model, "_valid_auto_compile_criteria"):
                raise UnsupportedError("compile=true needs transformers' auto-compile (transformers >= 4.48)")
            self.compile_config = compile_config_for(c["compile_backend"], device)

    def prepare(self, requests: list[Request]) -> None:
        import xgrammar as xgr

        from inferlab.constraints.token_automaton import grammar_set_for
        from inferlab.workloads.conformers.chemistry.profiles import get_profile
        from inferlab.workloads.conformers.chemistry.template_regex import template_regex

        hole_grammar = get_profile(self.spec.profile).hole_grammar
        hole_tokens = grammar_set_for(self.tokenizer, (hole_grammar,)).grammars[hole_grammar].max_tokens
        vocab = self.model.config.get_text_config().vocab_size
        info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=vocab,
                                                  stop_token_ids=sorted(self.eos_token_ids))
        compiler = xgr.GrammarCompiler(info)
        for r in requests:
            smiles = r.constraint.smiles
            if smiles not in self.grammars:
                self.grammars[smiles] = compiler.compile_regex(template_regex(r.constraint.template.segments))
        self.prompt_length = padded_length(max(len(r.prompt_ids) for r in requests), PROMPT_PAD_MULTIPLE)
        self.max_new_tokens = max(len(t.skeleton) + t.num_atoms * hole_tokens + 1
                                  for t in (r.constraint.template for r in requests))

    def unsupported(self, request: Request) -> str | None:
        return unprepared(request, self.grammars, self.name) or super().unsupported(request)

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        import torch
        import xgrammar.contrib.hf
        from transformers import LogitsProcessorList

        from inferlab.bench.backends.hf_generate_options import generate_options, stop_at

        runs, not_run = one_call_of(self, requests)
        if not runs:
            return iter(not_run)
        c, sampling = self.config, runs[0].sampling
        eos = min(self.eos_token_ids)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        width = self.prompt_length
        ids = torch.full((len(runs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(runs), width), dtype=torch.long)
        for row, r in enumerate(runs):  # left padding: generate appends on the right
            ids[row, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
            mask[row, width - len(r.prompt_ids):] = 1
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "eos_token_id": eos, "pad_token_id": pad,
                                  **generate_options(sampling, c["kv_cache"], c["compile"], self.compile_config,
                                                     self.model.generation_config)}
        if stop_after_steps is not None:
            kwargs["stopping_criteria"] = stop_at(width + stop_after_steps)
        processor = xgrammar.contrib.hf.LogitsProcessor([self.grammars[r.constraint.smiles] for r in runs])
        torch.manual_seed(self.spec.seed)
        device = self.model.device
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                      logits_processor=LogitsProcessorList([processor]), **kwargs)
        return iter(not_run + [finished_result(r, row, self.eos_token_ids)
                                       for r, row in zip(runs, out[:, width:].tolist())])

    def extra_metrics(self) -> dict[str, Any]:
        import importlib.metadata

        compiled = hasattr(self.model, "_compiled_call")
        return {"xgrammar_version": importlib.metadata.version("xgrammar"), "compile_observed": compiled,
                "prompt_padded_to": self.prompt_length, "max_new_tokens": self.max_new_tokens,
                "distinct_grammars": len(self.grammars)}


BACKEND = BackendSpec(
    "hf-xgrammar", "transformers generate + xgrammar's HF logits processor (a peer): one compiled template regex per "
    "request",
    KNOBS, HFXGrammarBackend, hf_knobs.validate, hf_knobs.resolve, scenario="constrained",
    precheck=precheck, estimate_s=estimates.hf_xgrammar,
)
