"""Scale-out of conformer workloads: molecules in (.smi/.csv/.tsv), K conformers per molecule out as an
SDF plus a JSONL row per conformer (workloads/conformers/pipeline/output.py). Shared by every conformer generator:
the engine pipeline registers itself with `conformer_adapter(name, run_shard, settings)`, as the ETKDG
workload does (etkdg.py).

A molecule is one unit, so its K conformers stay in one shard (its template and compiled constraint are
built once). Its cost is K x the tokens of one conformer, estimated from its atom count: prompt and
generation both grow linearly with the atoms (constants below). The merge orders JSONL rows and SDF
records by (input line of `input_id`, `conformer_index`), copying byte ranges.

Params every conformer workload takes: "num_conformers" (K), optionally "smiles_column", "id_column"
(CSV inputs) and "rows_output" (the final JSONL; default: the SDF path with .jsonl).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferlab.errors import InputError
from inferlab.scale.adapter import ShardContext, WorkloadAdapter
from inferlab.scale.order import UNPLACED, OrderIndex, RecordSpan, write_in_order
from inferlab.scale.units import Unit, UnitPlan
from inferlab.scale.workloads.jsonl_output import jsonl_spans
from inferlab.workloads.conformers.chemistry.inputs import read_molecule_inputs
from inferlab.workloads.conformers.chemistry.sdf import sdf_id
from inferlab.workloads.conformers.pipeline.output import default_jsonl_path

# Tokens of one conformer per atom, counted with the qwen3-chem tokenizer on the v3-fixed4 profile (ETKDG
# conformers of NCI molecules). Only ratios between molecules matter for balancing, and another tokenizer
# scales every molecule alike.
GENERATED_TOKENS_PER_ATOM = 24.3
PROMPT_TOKENS_PER_ATOM = 1.14
FIXED_TOKENS = 2.5  # the prompt's tags and the EOS
ERROR_UNIT_TOKENS = 1.0  # an unusable line only becomes error rows


def conformer_tokens(num_atoms: int) -> float:
    """Estimated prompt + generated tokens of one conformer of a molecule with `num_atoms` atoms."""
    return FIXED_TOKENS + (GENERATED_TOKENS_PER_ATOM + PROMPT_TOKENS_PER_ATOM) * num_atoms


def num_conformers(params: dict[str, Any]) -> int:
    k = params.get("num_conformers")
    if not isinstance(k, int) or k < 1:
        raise InputError(f"num_conformers={k!r} must be an integer >= 1")
    return k


def read_conformer_units(input_path: Path, params: dict[str, Any]) -> UnitPlan:
    k = num_conformers(params)
    inputs = read_molecule_inputs(input_path, params.get("smiles_column"), params.get("id_column"))
    units, previous_line = [], 0
    for record in inputs.records:
        weight = ERROR_UNIT_TOKENS
        if record.ok:
            weight = k * conformer_tokens(record.num_atoms)
        # A CSV record may span lines (a quoted newline): it owns the lines since the previous record.
        first = previous_line + 1 if record.line_no - previous_line > 1 else None
        # Keyed by the declared id: a repeat (error rows under its own line-<n> id) joins the first line's
        # shard, so the worker sees the repeat exactly as a single run does. Every record makes K rows.
        units.append(Unit(record.line_no, record.key, weight, k, first))
        previous_line = record.line_no
    header = 1 if input_path.suffix.lower() in (".csv", ".tsv") else 0
    return UnitPlan(units, header_lines=header, description=inputs.description)


def sdf_spans(path: Path, source: int, order: OrderIndex) -> list[RecordSpan]:
    """One span per SDF record, keyed by (input line of its input_id, its conformer_index)."""
    spans, offset, start = [], 0, 0
    props: dict[str, str] = {}
    wanted: str | None = None
    with path.open("rb") as f:
        for raw in f:
            offset += len(raw)
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if wanted is not None:
                props[wanted] = sdf_id(line)  # the id as the JSONL and the order index hold it
                wanted = None
            elif line.startswith(">"):
                wanted = next((name for name in ("input_id", "conformer_index") if f"<{name}>" in line), None)
            elif line == "$$$$":
                spans.append(RecordSpan(_conformer_key(order, props), source, start, offset - start))
                start, props = offset, {}
    return spans


def _conformer_key(order: OrderIndex, row: dict[str, Any]) -> tuple:
    input_id = row.get("input_id")
    if input_id is None:
        return (UNPLACED,)
    try:
        index = int(row.get("conformer_index"))
    except (TypeError, ValueError):
        index = -1
    return (order.line_of(str(input_id)), index)


def rows_path(output: Path, params: dict[str, Any]) -> Path:
    return Path(params["rows_output"]) if params.get("rows_output") else default_jsonl_path(output)


def merge_conformers(shard_outputs: list[Path], destination: Path, params: dict[str, Any], order: OrderIndex) -> int:
    """The SDF records and the JSONL rows of every shard, each in input order. Returns the JSONL rows."""
    sdf_files = [path for path in shard_outputs if path.exists()]
    sdf_spans_all: list[RecordSpan] = []
    for source, path in enumerate(sdf_files):
        sdf_spans_all.extend(sdf_spans(path, source, order))
    write_in_order(sdf_files, sdf_spans_all, destination)
    row_files = [default_jsonl_path(path) for path in shard_outputs if default_jsonl_path(path).exists()]
    row_spans: list[RecordSpan] = []
    for source, path in enumerate(row_files):
        row_spans.extend(jsonl_spans(path, source, lambda row: _conformer_key(order, row)))
    return write_in_order(row_files, row_spans, rows_path(destination, params))


def conformer_adapter(
    name: str,
    run_shard: Callable[[dict[str, Any], ShardContext], dict[str, Any]],
    settings: Callable[[dict[str, Any]], dict[str, Any]],
    rows_exact: bool = False,
) -> WorkloadAdapter:
    """An adapter for a conformer generator; `run_shard` writes the SDF at ctx.output and its JSONL at
    default_jsonl_path(ctx.output) with ConformerResultWriter (resumable), K rows per molecule."""
    return WorkloadAdapter(name, read_conformer_units, run_shard, merge_conformers, settings, output_suffix=".sdf",
                           progress_file=default_jsonl_path, rows_exact=rows_exact,
                           final_outputs=lambda output, params: [output, rows_path(output, params)])

