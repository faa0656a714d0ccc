"""The backend registry, keyed by (scenario, name): `hf` for `generate` and `hf` for `constrained` are
different backends with their own knobs. A new backend is a module in this folder that defines `BACKEND`
(backends.base.BackendSpec, whose `scenario` says which scenario it serves and whose `create` makes the child's
workloads.backend.Backend), or `BACKENDS` (one per scenario it serves), and is added to BUILTIN_MODULES;
out-of-tree ones call register_backend from a plugin file (see bench/plugins.py)."""

from __future__ import annotations

import importlib
from typing import Any

from inferlab.bench.backends.base import BackendSpec, GenerateSpec
from inferlab.errors import ConfigError

BUILTIN_MODULES = [
    "inferlab.bench.backends.hf_generate",
    "inferlab.bench.backends.hf_constrained",
    "inferlab.bench.backends.inferlab_generate",
    "inferlab.bench.backends.inferlab_constrained",
    # conformer-quality: the engine, transformers (with or without the seeds' processor), ETKDG as the ceiling
    "inferlab.bench.backends.inferlab_quality",
    "inferlab.bench.backends.hf_quality",
    "inferlab.bench.backends.etkdg_quality",
    # peers: imported only inside their cells (vLLM, xgrammar); `unavailable` rows where they are missing
    "inferlab.bench.backends.hf_continuous",
    "inferlab.bench.backends.hf_xgrammar_constrained",
    "inferlab.bench.backends.vllm_generate",
    "inferlab.bench.backends.vllm_constrained",
    "inferlab.bench.backends.hf_steering",
    "inferlab.bench.backends.inferlab_steering",
    # classify and hidden-states (one module per backend, a BackendSpec per scenario)
    "inferlab.bench.backends.hf_encode",
    "inferlab.bench.backends.inferlab_encode",
    "inferlab.bench.backends.vllm_encode",
]

BACKENDS: dict[tuple[str, str], BackendSpec] = {}  # (scenario, name) -> spec


def register_backend(backend: BackendSpec) -> None:
    BACKENDS[(backend.scenario, backend.name)] = backend


def backends_for(scenario: str) -> dict[str, BackendSpec]:
    """name -> spec of the backends that serve `scenario`."""
    return {name: spec for (owner, name), spec in BACKENDS.items() if owner == scenario}


def backend_estimate_s(cell: Any, accelerator: bool) -> float | None:
    """The cell's backend's own estimate (BackendSpec.estimate_s), or None to use the scenario's."""
    spec = BACKENDS.get((cell.scenario, cell.backend)) if cell.backend else None
    return spec.estimate_s(cell, accelerator) if spec is not None and spec.estimate_s is not None else None


def get_backend(name: str, scenario: str = "generate") -> BackendSpec:
    try:
        return BACKENDS[(scenario, name)]
    except KeyError:
        known = ", ".join(sorted(backends_for(scenario))) or "none"
        raise ConfigError(f"unknown backend {name!r} for scenario {scenario}; choose one of: {known}") from None


for _module in BUILTIN_MODULES:
    _loaded = importlib.import_module(_module)
    for _spec in getattr(_loaded, "BACKENDS", None) or [_loaded.BACKEND]:
        register_backend(_spec)

__all__ = ["BACKENDS", "BackendSpec", "GenerateSpec", "backend_estimate_s", "backends_for",
           "get_backend", "register_backend"]
