"""Workload recipes of scripts/gpu/scale_check.py: for each workload, its sizes (GPU and CPU-quick), how
its input is made, how one scaled run is started (the library for the workloads inferlab.scale owns, the
CLI for the conformer pipeline, whose parameters belong to it), and how its merged output is read back
(ids, output tokens) for the throughput and exactly-once checks."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.models.checkpoint_init import init_checkpoint
from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

# The conformer generation command as issue 4 specifies it; adjust here if it lands as a subcommand.
CONFORMER_COMMAND = ["conformers"]


@dataclass(frozen=True)
class Sizes:
    preset: str
    rows: int  # prompts, texts or molecules of the throughput runs
    kill_rows: int  # of the kill-and-rerun check
    new_tokens: int  # generation length (min = max, so every run makes the same tokens)
    conformers: int  # K per molecule


SIZES = {
    ("generate", "gpu"): Sizes("qwen3-0.6b", 6144, 1024, 256, 0),
    ("generate", "quick"): Sizes("tiny", 48, 24, 8, 0),
    ("conformers", "gpu"): Sizes("qwen3-0.6b", 384, 96, 0, 8),
    ("conformers", "quick"): Sizes("tiny-qwen3", 12, 8, 0, 2),
    ("classify", "gpu"): Sizes("qwen2-cls", 40000, 8000, 0, 0),
    ("classify", "quick"): Sizes("tiny-qwen2-cls", 96, 48, 0, 0),
}


@dataclass
class RunOutput:
    report: dict[str, Any]  # the run's report.json
    ids: list[str]  # every row id of the merged output, in file order (empty when not merged)
    output_tokens: int | None  # tokens produced, counted from the rows; None where the rows do not say


def engine_text_available() -> bool:
    return importlib.util.find_spec("inferlab.workloads.text") is not None


def conformer_cli_available() -> bool:
    from inferlab.scale.workloads import WORKLOADS

    if "conformers" not in WORKLOADS:
        return False
    help_text = subprocess.run([sys.executable, "-m", "inferlab.cli", *CONFORMER_COMMAND, "--help"],
                               capture_output=True, text=True).stdout
    return "--num-conformers" in help_text and "--gpus" in help_text


def checkpoint(scratch: Path, preset: str, dtype: str) -> Path:
    path = scratch / "models" / f"{preset}-{dtype}"
    if not (path / "config.json").exists():
        tokenizer = qwen3_chem_tokenizer_dir() if preset in ("tiny-qwen3", "qwen3-0.6b") else None
        init_checkpoint(preset, path, seed=0, dtype=dtype, tokenizer_dir=tokenizer)
    return path


def write_prompts(path: Path, rows: int, field: str = "prompt") -> Path:
    """Prompts of 8 to 120 words in a fixed pattern (lengths vary, so token balancing matters)."""
    with path.open("w") as f:
        for i in range(rows):
            words = 8 + (i * 37) % 113
            f.write(json.dumps({"id": f"p{i:06d}", field: " ".join(f"w{(i + j) % 997}" for j in range(words))}) + "\n")
    return path


def write_molecules(path: Path, rows: int) -> Path:
    from rdkit import RDConfig

    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        lines = [f"{line.split()[0]} nci{i}" for i, line in zip(range(rows), f)]
    path.write_text("\n".join(lines) + "\n")
    return path


def read_jsonl_ids(path: Path, id_of: Callable[[dict], str], tokens_field: str | None) -> tuple[list[str], int | None]:
    ids, tokens = [], 0
    if not path.exists():
        return [], None
    with path.open() as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                ids.append(id_of(row))
                value = row.get(tokens_field) if tokens_field else None
                tokens = tokens + value if isinstance(value, int) and tokens is not None else None
    return ids, tokens


def library_params(workload: str, model: Path, sizes: Sizes, device: str) -> dict[str, Any]:
    from inferlab.scale.workloads.classify import classify_params
    from inferlab.scale.workloads.generate import generate_params
    from inferlab.types import SamplingParams
    from inferlab.workloads.classify import ClassifyOptions
    from inferlab.workloads.hf_loading import ModelLoadConfig
    from inferlab.workloads.hf_text import HFTextOptions

    dtype = "bfloat16" if device == "cuda" else "float32"
    if workload == "classify":
        return classify_params(ModelLoadConfig(str(model), dtype=dtype), ClassifyOptions(batch_size=64, max_length=512))
    sampling = SamplingParams(temperature=0.0, max_new_tokens=sizes.new_tokens, min_new_tokens=sizes.new_tokens,
                              ignore_eos=True)
    backend = "auto" if engine_text_available() else "hf"
    return generate_params(str(model), sampling, backend=backend, hf_load={"dtype": dtype},
                           hf_options=HFTextOptions(batch_size=256 if device == "cuda" else 8),
                           engine_options={"dtype": dtype, "max_seq_len": 512 + sizes.new_tokens})


def make_input(workload: str, scratch: Path, rows: int) -> Path:
    if workload == "conformers":
        return write_molecules(scratch / f"mols-{rows}.smi", rows)
    field = "text" if workload == "classify" else "prompt"
    return write_prompts(scratch / f"{workload}-{rows}.jsonl", rows, field=field)


def output_path(workload: str, run_dir: Path) -> Path:
    return run_dir / ("out.sdf" if workload == "conformers" else "out.jsonl")


def read_output(workload: str, output: Path) -> tuple[list[str], int | None]:
    if workload == "conformers":
        return read_jsonl_ids(output.with_suffix(".jsonl"), lambda r: f"{r['input_id']}#{r['conformer_index']}",
                              "output_tokens")
    return read_jsonl_ids(output, lambda r: str(r["id"]), "output_tokens" if workload == "generate" else None)


def expected_ids(workload: str, input_path: Path, sizes: Sizes) -> list[str]:
    if workload == "conformers":
        ids = [line.split()[1] for line in input_path.read_text().splitlines() if line.strip()]
        return [f"{i}#{k}" for i in ids for k in range(sizes.conformers)]
    return [json.loads(line)["id"] for line in input_path.read_text().splitlines() if line.strip()]


def conformer_cli(model: Path, input_path: Path, output: Path, sizes: Sizes, device: str) -> list[str]:
    return [sys.executable, "-m", "inferlab.cli", *CONFORMER_COMMAND, "--model", str(model), "--input", str(input_path),
            "--num-conformers", str(sizes.conformers), "--output", str(output), "--device", device]
