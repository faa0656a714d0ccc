"""Sample fills: accepted by `re`, covering every first and last character at the extreme lengths."""

from __future__ import annotations

import itertools
import re

import pytest
from constraint_helpers import patterns
from hypothesis import HealthCheck, given, settings

from inferlab.constraints.fills import sample_fills
from inferlab.constraints.grammar import DEAD, compile_grammar
from inferlab.constraints.grammars import GRAMMARS
from inferlab.errors import ConfigError



def _language(pattern: str, alphabet: str, max_len: int) -> list[str]:
    """Brute force: every string up to max_len that `re` accepts."""
    return [
        "".join(chars)
        for n in range(max_len + 1)
        for chars in itertools.product(alphabet, repeat=n)
        if re.fullmatch(pattern, "".join(chars))
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=patterns(bounded=True))
def test_fills_cover_first_and_last_characters_at_extreme_lengths(pattern):
    dfa = compile_grammar(pattern)
    if dfa.start == DEAD or len(dfa.alphabet) > 3 or dfa.num_states > 7:
        return  # keep the brute force small
    language = _language(pattern, dfa.alphabet, dfa.num_states)  # n live states: no string is longer
    fills = sample_fills(dfa)
    assert all(re.fullmatch(pattern, f) for f in fills)
    assert len(set(fills)) == len(fills)
    for position in (0, -1):
        for ch in {s[position] for s in language if s}:
            lengths = [len(s) for s in language if s and s[position] == ch]
            covering = [len(f) for f in fills if f and f[position] == ch]
            assert min(lengths) in covering and max(lengths) in covering, (pattern, position, ch)
    assert ("" in language) == ("" in fills)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_coordinate_fills_include_signs_and_extreme_lengths(name):
    fills = sample_fills(compile_grammar(GRAMMARS[name]))
    assert all(re.fullmatch(GRAMMARS[name], f) for f in fills)
    assert {f[0] for f in fills} == set("-0123456789")
    assert {f[-1] for f in fills} >= set("123456789")
    assert "-999.9999,-999.9999,-999.9999" in fills  # the longest string
    shortest = "0.0000,0.0000,0.0000" if name == "coord3-fixed4" else "0,0,0"
    assert shortest in fills
    assert sample_fills(compile_grammar(GRAMMARS[name])) == fills  # deterministic


def test_unbounded_or_empty_grammars_have_no_fills():
    with pytest.raises(ConfigError, match="unbounded"):
        sample_fills(compile_grammar("[0-9]+"))
