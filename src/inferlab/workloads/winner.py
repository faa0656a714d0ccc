"""Which measured configuration wins, knob by knob: the one rule `inferlab tune` and `inferlab recommend`
share.

A candidate is a configuration (knob -> value) with its figure (the median of its timed repeats) and its
spread, the relative range of those repeats ((max - min) / median); with fewer than MIN_REPEATS repeats
the spread is unknown. The best candidate (by figure) is named for a knob only when it beats the best
candidate with another value of that knob by more than the larger of the two spreads, both measured. A
margin inside the spread is "no clear winner", said with the figures. A spread not measured is too, saying
how many more repeats would measure it, unless the lead is over LEAD_BEYOND_ANY_SPREAD (the best more than
twice its rival): no run-to-run variation is that large, so such a lead is named, and said to rest on that.
A knob that takes one value among the candidates gets no verdict: nothing was compared; nor does a knob
the best candidate lacks (None: another backend's), and a rival lacking it is passed over. This relative
range is the one meaning of "spread" in every report (workloads/stats.py `Stats.spread` is the same figure).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MIN_REPEATS = 3
LEAD_BEYOND_ANY_SPREAD = 1.0  # a lead over 100% is no measurement noise, repeats or not


def relative_range(values: Sequence[float]) -> float | None:
    """(max - min) / median of `values`, or None with fewer than MIN_REPEATS of them (or a zero median)."""
    if len(values) < MIN_REPEATS:
        return None
    median = statistics.median(values)
    return (max(values) - min(values)) / abs(median) if median else None


@dataclass(frozen=True)
class Candidate:
    settings: Mapping[str, Any]
    figure: float  # the median of the repeats (or the row's headline)
    spread: float | None  # relative range of the repeats; None: fewer than MIN_REPEATS, or not measured
    repeats: int

    @classmethod
    def from_repeats(cls, settings: Mapping[str, Any], values: Sequence[float]) -> Candidate:
        return cls(dict(settings), statistics.median(values), relative_range(values), len(values))


@dataclass(frozen=True)
class Verdict:
    knob: str
    value: Any  # the best candidate's
    rival: Candidate  # the best candidate with another value of the knob
    margin: float  # how much better the best is than the rival (0.05 = 5%)
    spread: float | None  # the larger of the two spreads; None when either is unknown
    fewest_repeats: int = field(default=0)

    @property
    def beyond_any_spread(self) -> bool:
        """No spread was measured, but the lead is larger than any run-to-run variation."""
        return self.spread is None and self.margin > LEAD_BEYOND_ANY_SPREAD

    @property
    def clear(self) -> bool:
        return (self.spread is not None and self.margin > self.spread) or self.beyond_any_spread

    def describe(self) -> str:
        named = f"{self.knob}={_show(self.value)}"
        rival = f"{self.knob}={_show(self.rival.settings.get(self.knob))}"
        if self.beyond_any_spread:
            return (f"{named} ({self.margin:.1%} ahead of {rival}; spread not measured, but a lead over "
                    f"{LEAD_BEYOND_ANY_SPREAD:.0%} is larger than any plausible run-to-run spread)")
        if self.clear:
            return f"{named} ({self.margin:.1%} ahead of {rival}, spread {self.spread:.1%})"
        if self.spread is None:
            more = MIN_REPEATS - self.fewest_repeats
            return (f"{self.knob}: no clear winner ({named} leads {rival} by {self.margin:.1%}; spread not measured: "
                    f"{MIN_REPEATS} timed repeats needed, {self.fewest_repeats} made, {more} more of each would "
                    "decide it)")
        return (f"{self.knob}: no clear winner ({named} leads {rival} by {self.margin:.1%}, inside the spread "
                f"{self.spread:.1%})")

    def as_dict(self) -> dict[str, Any]:
        return {"knob": self.knob, "value": self.value, "rival": dict(self.rival.settings),
                "margin": round(self.margin, 4), "spread": None if self.spread is None else round(self.spread, 4),
                "clear": self.clear, "text": self.describe()}


def decide(candidates: Iterable[Candidate], knobs: Iterable[str],
           higher_is_better: bool = True) -> tuple[Candidate, list[Verdict]]:
    """The best candidate and a verdict for each of `knobs` that takes more than one value among them."""
    ranked = sorted(candidates, key=lambda c: c.figure, reverse=higher_is_better)
    if not ranked:
        raise ValueError("no candidates to decide between")
    best = ranked[0]
    verdicts = []
    for knob in knobs:
        if best.settings.get(knob) is None:  # a knob the best does not have (another backend's): nothing to name
            continue
        rivals = [c for c in ranked[1:] if c.settings.get(knob) not in (None, best.settings.get(knob))]
        if not rivals:
            continue
        rival = rivals[0]
        spreads = (best.spread, rival.spread)
        spread = None if None in spreads else max(spreads)  # type: ignore[type-var]
        verdicts.append(Verdict(knob, best.settings.get(knob), rival, margin(best.figure, rival.figure, higher_is_better),
                                spread, min(best.repeats, rival.repeats)))
    return best, verdicts


def margin(best: float, other: float, higher_is_better: bool = True) -> float:
    """How much better `best` is than `other` (0.05 = 5%)."""
    low, high = (other, best) if higher_is_better else (best, other)
    return high / low - 1 if low > 0 else math.inf


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
