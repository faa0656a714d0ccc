"""Scale-out adapter of `inferlab classify`: each shard runs workloads.classify.classify_file on its own
input and output (resumable by id); the merged file is in input order. Params: {"load": ModelLoadConfig,
"options": ClassifyOptions, "backend": WorkloadBackend} as dicts (classify_params builds them); each worker
chooses the backend as the command would (workloads/backend_choice.py)."""

from __future__ import annotations

from typing import Any

from inferlab.scale.adapter import ShardContext, WorkloadAdapter
from inferlab.scale.workloads.encoder_workload import encoder_params, model_settings, run_encoder_shard, units_reader
from inferlab.scale.workloads.jsonl_output import merge_jsonl_by_id
from inferlab.workloads.backend_choice import WorkloadBackend
from inferlab.workloads.classify import ClassifyOptions
from inferlab.workloads.hf_loading import ModelLoadConfig


def classify_params(load: ModelLoadConfig, options: ClassifyOptions,
                    backend: WorkloadBackend = WorkloadBackend()) -> dict[str, Any]:
    return encoder_params(load, options, backend)


def _run_shard(params: dict[str, Any], ctx: ShardContext) -> dict[str, Any]:
    from inferlab.workloads.backend_choice import open_classifier
    from inferlab.workloads.classify import classify_file

    return run_encoder_shard(params, ctx, ClassifyOptions,
                             lambda load, backend, options: open_classifier(load, backend, options.max_length),
                             classify_file)


def _settings(params: dict[str, Any]) -> dict[str, Any]:
    options = params["options"]
    return {**model_settings(params), **{k: options[k] for k in ("max_length", "truncate", "text_field")}}


CLASSIFY = WorkloadAdapter("classify", units_reader(ClassifyOptions), _run_shard, merge_jsonl_by_id, _settings)
