"""The engine grid's descent: each KV dtype's max_slots measured from the largest down, and the smaller sizes
left out once one size falls clearly below a larger one.

A decode step reads the weights once for all its rows, so the engine's throughput rises with max_slots until
the batch saturates the device or the job's tail (its last, longest rows) dominates; below a size that is
clearly slower than a larger one, every smaller size is slower still, and the small sizes are the slow ones
to measure (docs/decisions.md "Why the tune descends from the largest batch"). "Clearly": the larger size
leads (winner.margin) by more than either candidate's measured spread and by at least MIN_LEAD. A size that
failed (out of memory, an unsupported setting) stops nothing: a smaller one may run. The sizes left out are
rows of the tuned file ({"settings", "skipped": why}), never silently absent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferlab.workloads.winner import margin

MIN_LEAD = 0.03  # below the best larger size by less than this, the descent goes on (noise of a few %)


def largest_first(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The engine candidates (grouped by KV dtype) with each group's max_slots descending."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for candidate in candidates:
        groups.setdefault(candidate["kv_dtype"], []).append(candidate)
    return [c for group in groups.values() for c in sorted(group, key=lambda c: -c["max_slots"])]


@dataclass
class Descent:
    metric: str
    _best: dict[str, tuple[float, float, int]] = field(default_factory=dict)  # kv -> (figure, spread, max_slots)
    _stopped: dict[str, str] = field(default_factory=dict)  # kv -> why its smaller sizes are left out

    def skip_reason(self, candidate: dict[str, Any]) -> str | None:
        return self._stopped.get(candidate["kv_dtype"])

    def saw(self, candidate: dict[str, Any], figures: dict[str, Any] | None) -> None:
        """Take a measured candidate's figures (None: it failed)."""
        figure = (figures or {}).get(self.metric)
        if not figure:
            return
        kv, size, spread = candidate["kv_dtype"], candidate["max_slots"], figures.get("spread") or 0.0
        best = self._best.get(kv)
        if best is None or figure > best[0]:
            self._best[kv] = (figure, spread, size)
            return
        lead = margin(best[0], figure)
        if lead > max(MIN_LEAD, spread, best[1]):
            self._stopped[kv] = (f"not measured: max_slots={size} ran {lead:.1%} below max_slots={best[2]} (past "
                                 f"both spreads), so smaller sizes were left out (workloads/tune/descent.py)")
