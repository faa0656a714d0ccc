"""Backend `hf`: transformers AutoModelForCausalLM + generate, with every knob the seeds turned.

- attn_implementation eager / sdpa / flash_attention_2 (unavailable, with the reason, without flash-attn)
- sdpa_backend: SDPA forced to one backend by wrapping generate in torch.nn.attention.sdpa_kernel
- kv_cache dynamic / static (cache_implementation="static": HF sizes it prompt + new tokens)
- compile: HF auto-compiles the decode step of a static cache on accelerators; the knob makes that
  explicit: off passes disable_compile=True, on requires it (and compiles by hand on transformers
  versions without auto-compile); compile_backend picks torch.compile's backend (hf_compile.py). The
  row reports whether a compiled forward really ran, and inductor's cache hits.
- processor none / python (backends/python_logits_processor.py)

Works with transformers 4.46+ and 5.x. Heavy imports happen in the child only.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

from inferlab.bench.backends import hf_knobs
from inferlab.bench.backends.base import BackendSpec, GenerateSpec, one_call_of
from inferlab.bench.backends.hf_compile import compile_config_for, compile_forward_by_hand
from inferlab.bench.backends.hf_model import HFModelBackend, eos_and_pad, load_causal_lm
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.errors import ConfigError, UnsupportedError
from inferlab.types import Request, Result, SamplingParams
from inferlab.workloads.backend import finished_result

KNOBS = (
    hf_knobs.ATTN_IMPLEMENTATION,
    Knob("sdpa_backend", str, "auto", "force SDPA to one backend (only with attn_implementation=sdpa)",
         choices=("auto", "flash", "efficient", "cudnn", "math")),
    hf_knobs.KV_CACHE, hf_knobs.COMPILE,
    hf_knobs.compile_backend_knob("torch.compile backend with compile=true: inductor (HF's default: CUDA graphs); "
                                  "aot_eager / eager only trace (diagnosis, CPU checks)"),
    Knob("processor", str, "none", "a per-token Python LogitsProcessor in the seeds' style", choices=("none", "python"),
         baseline=("python",)),
)


def validate(cell: Cell) -> None:
    c = cell.config
    if c["sdpa_backend"] != "auto" and c["attn_implementation"] != "sdpa":
        raise ConfigError(f"sdpa_backend={c['sdpa_backend']} needs attn_implementation=sdpa "
                          f"(got {c['attn_implementation']}); set sdpa_backend=auto or attn_implementation=sdpa")
    hf_knobs.check_cache_and_compile(c)


def requested_kernel(c: dict[str, Any]) -> str:
    if c["attn_implementation"] == "sdpa":
        return f"sdpa:{c['sdpa_backend']}"
    return c["attn_implementation"]


class HFGenerateBackend(HFModelBackend):
    """Requests of one call share their sampling and their prompt length (the scenario's prompts need no
    padding); others are error Results."""

    name = "hf"

    def __init__(self, config: dict[str, Any], spec: GenerateSpec) -> None:
        super().__init__(config, spec)
        self.pad_token_id: int | None = None
        self.auto_compile = False  # transformers compiles the decode step itself
        self.manual_compile = False  # we wrapped forward in torch.compile (transformers without auto-compile)
        self.compile_config: Any = None  # passed to generate when not transformers' default

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        import transformers

        c = self.config
        self.model = load_causal_lm(c["attn_implementation"], model_dir, device, dtype)
        self.eos_token_ids, self.pad_token_id = eos_and_pad(self.model)
        gen = self.model.generation_config
        self.auto_compile = hasattr(self.model, "_valid_auto_compile_criteria")
        if self.auto_compile and not c["compile"] and not hasattr(gen, "disable_compile"):
            raise UnsupportedError(f"transformers {transformers.__version__} auto-compiles static caches and has no "
                                   "disable_compile; compile=false cannot be honoured (upgrade transformers)")
        if c["compile"] and self.auto_compile:
            self.compile_config = compile_config_for(c["compile_backend"], device)
        elif c["compile"]:
            if device.type != "cuda":
                raise UnsupportedError(f"compile=true on CPU needs transformers' auto-compile (transformers "
                                       f"{transformers.__version__} has none); set compile=false")
            compile_forward_by_hand(self.model, c["compile_backend"])
            self.manual_compile = True

    def _generate_kwargs(self, sampling: SamplingParams, prompt_len: int,
                         stop_after_steps: int | None) -> dict[str, Any]:
        from transformers import LogitsProcessorList

        from inferlab.bench.backends.hf_generate_options import generate_options, stop_at

        c = self.config
        kwargs: dict[str, Any] = {"max_new_tokens": sampling.max_new_tokens, "min_new_tokens": sampling.min_new_tokens,
                                  "pad_token_id": self.pad_token_id,
                                  **generate_options(sampling, c["kv_cache"], c["compile"], self.compile_config,
                                                     self.model.generation_config)}
        if c["processor"] == "python":
            from inferlab.bench.backends.python_logits_processor import make_processor

            vocab = self.model.config.get_text_config().vocab_size
            kwargs["logits_processor"] = LogitsProcessorList([make_processor(vocab, self.eos_token_ids,
                                                                             self.spec.seed)])
        if stop_after_steps is not None:
            kwargs["stopping_criteria"] = stop_at(prompt_len + stop_after_steps)
        return kwargs

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        import torch

        runs, not_run = one_call_of(self, requests, same_length=True)
        if not runs:
            return iter(not_run)
        prompt_ids = torch.tensor([r.prompt_ids for r in runs], device=self.model.device)  # [batch, prompt]
        prompt_len = prompt_ids.shape[1]
        kwargs = self._generate_kwargs(runs[0].sampling, prompt_len, stop_after_steps)
        torch.manual_seed(self.spec.seed)
        with self._sdpa_context():
            out = self.model.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids), **kwargs)
        rows = out[:, prompt_len:].tolist()  # [batch, new tokens]
        return iter(not_run + [finished_result(r, row, self.eos_token_ids) for r, row in zip(runs, rows)])

    def _sdpa_context(self) -> Any:
        backend = self.config["sdpa_backend"]
        if backend == "auto":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        chosen = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                  "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[backend]
        return sdpa_kernel([chosen])

    def extra_metrics(self) -> dict[str, Any]:
        compiled = hasattr(self.model, "_compiled_call") or self.manual_compile
        warnings = []
        if self.config["compile"] and not compiled:
            warnings.append("compile=true but transformers ran no compiled forward: the figures are uncompiled")
        if not self.config["compile"] and compiled:
            warnings.append("compile=false but a compiled forward ran")
        extra: dict[str, Any] = {
            "attention_kernel_requested": requested_kernel(self.config),
            "compile_observed": compiled,
            "compile_path": "transformers auto-compile" if self.auto_compile else "torch.compile(model.forward)",
            "warnings": warnings,
        }
        if compiled:
            from inferlab.bench.compile_watch import inductor_cache_counts

            extra.update(inductor_cache_counts())  # a cache hit shortens first_call_s
        return extra


BACKEND = BackendSpec(
    "hf", "transformers generate: attention implementation, forced SDPA backend, static/dynamic KV, compile, "
    "Python processor",
    KNOBS, HFGenerateBackend, validate, hf_knobs.resolve, precheck=hf_knobs.precheck,
)
