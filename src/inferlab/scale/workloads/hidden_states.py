"""Scale-out adapter of `inferlab hidden-states`: each shard runs workloads.hidden_states on its own input
into its own `shard-NNN.safetensors` (with its resumable `.d/` store); the merge writes one file in input
order with the single-process layout: `layer_<i>` [n, hidden], metadata ids, layers, pool, model, failed,
index. The index beside it (`<output>.index.jsonl`) lists every input id: its row in the output, or its
error. Params: {"load": ModelLoadConfig, "options": HiddenStatesOptions, "backend": WorkloadBackend} as dicts
(each worker chooses the backend as the command would: workloads/backend_choice.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from inferlab.errors import InputError
from inferlab.scale.adapter import ShardContext, WorkloadAdapter
from inferlab.scale.order import OrderIndex
from inferlab.scale.workloads.encoder_workload import encoder_params, model_settings, run_encoder_shard, units_reader
from inferlab.workloads.activation_store import store_folder
from inferlab.workloads.backend_choice import WorkloadBackend
from inferlab.workloads.hf_loading import ModelLoadConfig
from inferlab.workloads.hidden_states import HiddenStatesOptions


def hidden_states_params(load: ModelLoadConfig, options: HiddenStatesOptions,
                         backend: WorkloadBackend = WorkloadBackend()) -> dict[str, Any]:
    return encoder_params(load, options, backend)


def _store_index(output: Path) -> Path:
    return store_folder(output) / "index.jsonl"


def _run_shard(params: dict[str, Any], ctx: ShardContext) -> dict[str, Any]:
    from inferlab.workloads.backend_choice import open_hidden_states
    from inferlab.workloads.hidden_states import collect_hidden_states

    return run_encoder_shard(params, ctx, HiddenStatesOptions, open_hidden_states, collect_hidden_states)


OkRow = tuple[float, int, int, str]  # (input line, shard, row in the shard, id)


def _merge(shard_outputs: list[Path], destination: Path, params: dict[str, Any], order: OrderIndex) -> int:
    """Concatenate the shards' assembled tensors in input order; errors go to the index only."""
    ok: list[OkRow] = []
    errors: list[tuple[float, dict]] = []
    tokens: dict[str, int] = {}
    metadata: dict[str, str] = {}
    for shard, path in enumerate(shard_outputs):
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        for row, row_id in enumerate(json.loads(metadata["ids"])):
            ok.append((order.line_of(row_id), shard, row, row_id))
        with _store_index(path).open(encoding="utf-8") as f:
            for line in f:
                entry = json.loads(line)
                if entry.get("status") == "ok":
                    tokens[str(entry["id"])] = entry.get("tokens")
                else:
                    errors.append((order.line_of(str(entry["id"])), entry))
    if not metadata:
        raise InputError("no shard output to merge")
    layers = json.loads(metadata["layers"])
    ok.sort()
    tensors = _gather(shard_outputs, ok, layers)
    index_path = destination.with_name(destination.name + ".index.jsonl")
    _write_index(index_path, ok, errors, tokens)
    merged_meta = {
        "ids": json.dumps([row_id for *_, row_id in ok], ensure_ascii=False),
        "layers": metadata["layers"],
        "pool": metadata.get("pool", ""),
        "model": metadata.get("model", ""),
        "failed": str(len(errors)),
        "index": str(index_path),
    }
    tmp = destination.with_name(destination.name + ".merge.tmp")
    save_file(tensors, str(tmp), metadata=merged_meta)
    os.replace(tmp, destination)
    return len(ok) + len(errors)


def _gather(shard_outputs: list[Path], ok: list[OkRow], layers: list[int]) -> dict[str, torch.Tensor]:
    """Tensors {layer_<i>: [len(ok), hidden]} with row p taken from the shard and row that ok[p] names."""
    by_shard: dict[int, tuple[list[int], list[int]]] = {}  # shard -> (output positions, rows in the shard)
    for position, (_, shard, row, _) in enumerate(ok):
        positions, rows = by_shard.setdefault(shard, ([], []))
        positions.append(position)
        rows.append(row)
    out: dict[str, torch.Tensor] = {}
    for shard, path in enumerate(shard_outputs):
        positions, rows = by_shard.get(shard, ([], []))
        with safe_open(str(path), framework="pt") as f:
            for layer in layers:
                key = f"layer_{layer}"
                part = f.get_tensor(key)  # [rows in the shard, hidden]
                if key not in out:
                    out[key] = torch.empty((len(ok), part.shape[1]), dtype=part.dtype)
                if positions:
                    out[key][positions] = part[rows]
    return out


def _write_index(path: Path, ok, errors, tokens: dict[str, int]) -> None:
    entries = [(line, {"id": row_id, "status": "ok", "row": row, "tokens": tokens.get(row_id)})
               for row, (line, _, _, row_id) in enumerate(ok)]
    entries += errors
    entries.sort(key=lambda item: item[0])
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for _, entry in entries:
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def _settings(params: dict[str, Any]) -> dict[str, Any]:
    options = params["options"]
    return {**model_settings(params),
            **{k: options[k] for k in ("layers", "pool", "max_length", "truncate", "text_field", "save_dtype")}}


HIDDEN_STATES = WorkloadAdapter(
    "hidden-states", units_reader(HiddenStatesOptions), _run_shard, _merge, _settings,
    output_suffix=".safetensors", progress_file=_store_index,
    final_outputs=lambda output, params: [output, output.with_name(output.name + ".index.jsonl")],
)
