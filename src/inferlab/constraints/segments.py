"""The source form of a constraint: what a workload writes, before it is compiled against a tokenizer.

A constraint is a sequence of segments. `Copy(text)` must appear verbatim; `Hole(grammar)` is filled by the
model with any string of that named grammar (grammars.py); `EndOfSequence()` forces the tokenizer's EOS.
Two holes may not touch: a Copy must separate them, and its first character must lie outside the hole
grammar's alphabet so the automaton knows where the hole ends.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Copy:
    text: str


@dataclass(frozen=True)
class Hole:
    grammar: str  # a key of grammars.GRAMMARS


@dataclass(frozen=True)
class EndOfSequence:
    pass


Segment = Copy | Hole | EndOfSequence
