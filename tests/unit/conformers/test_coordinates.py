"""Coordinate values: truncation toward zero, the two styles, strict block parsing."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferlab.constraints.grammars import GRAMMARS
from inferlab.errors import InputError
from inferlab.workloads.conformers.chemistry.coordinates import COORDINATE_STYLES, format_fixed4, format_stripped

FIXED4 = COORDINATE_STYLES["fixed4"]
STRIPPED = COORDINATE_STYLES["stripped"]

values = st.floats(min_value=-999.9999, max_value=999.9999, allow_nan=False, allow_infinity=False)


def exact_reference(v: float) -> str:
    """Truncation of the float's exact value, through Fraction (independent of the code under test)."""
    units = math.trunc(Fraction(v) * 10000)
    sign = "-" if units < 0 else ""
    return f"{sign}{abs(units) // 10000}.{abs(units) % 10000:04d}"


def seeds_formula(v: float) -> float:
    """The seeds' training-data formula (3DMolGen `truncate`): trunc of the floating-point product."""
    return math.trunc(v * 10000) / 10000


@pytest.mark.parametrize(
    "value, fixed4, stripped",
    [
        (1.25, "1.2500", "1.25"),
        (0.0, "0.0000", "0"),
        (-0.0, "0.0000", "0"),
        (-0.00009, "0.0000", "0"),  # truncates to zero: never -0.0000
        (-3.1, "-3.1000", "-3.1"),
        (10.0, "10.0000", "10"),
        (-10.42899, "-10.4289", "-10.4289"),  # truncated, not rounded to -10.4290
        (0.99999, "0.9999", "0.9999"),
        (999.99999, "999.9999", "999.9999"),
        (-0.5, "-0.5000", "-0.5"),
        (1.005, "1.0049", "1.0049"),  # the float 1.005 is 1.00499999...
        (838.9998999999999, "838.9998", "838.9998"),  # the float product would round up to 8389999
    ],
)
def test_known_values(value, fixed4, stripped):
    assert format_fixed4(value) == fixed4
    assert format_stripped(value) == stripped


@pytest.mark.parametrize("value", [1000.0, -1000.0, 1234.5, float("nan"), float("inf")])
def test_refuses_values_the_format_cannot_hold(value):
    with pytest.raises(InputError, match="coordinate"):
        format_fixed4(value)


@settings(max_examples=300, deadline=None)
@given(values)
def test_fixed4_is_exact_truncation_and_fits_the_grammar(v):
    text = format_fixed4(v)
    assert text == exact_reference(v)
    assert abs(Fraction(text)) <= abs(Fraction(v))  # toward zero, exactly
    assert abs(float(text) - seeds_formula(v)) <= 1.0001e-4  # the training data's formula, within one unit
    assert abs(v - float(text)) < 1.0001e-4
    assert re.fullmatch(GRAMMARS["coord3-fixed4"], ",".join([text] * 3))


@settings(max_examples=300, deadline=None)
@given(values)
def test_stripped_is_fixed4_without_trailing_zeros(v):
    text = format_stripped(v)
    assert float(text) == float(format_fixed4(v))
    assert not text.endswith(".") and ("." not in text or not text.endswith("0"))
    assert re.fullmatch(GRAMMARS["coord3-stripped"], ",".join([text] * 3))


@settings(max_examples=200, deadline=None)
@given(values, values, values)
def test_block_round_trip(x, y, z):
    for style in (FIXED4, STRIPPED):
        block = style.format_block(x, y, z)
        parsed = style.parse_block(block)
        assert parsed == tuple(float(style.format_value(v)) for v in (x, y, z))


@pytest.mark.parametrize(
    "content",
    [
        "0.9587abra,1.0000,2.0000",
        "1.2.3,0.0000,0.0000",
        "1.0000,2.0000",
        "1.0000,2.0000,3.0000,4.0000",
        "1.0000,,3.0000",
        "-0.0000,1.0000,2.0000",
        "01.0000,1.0000,2.0000",
        "1.000,1.0000,2.0000",  # fixed4 needs 4 decimals
        " 1.0000,1.0000,2.0000",
        "+1.0000,1.0000,2.0000",
        "1e3,1.0000,2.0000",
        "1.0000,2.0000,3.0000,",
        "1000.0000,0.0000,0.0000",
        "",
    ],
)
def test_fixed4_parser_rejects_junk(content):
    with pytest.raises(InputError, match="coord3-fixed4"):
        FIXED4.parse_block(content)


@pytest.mark.parametrize("content", ["1.50,0,0", "-0,0,0", "1.,0,0", "0.9587abra,0,0", "1.2.3,0,0", "1,2"])
def test_stripped_parser_rejects_junk(content):
    with pytest.raises(InputError, match="coord3-stripped"):
        STRIPPED.parse_block(content)
