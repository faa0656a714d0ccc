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
