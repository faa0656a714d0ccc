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
