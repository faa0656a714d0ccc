"""What the scale-out adapters of classify and hidden-states share: their params ({"load": ModelLoadConfig,
"options": the workload's options, "backend": WorkloadBackend} as dicts), their units (one per JSONL line),
a shard's run (open the workload's backend as the command would, then run the shard's file) and the
settings of the model and backend."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferlab.scale.adapter import ShardContext
from inferlab.scale.params import from_params, to_params
from inferlab.scale.units import UnitPlan
from inferlab.scale.workloads.text_units import load_tokenizer, read_jsonl_units
from inferlab.workloads.backend_choice import WorkloadBackend
from inferlab.workloads.hf_loading import ModelLoadConfig
from inferlab.workloads.rows import text_field_getter


def encoder_params(load: ModelLoadConfig, options: Any, backend: WorkloadBackend = WorkloadBackend()) -> dict[str, Any]:
    return {"load": to_params(load), "options": to_params(options), "backend": to_params(backend)}


def units_reader(options_type: type) -> Callable[[Path, dict[str, Any]], UnitPlan]:
    """read_units of a workload whose options name the JSONL field that holds the text (text_field)."""
    def read_units(input_path: Path, params: dict[str, Any]) -> UnitPlan:
        options = from_params(options_type, params["options"])
        tokenizer = load_tokenizer(params["load"]["model_dir"])
        return read_jsonl_units(input_path, tokenizer, text_field_getter(options.text_field))
    return read_units


def run_encoder_shard(params: dict[str, Any], ctx: ShardContext, options_type: type,
                      open_backend: Callable[[ModelLoadConfig, WorkloadBackend, Any], Any],
                      run_file: Callable[..., Any]) -> dict[str, Any]:
    """Open the backend on the shard's device (open_backend(load, backend, options) -> (backend, choice)),
    then run_file(backend, input, output, options, progress=...) -> a report with wall_s and summary()."""
    load = from_params(ModelLoadConfig, {**params["load"], "device": ctx.device})
    options = from_params(options_type, params["options"])
    start = time.perf_counter()
    backend, _ = open_backend(load, from_params(WorkloadBackend, params.get("backend", {})), options)
    load_s = time.perf_counter() - start
    report = run_file(backend, ctx.input, ctx.output, options, progress=ctx.progress)
    return {"load_s": load_s, "run_s": report.wall_s, **report.summary()}


def model_settings(params: dict[str, Any]) -> dict[str, Any]:
    """The settings of the model and the backend that change results (the workload adds its options')."""
    load, backend = params["load"], params.get("backend", {})
    return {
        "model": str(Path(load["model_dir"]).resolve()),
        "dtype": load["dtype"],
        "quantization": load["quantization"],
        "backend": backend.get("backend", "auto"),
        "weights": backend.get("weights", "auto"),
    }
