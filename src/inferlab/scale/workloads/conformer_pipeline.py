"""Scale-out adapter of the conformer pipeline (`inferlab conformers generate --gpus N`): each shard is a
`generate_conformers` run on the shard's molecules in a process that sees one GPU, with its own
resumable SDF + JSONL; planning (a molecule is one unit with its K conformers, weighted by its atom
count) and the merge in input order are the shared conformer adapter's (conformers.py).

Params (pipeline_params builds them): "model", "pipeline" (PipelineConfig as JSON), "engine_options"
(EngineConfig fields, device apart: the worker's), and the shared conformer keys "num_conformers",
"smiles_column", "id_column", "rows_output".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inferlab.scale.adapter import ShardContext
from inferlab.scale.params import from_params, to_params
from inferlab.scale.workloads.conformers import conformer_adapter
from inferlab.workloads.conformers.pipeline.config import PipelineConfig

# Settings whose change changes the rows: a rerun with other values is refused (slots, workers, judges and
# memory only change the speed; a request's tokens depend on its seed, not on its batch). max_seq_len is
# not one: it only decides which molecules fit a row, and one that does not is an error row advising a
# larger --max-seq-len with --retry-errors (which is not one either: it reruns those rows), so that rerun
# resumes; an ok row is the same at any length.
RESULT_SETTINGS = ("num_conformers", "profile", "sampling", "seed", "stereo_retries", "smiles_column", "id_column")


def pipeline_params(model: str | Path, config: PipelineConfig, engine_options: Mapping[str, Any]) -> dict[str, Any]:
    options = dict(engine_options)
    options.pop("device", None)  # each worker runs on its own device (ShardContext.device)
    return {
        "model": str(model),
        "pipeline": to_params(config),
        "engine_options": options,
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
    options = {**params["engine_options"], "device": ctx.device}
    summary = generate_conformers(params["model"], ctx.input, ctx.output, config, options,
                                  on_row=lambda row: ctx.progress(1))
    figures = summary.as_dict()
    return {"load_s": summary.engine_start_s, "run_s": summary.wall_s - summary.engine_start_s,
            "rows_ok": summary.conformers_ok, "rows_error": summary.conformers_error, **figures}


def _settings(params: dict[str, Any]) -> dict[str, Any]:
    pipeline = params["pipeline"]
    options = params["engine_options"]
    return {
        "model": str(Path(params["model"]).resolve()),
        **{key: pipeline.get(key) for key in RESULT_SETTINGS},
        "dtype": options.get("dtype", "auto"),
    }


CONFORMERS = conformer_adapter("conformers", _run_shard, _settings, rows_exact=True)
