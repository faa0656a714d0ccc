"""Sample strings of a bounded grammar, used as hole fills when program.py checks how a tokenizer cuts
the text around each hole. Owns the choice of fills; not the tokenization checks themselves.

A tokenizer's cut near a hole boundary depends on the characters next to it, so the fills cover every
character a string can start with and every character it can end with, each at the shortest and the
longest accepted length (for coordinates: with and without a leading '-', one and three integer digits),
plus a few seeded random strings. All are derived from the automaton, so a new grammar needs no list.
"""

from __future__ import annotations

import random
from functools import lru_cache

from inferlab.constraints.grammar import CharDFA
from inferlab.errors import ConfigError


def _key_short(s: str) -> tuple[int, str]:
    return (len(s), s)


@lru_cache(maxsize=64)
def sample_fills(dfa: CharDFA, num_random: int = 4, seed: int = 0) -> tuple[str, ...]:
    """Distinct accepted strings of `dfa` (a bounded, non-empty language), deterministic for a seed."""
    if dfa.start < 0:
        raise ConfigError(f"grammar {dfa.pattern!r} matches no string")
    if not dfa.is_bounded():
        raise ConfigError(f"grammar {dfa.pattern!r} is unbounded; sample fills need a finite language")
    short_suffix, long_suffix = _suffixes(dfa)
    short_prefix, long_prefix = _prefixes(dfa)

    fills: list[str] = []
    if dfa.start in dfa.accepting:
        fills.append("")
    for ch, t in sorted(dfa.transitions[dfa.start].items()):  # every first character
        fills += [ch + short_suffix[t], ch + long_suffix[t]]
    last_chars = sorted({ch for row in dfa.transitions for ch, t in row.items() if t in dfa.accepting})
    for ch in last_chars:  # every last character
        ends = [q for q, row in enumerate(dfa.transitions) if row.get(ch, -1) in dfa.accepting]
        fills.append(min((short_prefix[q] + ch for q in ends), key=_key_short))
        fills.append(max((long_prefix[q] + ch for q in ends), key=_key_short))
    rng = random.Random(seed)
    fills += [_random_string(dfa, rng) for _ in range(num_random)]
    return tuple(dict.fromkeys(fills))


def _suffixes(dfa: CharDFA) -> tuple[list[str], list[str]]:
    """Per state, the shortest and the longest string leading from it to acceptance."""
    short: list[str] = [""] * dfa.num_states
    long: list[str] = [""] * dfa.num_states
    for s in reversed(dfa.topological_order()):  # successors first
        options = [""] if s in dfa.accepting else []
        for ch, t in dfa.transitions[s].items():
            options += [ch + short[t], ch + long[t]]
        short[s] = min(options, key=_key_short)
        long[s] = max(options, key=_key_short)
    return short, long


def _prefixes(dfa: CharDFA) -> tuple[list[str], list[str]]:
    """Per state, the shortest and the longest string leading from the start to it."""
    order = dfa.topological_order()
    short: list[str | None] = [None] * dfa.num_states
    long: list[str | None] = [None] * dfa.num_states
    short[dfa.start] = long[dfa.start] = ""
    for s in order:
        if short[s] is None:
            continue
        for ch, t in dfa.transitions[s].items():
            if short[t] is None or _key_short(short[s] + ch) < _key_short(short[t]):
                short[t] = short[s] + ch
            if long[t] is None or _key_short(long[s] + ch) > _key_short(long[t]):
                long[t] = long[s] + ch
    return short, long


def _random_string(dfa: CharDFA, rng: random.Random) -> str:
    """A random walk to acceptance: each step picks uniformly among stopping (if accepting) and each char."""
    state, out = dfa.start, []
    while True:
        options = sorted(dfa.transitions[state].items())
        if state in dfa.accepting and (not options or rng.random() < 1 / (len(options) + 1)):
            return "".join(out)
        ch, state = rng.choice(options)
        out.append(ch)
