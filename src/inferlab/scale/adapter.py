"""The contract between the scale-out machinery and one workload, and the registry of workloads.

An adapter says, for its workload: how to read the input into units with estimated tokens
(`read_units`), what a shard's files are called (`input_suffix`, `output_suffix`), how to run one
shard in the current process (`run_shard`: the workload's own resumable function on the shard's input
and output), which file grows by one line per finished row (`progress_file`, for the combined progress
view and the completeness check), how to merge the shard outputs in input order (`merge`), and which of
its settings change the results (`settings`: a rerun with other values is refused). Everything else
(planning, launching, retrying, resuming, merging on time) is shared.

Adapters live in inferlab.scale.workloads (one file each) and are looked up by name (imported on first
use); "module:NAME" names an adapter object elsewhere (a plug-in, or a test's).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError
from inferlab.scale.order import OrderIndex
from inferlab.scale.units import UnitPlan


@dataclass(frozen=True)
class ShardContext:
    """What a worker hands the adapter's run_shard."""

    input: Path
    output: Path
    device: str  # "cuda" (the worker sees only its own GPU) or "cpu"
    threads: int | None  # CPU threads this worker may use; None: the library's default
    progress: Callable[[int], None]  # called with the number of rows just finished


@dataclass(frozen=True)
class WorkloadAdapter:
    name: str
    read_units: Callable[[Path, dict[str, Any]], UnitPlan]  # (input, params) -> units with estimated tokens
    run_shard: Callable[[dict[str, Any], ShardContext], dict[str, Any]]  # -> the workload's summary
    # (shard outputs, the user's output, params, input order) -> rows merged
    merge: Callable[[list[Path], Path, dict[str, Any], OrderIndex], int]
    settings: Callable[[dict[str, Any]], dict[str, Any]]  # the settings that change results
    input_suffix: Callable[[Path], str] = lambda path: path.suffix  # a shard input's suffix (readers go by it)
    output_suffix: str = ".jsonl"
    progress_file: Callable[[Path], Path] = lambda output: output  # one line per finished row
    rows_exact: bool = True  # each unit writes exactly `unit.rows` rows (checked when a shard ends)
    final_outputs: Callable[[Path, dict[str, Any]], list[Path]] = lambda output, params: [output]


def get_adapter(name: str) -> WorkloadAdapter:
    """The registered adapter `name`, or the object a "package.module:NAME" reference points at."""
    from inferlab.scale.workloads import WORKLOADS

    reference = WORKLOADS.get(name, name)
    if ":" not in reference:
        raise ConfigError(f"workload {name!r} cannot be scaled out; known: {', '.join(sorted(WORKLOADS))}")
    module_name, _, attr = reference.partition(":")
    try:
        adapter = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"workload adapter {reference!r} cannot be imported: {e}") from None
    if not isinstance(adapter, WorkloadAdapter):
        raise ConfigError(f"{reference!r} is a {type(adapter).__name__}, not a WorkloadAdapter")
    return adapter
