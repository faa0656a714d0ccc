"""Whether a start-up runs the kernel precompile: the record a finished precompile leaves in the start-up cache.

On a warm machine Triton's disk cache already holds every kernel the warm-up launches, and the warm-up reads
each from it at its first launch (32 kernels in 0.8 s of compile threads on an H200); the precompile's dry run
of the warm-up on meta tensors is Python that holds the GIL beside the weights' load, and took 5.0 s there
(3.95 s of it waited for after the weights: benchmarks/results/2026-12-02-h200-conformer-quality.jsonl, the
reference model). So a precompile that finished cleanly records, under a key of what decides which kernels the
warm-up launches and how Triton builds them, the cache files of every kernel it compiled or read; a start-up
with the same key skips the precompile, no thread beside the load, when every one of those files is still in
Triton's cache (a cleared or evicted cache, another TRITON_CACHE_DIR, Triton version, GPU, shape, slot count,
length or engine code runs it again, and records again).

The key leaves out which GEMM plan start-up will find (start-up cache, shipped or timed: the precompile
compiles the timing's candidates only when it will time): a warm machine whose start-up cache lost its plan
times it again with candidates a shipped plan never compiled, once, on the critical path (gemm_tune_s).

Not here: the precompile itself (kernel_precompile.py), the cache's files (startup_cache.py).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.engine.startup_cache import StartupCache

KIND = "precompile"  # the start-up cache's folder of records
ENGINE_FOLDER = Path(__file__).resolve().parent


def engine_code_fingerprint(folder: Path = ENGINE_FOLDER) -> str:
    """A hash of every source file of the engine: what the warm-up launches follows its code anywhere in it."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        digest.update(str(path.relative_to(folder)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def precompile_key(warm_up: dict[str, Any], machine: dict[str, Any]) -> dict[str, Any]:
    """`warm_up`: what the dry run is built from (shapes, dtypes, slots, lengths, graphs, the GEMM mode: JSON
    values); `machine`: the GPU, the versions and Triton's cache folder (`machine_fields`)."""
    return {**machine, **warm_up, "engine_code": engine_code_fingerprint()}


def machine_fields(device: Any) -> dict[str, Any]:
    """The GPU of `device`, the torch / CUDA / Triton versions and Triton's cache folder (the files a record
    names live there)."""
    import torch
    import triton

    props = torch.cuda.get_device_properties(device)
    return {"gpu": props.name, "capability": list(torch.cuda.get_device_capability(device)),
            "sm_count": props.multi_processor_count, "torch": torch.__version__, "cuda": torch.version.cuda,
            "triton": triton.__version__, "triton_cache": triton_cache_dir()}


def triton_cache_dir() -> str:
    """Triton's disk cache folder ($TRITON_CACHE_DIR, else its default)."""
    try:
        from triton import knobs

        return str(knobs.cache.dir)
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_CACHE_DIR") or str(Path.home() / ".triton" / "cache")


def kernel_files(kernel: Any) -> list[str]:
    """The cache files of a compiled kernel (Triton's CompiledKernel.metadata_group: its JSON metadata and
    binaries, paths in the disk cache); [] when the kernel does not say (another cache manager)."""
    group = getattr(kernel, "metadata_group", None)
    if not isinstance(group, dict):
        return []
    return sorted(str(path) for path in group.values() if isinstance(path, str) and os.path.isabs(path))


@dataclass(frozen=True)
class PrecompileDecision:
    run: bool
    reason: str  # why it runs or is skipped, for the log and stats.precompile_skipped


def decide(cache: StartupCache, key: dict[str, Any]) -> PrecompileDecision:
    """Run the precompile unless a record under `key` names kernel files that all still exist."""
    if cache.root is None:
        return PrecompileDecision(True, "no start-up cache to remember a precompile in")
    entry = cache.load(KIND, key)
    if entry is None:
        return PrecompileDecision(True, "no record of a precompile for this GPU, software, model and plan")
    files = entry.get("files")
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        return PrecompileDecision(True, "the record names no kernel files")
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        return PrecompileDecision(True, f"{len(missing)} of the {len(files)} kernel files it recorded are no longer in "
                                        f"Triton's cache (e.g. {missing[0]})")
    return PrecompileDecision(False, f"Triton's cache holds the {entry.get('kernels', '?')} kernels the last "
                                     f"precompile of this start-up compiled ({len(files)} files)")


def record(cache: StartupCache, key: dict[str, Any], kernels: int, files: list[str], clean: bool) -> Path | None:
    """Remember a precompile that ran to its end with no failed compile (`clean`) and named its files; None
    when there is nothing to remember (or no cache)."""
    if not clean or not files:
        return None
    return cache.store(KIND, key, {"kernels": kernels, "files": sorted(set(files))})
