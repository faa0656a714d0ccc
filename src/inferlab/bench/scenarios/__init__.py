"""The scenario registry. A new scenario is a module in this folder that defines `SCENARIO`
(scenarios.base.Scenario) and is added to BUILTIN_MODULES; out-of-tree ones call register_scenario
from a plugin file (see bench/plugins.py)."""

from __future__ import annotations

import importlib

from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.errors import ConfigError

BUILTIN_MODULES = [
    "inferlab.bench.scenarios.attention_kernels",
    "inferlab.bench.scenarios.generate",
    "inferlab.bench.scenarios.classify",
    "inferlab.bench.scenarios.hidden_states",
    "inferlab.bench.scenarios.constrained",
    "inferlab.bench.scenarios.conformer_pipeline",
    "inferlab.bench.scenarios.conformer_quality",
    "inferlab.bench.scenarios.batching",
    "inferlab.bench.scenarios.decode_profile",
    "inferlab.bench.scenarios.steering",
]

SCENARIOS: dict[str, Scenario] = {}


def register_scenario(scenario: Scenario) -> None:
    SCENARIOS[scenario.name] = scenario


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ConfigError(f"unknown scenario {name!r}; choose one of: {', '.join(sorted(SCENARIOS))}") from None


for _module in BUILTIN_MODULES:
    register_scenario(importlib.import_module(_module).SCENARIO)

__all__ = ["SCENARIOS", "CellContext", "Scenario", "get_scenario", "register_scenario"]
