"""GEMM plans measured on the GPUs we run, shipped with the package: one JSON file per GPU model here.

Timing the plan (gemm_plan.py) costs a fresh machine ~15-20 s of its first start-up, and on a cluster every
new node is a fresh machine. `known_plan` is what the engine asks at start-up: the local start-up cache's
entry first (startup_cache.py: this machine's own measurement), then a shipped one, else nothing (the
engine times the plan and caches it). `python -m inferlab.engine.gemm_plans.measure` writes the files.

A shipped plan applies on another machine where what decides the timings is the same (`shipped_key`): the
GPU model (name, compute capability, SM count: an H100 SXM, an H100 PCIe and an H200 are three files), the
model's projection shapes, dtype, qkv bias and MLP activation, the code of the Triton GEMM and the
activations it fuses (kernels/triton_gemm.py, triton_math.py: comments and docstrings left out), and the
major.minor versions of Triton (its code generation), CUDA and torch (cuBLAS, the other side of each
comparison). Not the layer count (each timing is per layer), not the engine's other code, not patch
versions. A plan holds each decode bucket <= 64 rows that it measured; an engine whose buckets it lacks
(fewer slots than 64 make a bucket of their own) times its plan. Where no entry matches, a debug log says
which field differed.

File layout (<gpu-slug>.json, e.g. nvidia-h100-80gb-hbm3.json): {"format": 1, "gpu": name, "entries":
[{"model": preset name, "key": shipped_key, "value": plan_to_json + "buckets"}]}.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import torch

from inferlab.engine import gemm_plan
from inferlab.engine.startup_cache import StartupCache

log = logging.getLogger(__name__)

FORMAT = 1
PLANS_FOLDER = Path(__file__).parent  # the shipped files (package data: pyproject's package-data)


def gpu_slug(name: str) -> str:
    """The file name's stem for a GPU model: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def major_minor(version: str | None) -> str:
    """"2.11.0+cu130" -> "2.11"; None (no CUDA build) -> ""."""
    return ".".join(re.findall(r"\d+", version or "")[:2])


def shipped_key(weights, device: torch.device, activation: str) -> dict[str, Any]:
    """What a shipped plan must match (the module docstring says why these fields and no others)."""
    import triton

    from inferlab.engine.kernels import triton_gemm, triton_math
    from inferlab.engine.startup_cache import code_fingerprint

    props = torch.cuda.get_device_properties(device)
    return {
        "gpu": props.name,
        "capability": list(torch.cuda.get_device_capability(device)),
        "sm_count": props.multi_processor_count,
        "torch": major_minor(torch.__version__),
        "cuda": major_minor(torch.version.cuda),
        "triton": major_minor(triton.__version__),
        "kernel_code": code_fingerprint(triton_gemm, triton_math),
        **gemm_plan.model_fields(weights, activation),
    }


def shipped_plan(key: dict[str, Any], buckets: list[int], folder: Path | None = None) -> dict[str, Any] | None:
    """The shipped plan for `key` restricted to `buckets` (those <= MAX_ROWS), or None (debug-logged why).
    `folder`: where the files are (default: PLANS_FOLDER, this package)."""
    wanted = [b for b in buckets if b <= gemm_plan.MAX_ROWS]
    entries = read_entries(plan_file(key["gpu"], folder))
    if not entries:
        log.debug("no shipped GEMM plans for %s", key["gpu"])
        return None
    for entry in entries:
        if entry.get("key") == key:
            value = entry["value"]
            missing = sorted(set(wanted) - set(value.get("buckets", [])))
            if missing:
                log.debug("the shipped GEMM plan for these shapes on %s lacks buckets %s", key["gpu"], missing)
                return None
            return restrict(value, wanted)
    log.debug("no shipped GEMM plan matches on %s: %s", key["gpu"], _nearest_difference(key, entries))
    return None


def known_plan(cache: StartupCache, weights, buckets: list[int], device: torch.device,
               activation: str) -> tuple[dict[str, Any] | None, str, dict[str, Any]]:
    """(plan JSON, source, the start-up cache's key) of the plan measured before for this GPU and model:
    source "cache" (this machine's start-up cache), "shipped" (this package's files) or "" (none: time it
    and store it under the key)."""
    key = gemm_plan.plan_key(weights, buckets, device, activation)
    stored = cache.load("gemm_plan", key)
    if stored is not None:
        return stored, "cache", key
    shipped = shipped_plan(shipped_key(weights, device, activation), buckets)
    return (shipped, "shipped", key) if shipped is not None else (None, "", key)


def restrict(value: dict[str, Any], buckets: list[int]) -> dict[str, Any]:
    """A plan's JSON with only the choices and timings of `buckets`."""
    keep = {str(b) for b in buckets}

    def of(table: dict) -> dict:
        return {label: entry for label, entry in table.items() if label.split("@")[-1] in keep}

    return {**value, "choices": of(value["choices"]), "timings": of(value["timings"]), "buckets": sorted(buckets)}


def plan_file(gpu: str, folder: Path | None = None) -> Path:
    return Path(folder if folder is not None else PLANS_FOLDER) / f"{gpu_slug(gpu)}.json"


def read_entries(path: Path) -> list[dict[str, Any]]:
    """The entries of a plan file; [] when it is absent or unreadable (logged: a broken shipped file costs a
    timing, never the start-up)."""
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
            raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
        return data["entries"]
    except (OSError, ValueError, AttributeError) as e:
        log.warning("ignoring the shipped GEMM plans in %s (%s)", path, e)
        return []


def write_entries(path: Path, gpu: str, entries: list[dict[str, Any]]) -> None:
    """Merge `entries` into the file (an entry with an equal key is replaced), sorted for stable diffs."""
    merged = {json.dumps(e["key"], sort_keys=True): e for e in read_entries(path) + entries}
    ordered = [merged[k] for k in sorted(merged)]
    path.write_text(json.dumps({"format": FORMAT, "gpu": gpu, "entries": ordered}, indent=1, sort_keys=True) + "\n")


def _nearest_difference(key: dict[str, Any], entries: list[dict[str, Any]]) -> str:
    """How the closest entry (fewest differing fields) differs from `key`, for the debug log."""
    def differing(entry: dict[str, Any]) -> list[str]:
        stored = entry.get("key", {})
        return [f for f in sorted(set(key) | set(stored)) if key.get(f) != stored.get(f)]

    closest = min(entries, key=lambda e: len(differing(e)))
    return "; ".join(f"{f} {key.get(f)!r}, the closest shipped {closest.get('key', {}).get(f)!r}"
                     for f in differing(closest))
