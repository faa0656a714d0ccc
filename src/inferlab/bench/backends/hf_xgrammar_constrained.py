"""Backend `hf-xgrammar` of the `constrained` scenario: transformers `generate` with xgrammar's own
transformers logits processor (`xgrammar.contrib.hf.LogitsProcessor`), one compiled regex grammar per
request (the conformer template as a regex: workloads/conformers/template_regex.py): how an HF user would
constrain conformers with a grammar library today. A peer: xgrammar is imported only in the cell, and
where it cannot be found the cells are `unavailable` rows without a process.

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
from typing import Any

from inferlab.bench.backends import estimates, hf_knobs
from inferlab.bench.backends.base import BackendSpec, require_attention_package
from inferlab.bench.backends.constrained_base import ConformerRequest, ConstrainedSpec
from inferlab.bench.backends.hf_compile import COMPILE_BACKENDS, compile_config_for
from inferlab.bench.backends.hf_constrained import PROMPT_PAD_MULTIPLE
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.packages import missing_package
from inferlab.errors import UnsupportedError

KNOBS = (
    Knob("attn_implementation", str, "sdpa", "transformers attention implementation",
         choices=("eager", "sdpa", "flash_attention_2")),
    Knob("kv_cache", str, "dynamic", "KV cache implementation", choices=("dynamic", "static")),
    Knob("compile", bool, None, "compile the decode step (static cache only); default: on with a static cache"),
    Knob("compile_backend", str, "inductor", "torch.compile backend with compile=true", choices=COMPILE_BACKENDS),
)


def precheck(cell: Cell) -> str | None:
    return (missing_package("xgrammar", "backend hf-xgrammar", "pip install xgrammar==0.2.8")
            or hf_knobs.precheck(cell))


class HFXGrammarBackend:
    kernels_visible = True

    def __init__(self, config: dict[str, Any], spec: ConstrainedSpec) -> None:
        self.config = config
        self.spec = spec
        self.model: Any = None
        self.tokenizer: Any = None
        self.compile_config: Any = None
        self.grammars: dict[int, Any] = {}  # request index -> xgrammar CompiledGrammar
        self.prompt_length = 0
        self.max_new_tokens = 0
        self.eos_token_ids: frozenset[int] = frozenset()

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from inferlab.workloads.hf_loading import from_pretrained_for_inference

        try:
            import xgrammar  # noqa: F401
        except Exception as e:
            raise UnsupportedError(f"xgrammar cannot be imported here: {type(e).__name__}: {e}") from None
        c = self.config
        require_attention_package(c["attn_implementation"])
        self.model = from_pretrained_for_inference(AutoModelForCausalLM, model_dir, dtype, c["attn_implementation"],
                                                   device)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.eos_token_ids = frozenset([self.tokenizer.eos_token_id])
        if c["compile"]:
            if not hasattr(self.model, "_valid_auto_compile_criteria"):
                raise UnsupportedError("compile=true needs transformers' auto-compile (transformers >= 4.48)")
            self.compile_config = compile_config_for(c["compile_backend"], device)

    def prepare(self, requests: list[ConformerRequest]) -> None:
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
        by_smiles: dict[str, Any] = {}
        for r in requests:
            if r.smiles not in by_smiles:
                by_smiles[r.smiles] = compiler.compile_regex(template_regex(r.template.segments))
            self.grammars[r.index] = by_smiles[r.smiles]
        longest_prompt = max(len(r.prompt_ids) for r in requests)
        self.prompt_length = -(-longest_prompt // PROMPT_PAD_MULTIPLE) * PROMPT_PAD_MULTIPLE
        self.max_new_tokens = max(len(r.template.skeleton) + r.template.num_atoms * hole_tokens + 1 for r in requests)

    def generate(self, requests: list[ConformerRequest], stop_after_steps: int | None = None) -> list[list[int]]:
        import torch
        import xgrammar.contrib.hf
        from transformers import LogitsProcessorList, StoppingCriteriaList

        from inferlab.bench.backends.hf_stop_after import StopAtLength

        s, c = self.spec, self.config
        eos = min(self.eos_token_ids)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        width = self.prompt_length
        ids = torch.full((len(requests), width), pad, dtype=torch.long)
        mask = torch.zeros((len(requests), width), dtype=torch.long)
        for row, r in enumerate(requests):  # left padding: generate appends on the right
            ids[row, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
            mask[row, width - len(r.prompt_ids):] = 1
        kwargs: dict[str, Any] = {"do_sample": s.do_sample, "max_new_tokens": self.max_new_tokens,
                                  "eos_token_id": eos, "pad_token_id": pad}
        if s.do_sample:
            kwargs.update(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)
        if c["kv_cache"] == "static":
            kwargs["cache_implementation"] = "static"
        if not c["compile"] and hasattr(self.model.generation_config, "disable_compile"):
            kwargs["disable_compile"] = True
        if self.compile_config is not None:
            kwargs["compile_config"] = self.compile_config
        if stop_after_steps is not None:
            kwargs["stopping_criteria"] = StoppingCriteriaList([StopAtLength(width + stop_after_steps)])
        processor = xgrammar.contrib.hf.LogitsProcessor([self.grammars[r.index] for r in requests])
        torch.manual_seed(s.seed)
        device = self.model.device
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                      logits_processor=LogitsProcessorList([processor]), **kwargs)
        rows = []
        for generated in out[:, width:].tolist():
            end = generated.index(eos) + 1 if eos in generated else len(generated)
            rows.append(generated[:end])
        return rows

    def extra_metrics(self) -> dict[str, Any]:
        import importlib.metadata

        compiled = hasattr(self.model, "_compiled_call")
        return {"xgrammar_version": importlib.metadata.version("xgrammar"), "compile_observed": compiled,
                "prompt_padded_to": self.prompt_length, "max_new_tokens": self.max_new_tokens,
                "distinct_grammars": len({id(g) for g in self.grammars.values()})}


BACKEND = BackendSpec(
    name="hf-xgrammar",
    description="transformers generate + xgrammar's HF logits processor (a peer): one compiled template regex per "
                "request",
    knobs=KNOBS,
    create=lambda config, spec: HFXGrammarBackend(config, spec),
    validate=lambda cell: hf_knobs.check_cache_and_compile(cell.config),
    resolve=hf_knobs.resolve,
    scenario="constrained",
    precheck=precheck,
    estimate_s=estimates.hf_xgrammar,
)
