"""Constraint pressure in the conformer job: each conformer's (Result.constraint_pressure: how much of the
model's probability the template's constraint took away, docs/constraints.md "Pressure") as row fields with
the place it peaked in words, and the run's figures with a warning when they say the checkpoint does not
write this format by itself.

A checkpoint that fits its profile writes the template's copies and its coordinate style almost alone, so
its pressure stays near 0. The seeds' silent failure was a profile that did not fit: `[O]` forced where the
checkpoint writes `[OH]` (v3 vs v2 descriptors), or `1.25` where it writes `1.2500` (stripped vs fixed4
coordinates). Every output is still valid (the constraint sees to it), but at such steps the constraint
overrides the model: the pressure of those steps is near 1. A model that fits its profile has such steps
too, where the molecule itself is open to doubt: an E/Z bond mark (`/` or `\\`), a tautomer's `[n]` where it
would write `[nH]`, a ring-closure digit after a block where it would write none (`>1[C]<` against its
`>[C]<`: the peak then sits at the block's exit token). Those copy runs read the same in every profile, so they say nothing of the profile: a
peak counts as a mismatch's trace only in a coordinate block or in a copy run that the other descriptor
style writes otherwise (`>[O]<` vs `>[OH]<`; `telling`). The run is flagged when at least SHARE_HIGH of its
conformers have such a step of pressure STEP_HIGH or more, or when the mean is high; where the maxima sit
(coordinate blocks or copy runs) names the likely mismatch. Calibrated on the reference model
(reference_model/): on small molecules with hydroxyls and amines, its own profile v3-fixed4 peaked below
0.05 and v2 descriptors at 1.0 in every conformer, stripped coordinates above 0.5 in most; on the demo's
held-out molecules with stereo, half of v3-fixed4's conformers peaked at >= 0.5, all of them at bond marks,
tautomers or a single block (tests/unit/conformers/test_reference_model_pressure.py).

Not here: the measurement (the engine's), the row writing (collect.py), the printing (the CLI).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inferlab.constraints.segments import Hole
from inferlab.errors import InferlabError
from inferlab.types import ConstraintPressure
from inferlab.workloads.conformers.chemistry.profiles import PROFILES, get_profile
from inferlab.workloads.conformers.chemistry.template import ConformerTemplate, build_template
from inferlab.workloads.stats import percentile

STEP_HIGH = 0.5  # a step where the constraint took at least half of the model's probability
SHARE_HIGH = 0.25  # the share of conformers with such a step that flags a run
MEAN_HIGH = 0.2  # a run mean this high: the model is far from the format throughout
ANYWHERE = 0.5  # a run mean this high: the model writes almost nothing of this format (random weights, say)
FIELDS = ("pressure_mean", "pressure_max", "pressure_max_step", "pressure_max_at")


@dataclass(frozen=True)
class RowPressure:
    """One conformer's pressure, located in its template."""

    mean: float
    max: float
    max_step: int  # the output token where it peaked
    where: str  # that token's segment in words (ConformerTemplate.describe_segment)
    in_block: bool  # the peak is inside an atom's coordinate block (else in a copy run or the EOS)
    telling: bool = True  # the peak sits where another profile reads otherwise (a block, or a copy run it writes
    # differently): a trace of a profile mismatch, not of the molecule's own ambiguity (an E/Z mark, a tautomer)

    def fields(self) -> dict[str, Any]:
        return dict(zip(FIELDS, (round(self.mean, 6), round(self.max, 6), self.max_step, self.where)))


NO_FIELDS = dict.fromkeys(FIELDS)  # a row without a measured pressure (the engine refused its request)


def whole_conformer_pressure(pressure: ConstraintPressure | None, task) -> ConstraintPressure | None:
    """A Result's pressure with its peak placed in the whole conformer: a retry from inside the conformer
    (pipeline/task.py) generated under its program's suffix after the kept tokens, so its peak's op and token
    move by where that suffix starts; its mean and steps stay the retry's own tokens."""
    if pressure is None or not task.from_segment:
        return pressure
    return dataclasses.replace(pressure, max_op=pressure.max_op + task.molecule.program.first_op(task.from_segment),
                               max_step=pressure.max_step + len(task.prefix))


def row_pressure(pressure: ConstraintPressure | None, molecule,
                 token_ids: Sequence[int] = ()) -> RowPressure | None:
    """A Result's pressure located in its molecule's (pipeline/prepare.PreparedMolecule) template. A peak at a block's exit token (the first token of the copy after it, which
    ends the hole: `>` where the model wrote `>[`) is the copy's: the model doubted what follows the block."""
    if pressure is None:
        return None
    program, template = molecule.program, molecule.template
    segment = program.segment_at(pressure.max_op)
    exit_token = int(program.ops[1, pressure.max_op + 1]) if pressure.max_op + 1 < program.length else None
    if isinstance(template.segments[segment], Hole) and pressure.max_step < len(token_ids) \
            and token_ids[pressure.max_step] == exit_token:
        segment += 1
    in_block = isinstance(template.segments[segment], Hole)
    telling = in_block or pressure.max < STEP_HIGH or molecule.read_otherwise[segment]
    return RowPressure(pressure.mean, pressure.max, pressure.max_step, template.describe_segment(segment),
                       in_block, telling)


def segments_read_otherwise(smiles: str, template: ConformerTemplate, profile: str) -> tuple[bool, ...]:
    """Per segment of `template`: whether the profile of the other descriptor style writes it otherwise (all
    True when there is none or it cannot write the molecule: nothing shows a peak to be the molecule's own).
    Computed where the molecule is prepared (prepare.py), so that locating a peak costs the engine's thread
    no template."""
    other = _other_profile(profile, "descriptor_style")
    alternative = None
    if other is not None:
        try:
            alternative = build_template(smiles, get_profile(other))
        except InferlabError:
            pass
    if alternative is None or len(alternative.segments) != len(template.segments):
        return (True,) * len(template.segments)
    return tuple(a != b for a, b in zip(alternative.segments, template.segments))


@dataclass
class PressureTally:
    """The run's pressures, one per generated conformer (stereo retries included)."""

    profile: str = ""  # the run's format profile (the warning names the alternatives)
    means: list[float] = field(default_factory=list)
    maxima: list[float] = field(default_factory=list)
    high_in_blocks: int = 0  # conformers whose peak >= STEP_HIGH is in a coordinate block
    high_in_copies: int = 0  # ... in a copy run that the other descriptor style writes otherwise
    high_in_common: int = 0  # ... in a copy run every profile writes alike (the molecule's own doubt)
    peak: tuple[float, str] | None = None  # the run's largest value and where (request id, token, segment)

    def add(self, request_id: str, pressure: RowPressure | None) -> None:
        if pressure is None:
            return
        self.means.append(pressure.mean)
        self.maxima.append(pressure.max)
        if pressure.max >= STEP_HIGH:
            self.high_in_blocks += pressure.in_block
            self.high_in_copies += pressure.telling and not pressure.in_block
            self.high_in_common += not pressure.telling
        if self.peak is None or pressure.max > self.peak[0]:
            self.peak = (pressure.max, f"{request_id} token {pressure.max_step}: {pressure.where}")

    def figures(self) -> dict[str, Any] | None:
        """mean (of the per-conformer means), p95_request_mean, median_request_max, high_share (conformers
        with a telling step >= STEP_HIGH), max and max_at, the high-step counts and the warning (None when
        nothing is wrong); None without a measured conformer."""
        if not self.means:
            return None
        out = {"conformers": len(self.means), "mean": round(statistics.fmean(self.means), 6),
               "p95_request_mean": round(percentile(self.means, 95), 6),
               "median_request_max": round(statistics.median(self.maxima), 6),
               "high_share": round((self.high_in_blocks + self.high_in_copies) / len(self.means), 6),
               "max": round(self.peak[0], 6),
               "max_at": self.peak[1], "high_in_blocks": self.high_in_blocks, "high_in_copies": self.high_in_copies,
               "high_in_common": self.high_in_common}
        out["warning"] = pressure_warning(out, self.profile)
        return out


def pressure_warning(figures: dict[str, Any], profile: str) -> str | None:
    """Why a run's pressure (PressureTally.figures) says the checkpoint does not fit the format, and what to
    try; None when it does not say so."""
    mean, share = figures["mean"], figures["high_share"]
    if mean < MEAN_HIGH and share < SHARE_HIGH:
        return None
    told = f"the constraint took away a mean {mean:.2f} of the model's probability per token"
    if share >= SHARE_HIGH:
        told += f", and at least {STEP_HIGH:.0%} of it at some token in {share:.0%} of the conformers"
    if mean >= ANYWHERE:
        cause = ("the model writes almost nothing of this format by itself: random weights, or a checkpoint "
                 "never trained on it")
    elif figures["high_in_copies"] >= figures["high_in_blocks"]:
        cause = (f"the peaks sit in copy runs (atom descriptors, bonds): the checkpoint may write another "
                 f"descriptor style (v3: `[O]`, v2: `[OH]`){_try(profile, 'descriptor_style')}")
    else:
        cause = (f"the peaks sit in coordinate blocks: the checkpoint may write another coordinate style (fixed4: "
                 f"`1.2500`, stripped: `1.25`){_try(profile, 'coordinate_style')}")
    return f"constraint pressure is high: {told}. Likely cause: {cause}. The outputs are valid, but the " \
           "constraint, not the model, wrote them where it overrode it."  # fmt: skip


def _try(profile: str, style: str) -> str:
    """'; try --profile X' with the profile that differs from `profile` in `style` alone ('' if none)."""
    other = _other_profile(profile, style)
    return f"; try --profile {other}" if other else ""


def _other_profile(profile: str, style: str) -> str | None:
    """The profile that differs from `profile` in `style` alone (None if none or `profile` is unknown)."""
    if profile not in PROFILES:
        return None
    mine = get_profile(profile)
    kept = "descriptor_style" if style == "coordinate_style" else "coordinate_style"
    for p in PROFILES.values():
        if getattr(p, style) != getattr(mine, style) and getattr(p, kept) == getattr(mine, kept):
            return p.name
    return None
