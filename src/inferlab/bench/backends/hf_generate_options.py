"""The keyword arguments of one transformers `generate` call that the lab's HF backends share (child process
only): sampling, the KV cache and compile (generate_options), and a stop at a fixed length (stop_at) that
changes no shape (the static cache keeps its size), so a short warm-up or profiled call needs no
recompilation."""

from __future__ import annotations

from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from inferlab.types import SamplingParams


class StopAtLength(StoppingCriteria):
    def __init__(self, length: int) -> None:
        self.length = length  # prompt + generated tokens

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        done = input_ids.shape[1] >= self.length
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


def stop_at(length: int) -> StoppingCriteriaList:
    """Every row ends once it holds `length` tokens (prompt + generated; left padding counts)."""
    return StoppingCriteriaList([StopAtLength(length)])


def generate_options(sampling: SamplingParams, kv_cache: str = "dynamic", compile: bool | None = None, compile_config: Any = None,
                     generation_config: Any = None) -> dict[str, Any]:
    """do_sample and the sampling filters; cache_implementation="static" for a static cache; compile=False
    passes disable_compile where transformers has it (`generation_config` says), None leaves compiling to
    transformers; a compile_config when the backend made one (hf_compile.py)."""
    options: dict[str, Any] = {"do_sample": not sampling.greedy}
    if not sampling.greedy:
        options.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
    if kv_cache == "static":
        options["cache_implementation"] = "static"
    if compile is False and hasattr(generation_config, "disable_compile"):
        options["disable_compile"] = True
    if compile_config is not None:
        options["compile_config"] = compile_config
    return options
