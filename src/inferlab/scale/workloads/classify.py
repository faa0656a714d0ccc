"""Scale-out adapter of `inferlab classify`: each shard runs workloads.classify.classify_file on its own
input and output (resumable by id); the merged file is in input order. Params: {"load": ModelLoadConfig,
"options": ClassifyOptions, "backend": WorkloadBackend} as dicts (classify_params builds them); each worker
chooses the backend as the command would (workloads/backend_choice.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from inferlab.scale.adapter import ShardContext, WorkloadAdapter
from inferlab.scale.params import from_params, to_params
from inferlab.scale.units import UnitPlan
from inferlab.scale.workloads.jsonl_output import merge_jsonl_by_id
from inferlab.scale.workloads.text_units import load_tokenizer, read_jsonl_units
from inferlab.workloads.classify import ClassifyOptions
from inferlab.workloads.backend_choice import WorkloadBackend
from inferlab.workloads.hf_loading import ModelLoadConfig
from inferlab.workloads.rows import text_field_getter


def classify_params(load: ModelLoadConfig, options: ClassifyOptions,
                    backend: WorkloadBackend = WorkloadBackend()) -> dict[str, Any]:
    return {"load": to_params(load), "options": to_params(options), "backend": to_params(backend)}


def _read_units(input_path: Path, params: dict[str, Any]) -> UnitPlan:
    options = from_params(ClassifyOptions, params["options"])
    tokenizer = load_tokenizer(params["load"]["model_dir"])
    return read_jsonl_units(input_path, tokenizer, text_field_getter(options.text_field))


def _run_shard(params: dict[str, Any], ctx: ShardContext) -> dict[str, Any]:
    from inferlab.workloads.backend_choice import open_classifier
    from inferlab.workloads.classify import classify_file

    load = from_params(ModelLoadConfig, {**params["load"], "device": ctx.device})
    options = from_params(ClassifyOptions, params["options"])
    start = time.perf_counter()
    classifier, _ = open_classifier(load, _backend(params), options.max_length)
    load_s = time.perf_counter() - start
    report = classify_file(classifier, ctx.input, ctx.output, options, progress=ctx.progress)
    return {"load_s": load_s, "run_s": report.wall_s, **report.summary()}


def _backend(params: dict[str, Any]) -> WorkloadBackend:
    return from_params(WorkloadBackend, params.get("backend", {}))


def _settings(params: dict[str, Any]) -> dict[str, Any]:
    load, options = params["load"], params["options"]
    return {
        "model": str(Path(load["model_dir"]).resolve()),
        "dtype": load["dtype"],
        "quantization": load["quantization"],
        "backend": params.get("backend", {}).get("backend", "auto"),
        "weights": params.get("backend", {}).get("weights", "auto"),
        "max_length": options["max_length"],
        "truncate": options["truncate"],
        "text_field": options["text_field"],
    }


CLASSIFY = WorkloadAdapter(
    name="classify",
    read_units=_read_units,
    run_shard=_run_shard,
    merge=merge_jsonl_by_id,
    settings=_settings,
)
