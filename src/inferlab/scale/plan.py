"""Making a shard plan, or reusing the one in the work folder.

A fresh plan: the adapter reads the input into units with estimated tokens, the partitioner balances
them over the shards, each shard's input file is written, then the manifest (input hash, settings,
shards with their lines, rows, estimated tokens). A rerun reuses that plan only for the same input
bytes, the same workload and output, and the same result-affecting settings, and only if the shard
inputs are intact; anything else is refused with what changed and how to start over.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError, InputError
from inferlab.scale.adapter import WorkloadAdapter
from inferlab.scale.config import ScaleJob
from inferlab.scale.partition import imbalance, partition_units, shard_loads
from inferlab.outputs.manifest import file_sha256, setting_changes
from inferlab.scale.units import write_shard_inputs, write_units
from inferlab.scale.workdir import Manifest, ShardState, WorkDir

log = logging.getLogger(__name__)


def make_plan(job: ScaleJob, adapter: WorkloadAdapter, work: WorkDir, settings: dict[str, Any],
              input_sha256: str, num_shards: int) -> Manifest:
    input_path = Path(job.input)
    plan = adapter.read_units(input_path, job.params)
    if not plan.units:
        raise InputError(f"--input {input_path} holds no records; nothing to run")
    assignment = partition_units(plan.units, num_shards)
    loads = shard_loads(plan.units, assignment)
    work.make()
    inputs = [work.shard_input(i, adapter.input_suffix(input_path)) for i in range(len(loads))]
    write_shard_inputs(input_path, assignment, plan.units, plan.header_lines, [work.path(p) for p in inputs])
    write_units(work.units_path, plan.units, assignment)
    lines: list[list[int]] = [[] for _ in loads]
    for unit, shard in zip(plan.units, assignment):
        lines[shard].append(unit.line)
    shards = [
        ShardState(
            index=i,
            input=inputs[i],
            input_sha256=file_sha256(work.path(inputs[i])),
            output=work.shard_output(i, adapter.output_suffix),
            units=load.units,
            rows=load.rows,
            est_tokens=round(load.weight, 1),
            first_line=min(lines[i]),
            last_line=max(lines[i]),
        )
        for i, load in enumerate(loads)
    ]
    manifest = Manifest(
        workload=job.workload,
        input_path=str(input_path.resolve()),
        input_sha256=input_sha256,
        input_bytes=input_path.stat().st_size,
        output=str(Path(job.output).resolve()),
        settings=settings,
        header_lines=plan.header_lines,
        shards=shards,
    )
    work.save_manifest(manifest)
    log.info("%s: %d units in %d shards, estimated tokens per shard %s (heaviest / mean %.3f)",
             plan.description, len(plan.units), len(shards), [round(s.weight) for s in loads], imbalance(loads))
    return manifest


def check_reuse(manifest: Manifest, job: ScaleJob, work: WorkDir, settings: dict[str, Any], input_sha256: str) -> None:
    """Refuse to reuse `manifest` for a job it was not made for (ConfigError saying what differs)."""
    start_over = f"use another --output (or --work-dir), or delete {work.root} to start over"
    if manifest.workload != job.workload:
        raise ConfigError(f"{work.root} holds a {manifest.workload!r} run, not {job.workload!r}; {start_over}")
    if manifest.output != str(Path(job.output).resolve()):
        raise ConfigError(f"{work.root} holds the run for output {manifest.output}, not {job.output}; {start_over}")
    if manifest.input_sha256 != input_sha256:
        raise ConfigError(
            f"the input changed since the run in {work.root} was planned: {manifest.input_path} had SHA-256 "
            f"{manifest.input_sha256[:16]}..., {job.input} now has {input_sha256[:16]}...; a rerun must read the same "
            f"input to resume; {start_over}"
        )
    changed = setting_changes(manifest.settings, settings, "then")
    if changed:
        raise ConfigError(f"the run in {work.root} was made with other settings ({'; '.join(changed)}); {start_over}")
    for shard in manifest.shards:
        path = work.path(shard.input)
        if not path.exists() or file_sha256(path) != shard.input_sha256:
            raise ConfigError(f"shard input {path} is missing or was changed; {start_over}")
