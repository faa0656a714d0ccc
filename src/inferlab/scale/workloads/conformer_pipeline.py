"""Scale-out adapter of the conformer pipeline (`inferlab conformers generate --gpus N`): each shard is a
`generate_conformers` run on the shard's molecules in a process that sees one GPU, with its own
resumable SDF + JSONL; planning (a molecule is one unit with its K conformers, weighted by its atom
count) and the merge in input order are the shared conformer adapter's (conformers.py).

Params (pipeline_params builds them): "model", "pipeline" (PipelineConfig as JSON), "engine" (the
EngineConfig as JSON; each worker runs it on its own device), and the shared conformer keys
"num_conformers", "smiles_column", "id_column", "rows_output". The settings that change the rows are the
pipeline's (pipeline/config.py result_settings).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from inferlab.engine import EngineConfig
from inferlab.scale.adapter import ShardContext
from inferlab.scale.params import from_params, to_params
from inferlab.scale.workloads.conformers import conformer_adapter
from inferlab.workloads.conformers.pipeline.config import PipelineConfig, result_settings


def pipeline_params(engine: EngineConfig, config: PipelineConfig) -> dict[str, Any]:
    return {
        "model": str(engine.model),
        "pipeline": to_params(config),
        "engine": to_params(dataclasses.replace(engine, model=str(engine.model))),
        "num_conformers": config.num_conformers,
        "smiles_column": config.smiles_column,
        "id_column": config.id_column,
        "rows_output": config.rows_output,
    }


def _run_shard(params: dict[str, Any], ctx: ShardContext) -> dict[str, Any]:
    from inferlab.workloads.conformers.pipeline.generate import generate_conformers

    config = from_params(PipelineConfig, params["pipeline"])
    # the shard's JSONL sits beside its SDF (the merge writes the user's rows_output)
    config = dataclasses.replace(config, rows_output=None, cpu_cores=config.cpu_cores or ctx.threads)
    engine = dataclasses.replace(from_params(EngineConfig, params["engine"]), device=ctx.device)
    summary = generate_conformers(engine, ctx.input, ctx.output, config, on_row=lambda row: ctx.progress(1))
    figures = summary.as_dict()
    return {"load_s": summary.engine_start_s, "run_s": summary.wall_s - summary.engine_start_s,
            "rows_ok": summary.conformers_ok, "rows_error": summary.conformers_error, **figures}


def _settings(params: dict[str, Any]) -> dict[str, Any]:
    return result_settings(from_params(EngineConfig, params["engine"]), from_params(PipelineConfig, params["pipeline"]))


CONFORMERS = conformer_adapter("conformers", _run_shard, _settings, rows_exact=True)
