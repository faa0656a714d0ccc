"""Backend `vllm` of the `constrained` scenario: conformers through vLLM's structured outputs, the way a
vLLM user constrains them today: one regex per request, built from the conformer template's segments
(workloads/conformers/chemistry/template_regex.py), `StructuredOutputsParams(regex=...)`, and the
structured-outputs backend chosen by the knob `structured_outputs` (xgrammar | guidance). The scenario checks every output
strictly (`template.check`), as for every other backend.

- load: `LLM(...)` with the tokenizer (grammars are compiled against its vocabulary), `max_num_seqs` =
  `slots` rows (0 = batch_size; the engine's rows are refilled the same way), `max_model_len` = the
  scenario's context; vLLM's prefix caching on (its default: the K conformers of a molecule share their
  prompt, as our engine shares it). Start-up is `load_s`.
- prepare: one 1-token request per distinct template, so each regex is compiled once (vLLM's xgrammar
  backend keeps compiled grammars in its cache) before anything is timed, as our engine compiles each
  template's program in `prepare`; then the prefix cache is emptied so no timed prompt was prefilled here.
- generate: one `LLM.generate` over the batch (vLLM refills its `max_num_seqs` rows as requests finish),
  each row sampled as the scenario says, ended by EOS when its regex is complete. A regex constrains text,
  not tokens: copy runs may be tokenised differently from our engine's forced canonical tokens (with random
  weights, into shorter tokens), which `mean_output_tokens` shows; molecules/s is what a user gets.
  A warm-up call (stop_after_steps) runs the batch's first `slots` requests for that many tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from inferlab.bench.backends import estimates, vllm_support
from inferlab.bench.backends.base import BackendSpec, ConstrainedSpec, unprepared
from inferlab.bench.knobs import Knob
from inferlab.types import Request, Result
from inferlab.workloads.backend import Supports, finished_result

KNOBS = (
    *vllm_support.COMMON_KNOBS,
    Knob("structured_outputs", str, "xgrammar", "vLLM's structured-outputs backend for the template regex",
         choices=("xgrammar", "guidance")),
    Knob("slots", int, 256, "vLLM's max_num_seqs (rows decoding at once; finished rows are refilled)", minimum=1),
    Knob("prefix_caching", bool, True, "vLLM's automatic prefix caching (its default; the K conformers of a "
         "molecule share their prompt)"),
)


class VLLMConstrainedBackend(vllm_support.VLLMBackend):
    """Requests carry a ConformerConstraint; each keeps its own sampling."""

    name = "vllm"
    supports = Supports(constraint=True)

    def __init__(self, config: dict[str, Any], spec: ConstrainedSpec) -> None:
        super().__init__(config, spec)
        self.regexes: dict[str, str] = {}  # SMILES -> its template's regex (the K conformers of a molecule share it)
        self.max_model_len = 0
        self.distinct_regexes = 0
        self.validation_s_per_request: float | None = None

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        import json

        from transformers import AutoTokenizer

        self.environment = vllm_support.prepare_environment()
        vllm = vllm_support.import_vllm()
        c = self.config
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.eos_token_ids = frozenset([tokenizer.eos_token_id])
        config = json.loads((model_dir / "config.json").read_text())
        positions = config.get("text_config", config)["max_position_embeddings"]
        self.max_model_len = min(c["context"], positions)
        self.llm = vllm.LLM(
            model=str(model_dir), max_num_seqs=c["slots"], max_model_len=self.max_model_len,
            enable_prefix_caching=c["prefix_caching"],
            structured_outputs_config={"backend": c["structured_outputs"]},
            **vllm_support.engine_arguments(c, device, dtype),
        )

    def prepare(self, requests: list[Request]) -> None:
        from inferlab.workloads.conformers.chemistry.template_regex import template_regex

        first_of_each: list[Request] = []
        for r in requests:
            smiles = r.constraint.smiles
            if smiles not in self.regexes:
                self.regexes[smiles] = template_regex(r.constraint.template.segments)
                first_of_each.append(r)
        self.distinct_regexes = len(self.regexes)
        self.validation_s_per_request = _validation_seconds(self.config["structured_outputs"],
                                                            list(self.regexes.values()))
        self._run(first_of_each, max_tokens=1)  # compiles every grammar once, untimed
        if self.config["prefix_caching"]:
            self.llm.reset_prefix_cache()

    def unsupported(self, request: Request) -> str | None:
        return unprepared(request, self.regexes, self.name) or super().unsupported(request)

    def _run(self, requests: list[Request], max_tokens: int | None = None) -> list[Result]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import StructuredOutputsParams

        prompts, params = [], []
        for r in requests:
            s = r.sampling
            prompts.append(TokensPrompt(prompt_token_ids=list(r.prompt_ids)))
            params.append(SamplingParams(
                n=1, temperature=s.temperature, top_p=s.top_p if not s.greedy else 1.0,
                top_k=s.top_k if not s.greedy else 0, max_tokens=max_tokens or self.max_model_len - len(r.prompt_ids),
                structured_outputs=StructuredOutputsParams(regex=self.regexes[r.constraint.smiles]), detokenize=False,
            ))
        outputs = self.llm.generate(prompts, params, use_tqdm=False) if requests else []
        return [finished_result(r, self._with_eos(o.outputs[0]), self.eos_token_ids) for r, o in zip(requests, outputs)]

    def _with_eos(self, completion: Any) -> list[int]:
        """The row's ids up to and including EOS, whether or not vLLM kept the stop token in token_ids."""
        ids = list(completion.token_ids)
        ended = completion.finish_reason == "stop"
        if ended and not (ids and ids[-1] in self.eos_token_ids):
            ids.append(min(self.eos_token_ids))
        return ids

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        """A warm-up call (stop_after_steps given) runs the first `slots` requests, that many tokens each."""
        if stop_after_steps is not None:
            requests = requests[: self.config["slots"]]
        served, refused = self.split_supported(requests)
        out = self._run(served, max_tokens=stop_after_steps)
        if stop_after_steps is not None and self.config["prefix_caching"]:
            self.llm.reset_prefix_cache()  # no timed prompt may have been prefilled by a warm-up
        return iter(refused + out)

    def extra_metrics(self) -> dict[str, Any]:
        return {**vllm_support.engine_facts(self.llm, self.environment),
                "structured_outputs_backend": self.config["structured_outputs"],
                "distinct_regexes": self.distinct_regexes, "slots": self.config["slots"],
                # vLLM validates every request's regex on the host as it is added (inside the timed call; it
                # overlaps decoding once the first rows run): its mean cost, timed on this cell's regexes
                "regex_validation_s_per_request": self.validation_s_per_request}


def _validation_seconds(backend: str, regexes: list[str]) -> float | None:
    """Mean seconds of vLLM's own per-request validation of a regex (what LLM.generate runs for each request
    before it reaches the engine), or None where vLLM's internals differ from 0.26's."""
    import time

    try:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        if backend == "xgrammar":
            from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar as validate
        else:
            from vllm.v1.structured_output.backend_guidance import validate_guidance_grammar as validate
        sample = regexes[:16]
        start = time.perf_counter()
        for regex in sample:
            validate(SamplingParams(structured_outputs=StructuredOutputsParams(regex=regex)))
        return (time.perf_counter() - start) / len(sample)
    except Exception:  # noqa: BLE001 - a diagnosis, never a reason to fail the cell
        return None


BACKEND = BackendSpec(
    "vllm", "vLLM's structured outputs (a peer): the conformer template as one regex per request, xgrammar or guidance",
    KNOBS, VLLMConstrainedBackend, scenario="constrained", precheck=vllm_support.precheck,
    estimate_s=estimates.vllm_constrained,
)
