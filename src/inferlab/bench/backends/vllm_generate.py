"""Backend `vllm` of the `generate` scenario: vLLM's offline `LLM` on the scenario's prompts, as a peer.

Same work as every other backend of the scenario: the same token-id prompts (`TokensPrompt`, no tokenizer:
`skip_tokenizer_init`), exactly `new_tokens` per row (`min_tokens == max_tokens`, EOS listed as a stop token
so min_tokens masks it, as HF's min_new_tokens and our engine do: no EOS ever appears, every row is
counted in full), the same temperature / top-p / top-k. One `LLM.generate` per batch with
`max_num_seqs = batch_size`, so the whole batch decodes together, as in the other backends' rows.

Choices that keep the comparison about the same work (the row records each):
- prefix caching off by default: every timed call repeats the same prompts, and a cache hit would skip
  prefill work the other systems do (knob `prefix_caching`);
- one engine-level seed (`LLM(seed=...)`), as HF's global generator; `request_seeds=true` gives each row
  its own seed (vLLM then draws seeded rows' noise one row at a time, and its FlashInfer sampler steps
  aside). Our engine derives a stream per request from its seed at no cost;
- `max_model_len` = prompt + new tokens (the KV each row needs), vLLM's defaults for the rest: its
  scheduler, block size, torch.compile and CUDA graphs (FULL_AND_PIECEWISE), async scheduling.
Start-up (import, load, compile, graph capture, KV allocation) is `load_s`; the first generate is
`first_call_s`; neither enters the steady figures. vLLM's kernels run in its engine-core process, so the
scenario's kernel profile is skipped (`kernels_visible = False`); the row names vLLM's attention backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from inferlab.bench.backends import estimates, vllm_support
from inferlab.bench.backends.base import BackendSpec
from inferlab.bench.knobs import Knob
from inferlab.types import Request, Result, SamplingParams
from inferlab.workloads.backend import finished_result

KNOBS = (
    *vllm_support.COMMON_KNOBS,
    Knob("prefix_caching", bool, False, "vLLM's automatic prefix caching (off: timed calls repeat the same prompts, "
         "a cache hit would skip prefill the other systems do)"),
    Knob("request_seeds", bool, False, "a seed per request (seed + row) instead of the engine-level seed"),
)


def read_eos_token_ids(model_dir: Path) -> frozenset[int]:
    """EOS ids from the checkpoint's generation_config.json (else config.json), as HF reads them."""
    import json

    for name in ("generation_config.json", "config.json"):
        path = model_dir / name
        if path.is_file():
            eos = json.loads(path.read_text()).get("eos_token_id")
            if eos is not None:
                return frozenset([eos] if isinstance(eos, int) else eos)
    return frozenset()


class VLLMGenerateBackend(vllm_support.VLLMBackend):
    name = "vllm"

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        self.environment = vllm_support.prepare_environment()
        vllm = vllm_support.import_vllm()
        c = self.config
        self.eos_token_ids = read_eos_token_ids(model_dir)
        self.llm = vllm.LLM(
            model=str(model_dir), skip_tokenizer_init=True, max_num_seqs=c["batch_size"],
            max_model_len=c["prompt_tokens"] + self.spec.new_tokens, enable_prefix_caching=c["prefix_caching"],
            **vllm_support.engine_arguments(c, device, dtype),
        )

    def _sampling(self, sampling: SamplingParams, new_tokens: int, row: int) -> Any:
        from vllm import SamplingParams as VllmSamplingParams

        do_sample = not sampling.greedy
        return VllmSamplingParams(
            n=1, temperature=sampling.temperature if do_sample else 0.0, top_p=sampling.top_p if do_sample else 1.0,
            top_k=sampling.top_k if do_sample else 0, max_tokens=new_tokens,
            min_tokens=min(sampling.min_new_tokens, new_tokens),
            stop_token_ids=sorted(self.eos_token_ids),  # masked by min_tokens: never produced before it
            seed=self.spec.seed + row if self.config["request_seeds"] else None, detokenize=False,
        )

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        from vllm.inputs import TokensPrompt

        runs, refused = self.split_supported(requests)
        prompts, params = [], []
        for i, r in enumerate(runs):
            new_tokens = min(stop_after_steps or r.sampling.max_new_tokens, r.sampling.max_new_tokens)
            prompts.append(TokensPrompt(prompt_token_ids=list(r.prompt_ids)))
            params.append(self._sampling(r.sampling, new_tokens, i))
        outputs = self.llm.generate(prompts, params, use_tqdm=False) if runs else []
        return iter(refused + [finished_result(r, list(o.outputs[0].token_ids), self.eos_token_ids)
                               for r, o in zip(runs, outputs)])

    def extra_metrics(self) -> dict[str, Any]:
        return vllm_support.engine_facts(self.llm, self.environment)


BACKEND = BackendSpec(
    "vllm", "vLLM's offline LLM (a peer): token-id prompts, exactly new_tokens per row, the same sampling",
    KNOBS, VLLMGenerateBackend, precheck=vllm_support.precheck, estimate_s=estimates.vllm_generate,
)
