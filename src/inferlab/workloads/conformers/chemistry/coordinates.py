"""Coordinate styles: how one Angstrom value is written inside a `<x,y,z>` block, and how a block is read.

Values are truncated toward zero at 4 decimals, exactly: the float's binary value (`1.005` is really
1.00499999999999989...) is cut, so the written value never exceeds |v|. 3DMolGen's data uses
`trunc(v * 1e4)` in floating point, which agrees except where that product rounds onto the next integer
(about one value in 10^5; `838.9998999999999` -> ours `838.9998`, theirs `838.9999`), a 1e-4 A difference
a model cannot tell apart. fixed4 always writes 4 decimals; stripped removes trailing zeros and a trailing '.'.
Neither ever writes `-0.0000` / `-0`. |value| >= 1000 and non-finite values are refused.

Parsing is strict: a block must fullmatch the style's grammar (constraints/grammars.py), so
`0.9587abra` or `1.2.3` is an error, never a number.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from inferlab.constraints.grammars import GRAMMARS
from inferlab.errors import InputError

DECIMALS = 4
_SCALE = 10**DECIMALS
MAX_ABS_VALUE = 1000.0  # the grammars allow at most 3 integer digits


def truncated_units(value: float) -> int:
    """trunc(value * 10**4) as an int; raises InputError for values the format cannot hold."""
    if not math.isfinite(value):
        raise InputError(f"coordinate {value!r} is not a finite number; the conformer cannot be written")
    if abs(value) >= MAX_ABS_VALUE:
        raise InputError(
            f"coordinate {value:.4f} has |value| >= {MAX_ABS_VALUE:g} A, which the conformer format cannot write "
            "(at most 3 integer digits); centre the conformer or check its units"
        )
    numerator, denominator = value.as_integer_ratio()  # exact; denominator is a power of two
    units = abs(numerator) * _SCALE // denominator
    return -units if numerator < 0 else units


def format_fixed4(value: float) -> str:
    units = truncated_units(value)
    sign = "-" if units < 0 else ""  # units == 0 never gets a sign
    whole, frac = divmod(abs(units), _SCALE)
    return f"{sign}{whole}.{frac:0{DECIMALS}d}"


def format_stripped(value: float) -> str:
    return format_fixed4(value).rstrip("0").rstrip(".")


@dataclass(frozen=True)
class CoordinateStyle:
    name: str
    grammar: str  # a key of grammars.GRAMMARS: the content of one block, `x,y,z`
    format_value: Callable[[float], str]
    baseline_placeholder: str  # the placeholder value the 3DMolGen-style baseline template uses

    def format_block(self, x: float, y: float, z: float) -> str:
        """The content of one block (without `<` and `>`)."""
        return ",".join(self.format_value(v) for v in (x, y, z))

    def parse_block(self, content: str) -> tuple[float, float, float]:
        """Strictly parse one block's content; InputError names the grammar it violates."""
        if _COMPILED[self.grammar].fullmatch(content) is None:
            raise InputError(f"coordinate block <{content}> is not three {self.name} values (grammar {self.grammar})")
        x, y, z = (float(part) for part in content.split(","))
        return x, y, z


_COMPILED = {name: re.compile(pattern) for name, pattern in GRAMMARS.items()}

COORDINATE_STYLES: dict[str, CoordinateStyle] = {
    s.name: s
    for s in [
        CoordinateStyle("fixed4", "coord3-fixed4", format_fixed4, baseline_placeholder="0.0000"),
        # 3DMolGen's baseline uses a 3-decimal placeholder with the stripped-format checkpoints.
        CoordinateStyle("stripped", "coord3-stripped", format_stripped, baseline_placeholder="0.000"),
    ]
}
