"""Steering and hidden-state collection for the text workload (`inferlab generate --steer ... --collect-...`).

Steering: `--steer FILE` (a safetensors file of named vectors, SteeringVectors) with `--steer-layer L`,
`--steer-scale S` and `--steer-vector NAME` (needed only when the file has several entries) steer every
line; a line may override them with "steer_layer", "steer_scale" and "steer_vector" (an entry name, or
null: this line unsteered). Collection: `--collect-layers`, `--collect-pool last|mean|all`,
`--collect-max-tokens` (all), `--collect-output acts.safetensors`: every generated line's hidden states
go to the resumable activation store of `inferlab hidden-states` (workloads/activation_store.py).

Resume in both files: a collecting result's activations are written (shard, then index line) before its
JSONL row, so an id whose row is in the JSONL always has its activations; a rerun skips ids done in both
and recomputes the others (an id found only in the store is written again and its last entry counts).

The module imports no torch: `generate` reads and plans its input before torch is imported, so the
fingerprints of the input's ids, held while the plan reads it, do not add to torch's memory; torch comes
with the backend, the steering vectors or the first activations saved.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from inferlab.errors import ConfigError, InputError
from inferlab.models.config_file import read_config
from inferlab.types import Collect, Result, Steer

if TYPE_CHECKING:
    from inferlab.engine import SteeringVectors
    from inferlab.inputs.fingerprints import FingerprintSet
    from inferlab.workloads.activation_store import ActivationStore

STEER_KEYS = ("steer_layer", "steer_scale", "steer_vector")
SAVE_DTYPES = ("float32", "bfloat16", "float16")  # hf_loading.DTYPES' names


def model_shape(model_dir: str | Path) -> tuple[int, int]:
    """(decoder layers, hidden size) from the checkpoint's config.json (text_config for multimodal ones)."""
    config = read_config(model_dir)  # sizes checked: whole numbers in range
    config = config.get("text_config") or config
    missing = [key for key in ("num_hidden_layers", "hidden_size") if key not in config]
    if missing:
        raise InputError(f"{model_dir}/config.json lacks {', '.join(missing)}; --collect-layers needs the model's "
                         "layer count and hidden size")
    return config["num_hidden_layers"], config["hidden_size"]


@dataclass(frozen=True)
class SteerSettings:
    """The run's default steering (--steer FILE --steer-layer --steer-scale --steer-vector)."""

    path: str
    vectors: SteeringVectors
    layer: int | None = None
    scale: float = 1.0
    vector: str | None = None  # None: the file's only entry

    @classmethod
    def load(cls, path: str, layer: int | None, scale: float, vector: str | None) -> "SteerSettings":
        from inferlab.engine import SteeringVectors

        vectors = SteeringVectors.load(path)
        if vector is not None and vector not in vectors:
            raise ConfigError(f"--steer-vector {vector!r} is not in {path}; it has {', '.join(vectors.names)}")
        if not math.isfinite(scale):
            raise ConfigError(f"--steer-scale {scale} must be a finite number")
        return cls(str(Path(path).resolve()), vectors, layer, scale, vector)

    def describe(self) -> dict[str, Any]:
        return {"file": self.path, "layer": self.layer, "scale": self.scale, "vector": self.vector}


def line_steering(data: dict[str, Any], line_no: int, settings: SteerSettings | None) -> tuple[Steer, ...] | str:
    """The Steer entries of one input line (defaults and its overrides), or why the line is unusable."""
    given = {key: data[key] for key in STEER_KEYS if key in data}
    if settings is None:
        if given:
            return f"line {line_no}: {', '.join(given)} need --steer FILE (the vectors to steer with)"
        return ()
    if "steer_vector" in given and given["steer_vector"] is None:
        return ()  # this line unsteered
    layer = given.get("steer_layer", settings.layer)
    scale = given.get("steer_scale", settings.scale)
    name = given.get("steer_vector", settings.vector)
    if layer is None or isinstance(layer, bool) or not isinstance(layer, int):
        return f"line {line_no}: steer_layer={layer!r}: give an integer per line or --steer-layer"
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        return f"line {line_no}: steer_scale={scale!r} must be a number"
    if name is None:
        if len(settings.vectors.names) != 1:
            return (f"line {line_no}: {settings.path} has entries {', '.join(settings.vectors.names)}; name one with "
                    "--steer-vector or a per-line steer_vector")
        name = settings.vectors.names[0]
    if not isinstance(name, str):
        return f"line {line_no}: steer_vector={name!r} must be an entry name or null"
    return (Steer(layer, name, float(scale)),)


@dataclass(frozen=True)
class CollectSettings:
    """--collect-layers / --collect-pool / --collect-max-tokens / --collect-output."""

    output: Path
    layers: tuple[int, ...]
    num_layers: int  # the model's decoder layers (to resolve negative numbers and refuse bad ones up front)
    hidden_size: int
    pool: str = "mean"
    max_tokens: int | None = None
    save_dtype: str = "float32"
    shard_rows: int = 256  # results per shard
    flush_s: float = 60.0  # or fewer, once the oldest waiting result is this old

    def __post_init__(self) -> None:
        Collect(self.layers, self.pool, self.max_tokens)  # the request-level checks, raised now
        bad = [x for x in self.layers if not -self.num_layers <= x < self.num_layers]
        if bad:
            raise ConfigError(f"--collect-layers {bad} out of range: the model has decoder layers 0.."
                              f"{self.num_layers - 1} (negative numbers count from the end)")
        if self.save_dtype not in SAVE_DTYPES:
            raise ConfigError(f"save dtype {self.save_dtype!r} is not one of {', '.join(SAVE_DTYPES)}")

    @property
    def resolved_layers(self) -> tuple[int, ...]:
        return tuple(x % self.num_layers for x in self.layers)

    def request_collect(self) -> Collect:
        return Collect(self.layers, self.pool, self.max_tokens)

    def describe(self) -> dict[str, Any]:
        """The settings the activations depend on (beside the run's model and sampling)."""
        return {"layers": list(self.resolved_layers), "pool": self.pool, "max_tokens": self.max_tokens,
                "save_dtype": self.save_dtype}


@dataclass
class ActivationSink:
    """Collecting results -> the activation store (shards), then their JSONL rows through `write_row`."""

    settings: CollectSettings
    store: ActivationStore
    write_row: Callable[[dict[str, Any]], None]
    waiting: list[tuple[Result, dict[str, Any]]] = field(default_factory=list)
    oldest: float = 0.0

    @classmethod
    def open(cls, settings: CollectSettings, run_settings: dict[str, Any],
             write_row: Callable[[dict[str, Any]], None]) -> "ActivationSink":
        from inferlab.workloads.activation_store import ActivationStore

        store_settings = {**run_settings, **settings.describe()}
        return cls(settings, ActivationStore(settings.output, store_settings), write_row)

    @property
    def done_ids(self) -> FingerprintSet:
        return self.store.done_ids

    def add(self, result: Result | None, row: dict[str, Any]) -> None:
        """A finished row: an error goes to the store's index and the JSONL at once, a result waits for its shard."""
        if result is None or not result.ok or not result.activations:
            self.error(row)
            self.write_row(row)
            return
        if not self.waiting:
            self.oldest = time.monotonic()
        self.waiting.append((result, row))
        if len(self.waiting) >= self.settings.shard_rows or time.monotonic() - self.oldest >= self.settings.flush_s:
            self.flush()

    def error(self, row: dict[str, Any]) -> None:
        """An error row into the store's index (its JSONL line is the caller's to write, after it)."""
        self.store.write_error({"id": row["id"], "status": "error", "error": row["error"] or "no activations"})

    def flush(self) -> None:
        """The waiting results' shard, then their rows. The waiting list is taken first, so whatever
        interrupts the flush (a signal, a full disk), no row is flushed twice: a row whose shard or JSONL line
        did not get written is simply not done, and a rerun computes it again."""
        waiting, self.waiting = self.waiting, []
        if not waiting:
            return
        import torch

        from inferlab.workloads.hf_loading import DTYPES

        dtype = DTYPES[self.settings.save_dtype]
        layers = self.settings.resolved_layers
        results = [result for result, _ in waiting]
        tensors = {layer: torch.cat([r.activations[layer].reshape(-1, self.settings.hidden_size) for r in results])
                   .to(dtype) for layer in layers}  # [rows or sum of lengths, hidden]
        lengths = [len(r.activations[layers[0]]) for r in results] if self.settings.pool == "all" else None
        self.store.write_shard([r.id for r in results], [len(r.token_ids) for r in results], tensors, lengths)
        for _, row in waiting:
            self.write_row(row)

    def close(self, ids_in_order: Iterable[str]) -> int:
        """Write what waits, assemble the output file in input order; returns its row count."""
        try:
            self.flush()
            s = self.settings
            from inferlab.workloads.hf_loading import DTYPES

            return self.store.assemble(ids_in_order, s.resolved_layers, s.hidden_size, DTYPES[s.save_dtype])
        finally:
            self.store.close()
