"""The generate-backend registry. A new backend is a module in this folder that defines `BACKEND`
(backends.base.BackendSpec) and is added to BUILTIN_MODULES; out-of-tree ones call register_backend
from a plugin file (see bench/plugins.py)."""

from __future__ import annotations

import importlib

from inferlab.bench.backends.base import BackendSpec, GenerateBackend, GenerateSpec
from inferlab.errors import ConfigError

BUILTIN_MODULES = [
    "inferlab.bench.backends.hf_generate",
]

BACKENDS: dict[str, BackendSpec] = {}


def register_backend(backend: BackendSpec) -> None:
    BACKENDS[backend.name] = backend


def get_backend(name: str) -> BackendSpec:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ConfigError(f"unknown backend {name!r}; choose one of: {', '.join(sorted(BACKENDS))}") from None


for _module in BUILTIN_MODULES:
    register_backend(importlib.import_module(_module).BACKEND)

__all__ = ["BACKENDS", "BackendSpec", "GenerateBackend", "GenerateSpec", "get_backend", "register_backend"]
