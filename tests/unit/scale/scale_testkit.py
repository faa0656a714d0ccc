"""Helpers for the scale-out tests: JSONL files, varied texts, reading hidden-state outputs."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors import safe_open


def write_jsonl(path: Path, lines: list) -> Path:
    """Dicts as JSON lines, strings verbatim (broken lines)."""
    with path.open("w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def varied_lines(n: int, field: str = "text") -> list:
    """n rows of clearly different lengths, plus the lines every workload must turn into error rows:
    broken JSON, a repeated id, a missing text field."""
    lines: list = [{"id": f"r{i:02d}", field: " ".join(f"w{j}" for j in range(1 + (i * 7) % 23))} for i in range(n)]
    lines.insert(3, "{broken json")
    lines.insert(8, {"id": "r01", field: "a repeated id"})
    lines.insert(11, {"id": "no-text", "other": "x"})
    lines.insert(14, {field: "a line without an id"})
    return lines


def read_safetensors(path: Path) -> tuple[list[str], dict, dict[str, str]]:
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    return json.loads(meta["ids"]), tensors, meta


def write_molecules(path: Path, count: int) -> Path:
    """A .smi of the first `count` NCI molecules with ids, plus an unparsable line and a repeated id."""
    import os

    from rdkit import RDConfig

    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        smiles = [line.split()[0] for line, _ in zip(f, range(count))]
    lines = [f"{s} mol{i}" for i, s in enumerate(smiles)]
    lines.insert(2, "C1CC bad-ring")
    lines.insert(5, "CCO mol0")
    path.write_text("\n".join(lines) + "\n")
    return path


def run_single_etkdg(inp: Path, out: Path, params: dict) -> None:
    """The ETKDG workload in this process over the whole input: the single-process reference."""
    from inferlab.scale.adapter import ShardContext
    from inferlab.scale.workloads.etkdg import ETKDG

    ETKDG.run_shard(params, ShardContext(inp, out, "cpu", 1, lambda rows: None))


def _env_units(input_path: Path, params: dict):
    from inferlab.jsonl_io import read_jsonl_records
    from inferlab.scale.units import Unit, UnitPlan

    return UnitPlan([Unit(r.line_no, r.id, 1.0) for r in read_jsonl_records(input_path)])


def _env_rows(params: dict, ctx) -> dict:
    """Write, for each input row, what the worker process saw: its GPU, an inherited NCCL setting, threads."""
    import os

    from inferlab.jsonl_io import ResumableJsonlWriter, read_jsonl_records

    with ResumableJsonlWriter(ctx.output) as writer:
        for record in read_jsonl_records(ctx.input):
            writer.write({"id": record.id, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                          "nccl": os.environ.get("NCCL_NVLS_ENABLE"), "device": ctx.device, "threads": ctx.threads,
                          "pid": os.getpid()})
            ctx.progress(1)
    return {"run_s": 0.0}


def _env_adapter():
    from inferlab.scale.adapter import WorkloadAdapter
    from inferlab.scale.workloads.jsonl_output import merge_jsonl_by_id

    return WorkloadAdapter(name="env-probe", read_units=_env_units, run_shard=_env_rows, merge=merge_jsonl_by_id,
                           settings=lambda params: {})


# `--workload scale_testkit:ENV_PROBE`: a workload that runs no model and reports each worker's environment.
ENV_PROBE = _env_adapter()
