"""A Cell: one fully resolved benchmark configuration, and its stable key.

The key hashes what the cell measures (scenario, backend, model, every knob), not how it is run (the
timeout), so a rerun of the same plan into the same run directory recognises finished cells. Cells
round-trip through JSON: the launcher hands them to a fresh process that way.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cell:
    scenario: str
    backend: str | None  # a generate backend (hf, inferlab...) or None where the scenario has none
    model: str | None  # a preset name or a checkpoint directory; None where the scenario has no model
    config: dict[str, Any] = field(default_factory=dict)  # every knob, resolved; do not mutate
    timeout_s: float = 600.0

    @property
    def key(self) -> str:
        identity = {"scenario": self.scenario, "backend": self.backend, "model": self.model, "config": self.config}
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        return digest[:16]

    @property
    def batch_size(self) -> int | None:
        value = self.config.get("batch_size")
        return int(value) if value is not None else None

    def label(self, knobs: list[str] | None = None) -> str:
        """`k=v` for the given knobs (default: all), for progress lines and logs."""
        names = knobs if knobs is not None else sorted(self.config)
        parts = [f"{self.scenario}", self.backend or "", self.model or ""]
        parts += [f"{n}={self.config[n]}" for n in names if n in self.config]
        return " ".join(p for p in parts if p)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "backend": self.backend,
            "model": self.model,
            "config": dict(self.config),
            "timeout_s": self.timeout_s,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Cell":
        return cls(
            scenario=data["scenario"],
            backend=data.get("backend"),
            model=data.get("model"),
            config=dict(data.get("config", {})),
            timeout_s=float(data.get("timeout_s", 600.0)),
        )
