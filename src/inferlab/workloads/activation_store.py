"""Resumable on-disk store of activations: shards as chunks finish, one assembled file at the end.

Layout for `--output acts.safetensors`:
  acts.safetensors.d/run.json                 the settings the shards were made with (checked on resume)
  acts.safetensors.d/shard-00001.safetensors  tensors layer_<i> [rows, hidden]; written whole, then renamed
                                              (save_atomically; the assembled file too)
  acts.safetensors.d/index.jsonl              one line per finished id: its shard and row, or its error
  acts.safetensors                            tensors layer_<i> [n, hidden] in input order; metadata: ids (JSON
                                              list, same order), layers, pool, model, failed count

Ragged rows (one vector per generated token, `inferlab generate --collect-pool all`): a shard's layer_<i>
holds its rows' vectors one after another ([sum of lengths, hidden]) and each index line says where its
row starts and how many vectors it has; the assembled file then holds layer_<i> [total, hidden] and
`offsets` [n + 1] int64 (row k is layer_<i>[offsets[k]:offsets[k + 1]]).

An id is done once its index line exists; the index line is written after its shard is renamed into place,
so a crash leaves at worst an orphan shard (ignored; its rows are recomputed). An id written twice (a
workload that recomputes a row) counts by its last line. The folder and run.json are made by the first
write; a rerun compares its settings with run.json's after a JSON round trip (outputs/manifest.py), so
the same command resumes and a changed setting is named. Owns only files: no model.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from inferlab.errors import ConfigError, write_failed
from inferlab.inputs.fingerprints import FingerprintSet
from inferlab.jsonl_io import ResumableJsonlWriter
from inferlab.outputs.atomic import write_json_atomic
from inferlab.outputs.manifest import json_ready, setting_changes
from inferlab.outputs.paths import resolved, temporary_path

_SHARD_RE = re.compile(r"^shard-(\d+)\.safetensors$")


def layer_key(layer: int) -> str:
    return f"layer_{layer}"


def store_folder(output_path: str | Path) -> Path:
    """The shard folder beside the assembled file: `acts.safetensors.d` for `acts.safetensors`."""
    p = Path(output_path)
    return p.with_name(p.name + ".d")


class ActivationStore:
    def __init__(self, output_path: str | Path, run_settings: dict[str, Any]) -> None:
        self.output_path = Path(output_path)
        self.dir = store_folder(self.output_path)
        self.settings = json_ready(run_settings)
        self._check_settings()
        self.index = ResumableJsonlWriter(self.dir / "index.jsonl")
        numbers = [int(m.group(1)) for p in self._files() if (m := _SHARD_RE.match(p.name))]
        self._next_shard = max(numbers, default=0) + 1

    @property
    def done_ids(self) -> FingerprintSet:
        return self.index.done

    def _files(self) -> list[Path]:
        return list(self.dir.iterdir()) if self.dir.is_dir() else []

    def _check_settings(self) -> None:
        path = self.dir / "run.json"
        if path.exists():
            changed = setting_changes(json.loads(path.read_text()), self.settings, "then")
            if changed:
                raise ConfigError(
                    f"{self.dir} holds shards made with other settings ({'; '.join(changed)}); rerun with those "
                    "settings to resume, or use another --output (the CLI's --overwrite starts over)"
                )

    def _begin(self) -> None:
        """Before the first write: the folder and the settings it is written with."""
        if not (self.dir / "run.json").exists():
            write_json_atomic(self.dir / "run.json", self.settings)

    def write_error(self, record: dict[str, Any]) -> None:
        self._begin()
        self.index.write(record)

    def write_shard(self, ids: list[str], tokens: list[int], tensors: dict[int, torch.Tensor],
                    lengths: list[int] | None = None) -> str:
        """Write one shard and then its index lines: tensors {layer: [len(ids), hidden]}, or with `lengths`
        (ragged rows) {layer: [sum(lengths), hidden]}, row k's vectors following row k - 1's."""
        if not ids:
            return ""
        self._begin()
        name = f"shard-{self._next_shard:05d}.safetensors"
        self._next_shard += 1
        save_atomically({layer_key(k): v.contiguous() for k, v in tensors.items()}, self.dir / name)
        start = 0
        for row, (row_id, n_tokens) in enumerate(zip(ids, tokens)):
            entry = {"id": row_id, "status": "ok", "shard": name, "row": row, "tokens": n_tokens}
            if lengths is not None:
                entry.update(start=start, length=lengths[row])
                start += lengths[row]
            self.index.write(entry)
        return name

    def close(self) -> None:
        self.index.close()

    def _read_index(self) -> dict[str, dict[str, Any]]:
        rows: dict[str, dict[str, Any]] = {}
        if not (self.dir / "index.jsonl").exists():  # nothing was written (an input without rows)
            return rows
        with (self.dir / "index.jsonl").open(encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                rows[str(row["id"])] = row  # the last line of an id wins (it was recomputed)
        return rows

    def assemble(self, ids_in_order: Iterable[str], layers: tuple[int, ...], hidden_size: int,
                 dtype: torch.dtype) -> int:
        """Write the final file in input order from the shards; returns the number of rows in it."""
        ids_in_order = list(ids_in_order)
        index = self._read_index()
        ok_ids = [i for i in ids_in_order if index.get(i, {}).get("status") == "ok"]
        failed = sum(1 for i in ids_in_order if index.get(i, {}).get("status") == "error")
        ragged = any("length" in index[i] for i in ok_ids)
        lengths = [int(index[i]["length"]) if ragged else 1 for i in ok_ids]
        offsets = torch.zeros(len(ok_ids) + 1, dtype=torch.int64)
        offsets[1:] = torch.tensor(lengths, dtype=torch.int64).cumsum(0)
        out = {layer: torch.empty((int(offsets[-1]), hidden_size), dtype=dtype) for layer in layers}
        by_shard: dict[str, tuple[list[int], list[int]]] = {}  # shard -> (output rows, shard rows)
        for position, row_id in enumerate(ok_ids):
            entry = index[row_id]
            first = int(entry["start"]) if ragged else int(entry["row"])
            targets, sources = by_shard.setdefault(entry["shard"], ([], []))
            targets += range(int(offsets[position]), int(offsets[position + 1]))
            sources += range(first, first + lengths[position])
        for shard, (targets, sources) in by_shard.items():
            with safe_open(str(self.dir / shard), framework="pt") as f:
                for layer in layers:
                    out[layer][targets] = f.get_tensor(layer_key(layer))[sources].to(dtype)
        metadata = {
            "ids": json.dumps(ok_ids, ensure_ascii=False),
            "layers": json.dumps(list(layers)),
            "pool": str(self.settings.get("pool")),
            "model": str(self.settings.get("model")),
            "failed": str(failed),
            "index": str(self.dir / "index.jsonl"),
        }
        tensors = {layer_key(k): v for k, v in out.items()}
        if ragged:
            tensors["offsets"] = offsets
        save_atomically(tensors, self.output_path, metadata)
        return len(ok_ids)


def save_atomically(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """A safetensors file written whole beside `path`, then renamed onto it; a failed write (a full disk) is
    an OutputError naming the file."""
    tmp = temporary_path(path)
    try:
        save_file(tensors, str(tmp), metadata=metadata)
        os.replace(tmp, resolved(path))
    except (OSError, SafetensorError) as e:
        tmp.unlink(missing_ok=True)
        raise write_failed(path, e if isinstance(e, OSError) else _os_error_of(e)) from None


def _os_error_of(error: SafetensorError) -> OSError:
    """The OSError a safetensors error reports in words ("I/O error: File too large (os error 27)")."""
    code = re.search(r"os error (\d+)", str(error))
    return OSError(int(code.group(1)), os.strerror(int(code.group(1)))) if code else OSError(0, str(error))
