"""Scale-out adapter of text generation (`inferlab generate`): prompts JSONL in, completions JSONL out.

Backends: "inferlab" and "auto" run the engine's text workload (inferlab.workloads.text.run_text_generation;
"auto" falls back to transformers where the engine refuses the model). "hf" runs workloads.hf_text
(transformers `generate`, its own rows and chat messages) unless `text_workload` is set: then it too runs
through the text workload (BACKENDS["hf"]), with the rows, per-line overrides and prompt ids of
`inferlab generate`, which is how the CLI scales out. A unit's cost is its prompt tokens plus the tokens it
may generate (its own `max_new_tokens` override, else the default).

Params (generate_params builds them): {"model", "backend", "text_workload", "sampling": SamplingParams,
"hf_load": {dtype, attn, quantization}, "hf_options": HFTextOptions, "engine": the EngineConfig or None (each
worker runs it on its own device)}, as JSON. The settings that change the rows are the text workload's
(workloads/text.py result_settings).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from inferlab.engine import EngineConfig
from inferlab.errors import UnsupportedError
from inferlab.inputs.lines import DEFAULT_MAX_LINE_CHARS
from inferlab.jsonl_io import ResumableJsonlWriter, read_jsonl_records
from inferlab.scale.adapter import ShardContext, WorkloadAdapter
from inferlab.scale.params import from_params, to_params
from inferlab.scale.units import UnitPlan
from inferlab.scale.workloads.jsonl_output import merge_jsonl_by_id
from inferlab.scale.workloads.text_units import load_tokenizer, read_jsonl_units
from inferlab.types import SamplingParams
from inferlab.workloads.hf_text import HFTextOptions, prompt_getter

ENGINE_BACKENDS = ("inferlab", "auto")


def generate_params(
    model: str,
    sampling: SamplingParams,
    backend: str = "hf",
    hf_load: dict[str, str] | None = None,
    hf_options: HFTextOptions | None = None,
    engine: EngineConfig | None = None,  # None: the engine's defaults (the "inferlab" and "auto" backends)
    text_workload: bool = False,  # run every backend through workloads.text (the CLI's rows)
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,  # an input line over it is an error row (workloads.text)
) -> dict[str, Any]:
    if backend != "hf" and backend not in ENGINE_BACKENDS:
        raise UnsupportedError(f"generate backend {backend!r} is not known; use hf, inferlab or auto")
    return {
        "model": str(model),
        "backend": backend,
        "text_workload": text_workload,
        "sampling": to_params(sampling),
        "hf_load": {"dtype": "auto", "attn": "sdpa", "quantization": "none", **(hf_load or {})},
        "hf_options": to_params(hf_options or HFTextOptions()),
        "engine": to_params(dataclasses.replace(engine, model=str(engine.model))) if engine is not None else None,
        "max_line_chars": max_line_chars,
    }


def _read_units(input_path: Path, params: dict[str, Any]) -> UnitPlan:
    sampling = from_params(SamplingParams, params["sampling"])
    options = from_params(HFTextOptions, params["hf_options"])
    tokenizer = load_tokenizer(params["model"])
    text_of_prompt = prompt_getter(tokenizer, options.prompt_field, options.messages_field)

    def text_of(data: dict[str, Any]):
        ids = data.get("prompt_ids")
        if isinstance(ids, list):
            return ids
        return text_of_prompt(data)

    def new_tokens(data: dict[str, Any]) -> float:
        value = data.get("max_new_tokens")
        return float(value) if isinstance(value, int) and value > 0 else float(sampling.max_new_tokens)

    return read_jsonl_units(input_path, tokenizer, text_of, extra_tokens=new_tokens)


def _run_shard(params: dict[str, Any], ctx: ShardContext) -> dict[str, Any]:
    sampling = from_params(SamplingParams, params["sampling"])
    if params["backend"] == "hf" and not params.get("text_workload"):
        return _run_hf(params, sampling, ctx)
    return _run_engine(params, sampling, ctx)


def _run_hf(params: dict[str, Any], sampling: SamplingParams, ctx: ShardContext) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    from inferlab.workloads.batching import reorder_jsonl
    from inferlab.workloads.hf_loading import ModelLoadConfig, load_hf_model
    from inferlab.workloads.hf_text import run_hf_generation

    load = ModelLoadConfig(params["model"], device=ctx.device, **params["hf_load"])
    loaded = load_hf_model(load, AutoModelForCausalLM)
    options = from_params(HFTextOptions, params["hf_options"])
    with ResumableJsonlWriter(ctx.output) as writer:
        summary = run_hf_generation(loaded, read_jsonl_records(ctx.input), sampling, writer, options, ctx.progress)
    reorder_jsonl(ctx.output, summary.ids_in_order)
    return {"load_s": loaded.load_s, "run_s": summary.wall_s, **summary.summary()}


def _run_engine(params: dict[str, Any], sampling: SamplingParams, ctx: ShardContext) -> dict[str, Any]:
    from inferlab.workloads import text as text_workload

    engine = _engine(params) or EngineConfig(model=params["model"])
    engine = dataclasses.replace(engine, device=ctx.device)
    load_s: list[float] = []

    def open_backend():
        start = time.perf_counter()
        backend = text_workload.open_backend(params["backend"], engine)
        load_s.append(time.perf_counter() - start)
        return backend

    start = time.perf_counter()
    summary = text_workload.run_text_generation(
        ctx.input, ctx.output, open_backend, sampling, on_row=lambda row: ctx.progress(1),
        max_line_chars=params.get("max_line_chars", DEFAULT_MAX_LINE_CHARS),
    )
    wall_s = time.perf_counter() - start
    loaded = sum(load_s)
    return {"load_s": loaded, "run_s": wall_s - loaded, "rows_written": summary.written,
            "rows_error": summary.errors, "rows_skipped": summary.skipped, "output_tokens": summary.output_tokens}


def _engine(params: dict[str, Any]) -> EngineConfig | None:
    return from_params(EngineConfig, params["engine"]) if params.get("engine") is not None else None


def _settings(params: dict[str, Any]) -> dict[str, Any]:
    from inferlab.workloads.text import result_settings

    return result_settings(params["model"], params["backend"], from_params(SamplingParams, params["sampling"]),
                           _engine(params), params["hf_load"]["dtype"])


GENERATE = WorkloadAdapter("generate", _read_units, _run_shard, merge_jsonl_by_id, _settings)
