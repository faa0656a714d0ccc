"""A conformer template as one regular expression: how a user of a peer (vLLM's structured outputs,
xgrammar, llguidance) constrains a conformer, so the lab can put those peers beside our engine.

`template_regex(template.segments)`: each `Copy` escaped as literal text, each `Hole` replaced by its
named grammar (constraints/grammars.py, already written in the regex subset every engine reads),
and the template's `EndOfSequence` as the end of the pattern: a peer's grammar matcher allows only EOS
once the pattern is complete, so the output ends exactly where ours does. The language is the same as our
constraint's (the same grammars, the same literal text); only the tokenisation is free, since a regex
constrains text, not tokens (our engine forces each copy run's canonical tokens).

The escape set is the characters that are special outside a class in Python's `re`, Rust's `regex`
(llguidance) and xgrammar's converter: escaping any other character is refused by some of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferlab.constraints.grammars import GRAMMARS
from inferlab.constraints.segments import Copy, EndOfSequence, Hole, Segment
from inferlab.errors import ConfigError

_SPECIAL = frozenset("\\.^$|?*+()[]{}")


def escape_literal(text: str) -> str:
    """`text` as a pattern that matches exactly it, in every regex dialect the peers read."""
    return "".join("\\" + ch if ch in _SPECIAL else ch for ch in text)


def template_regex(segments: Sequence[Segment]) -> str:
    """The regex whose full matches are exactly the texts the constraint `segments` allows (EOS left to the
    peer: its matcher ends the output when the pattern is complete). ConfigError when an EndOfSequence is not
    the last segment (a regex cannot say "EOS here, then more text") or a hole names an unknown grammar."""
    parts = []
    for i, segment in enumerate(segments):
        if isinstance(segment, Copy):
            parts.append(escape_literal(segment.text))
        elif isinstance(segment, Hole):
            grammar = GRAMMARS.get(segment.grammar)
            if grammar is None:
                raise ConfigError(f"hole grammar {segment.grammar!r} is unknown; use one of {', '.join(GRAMMARS)}")
            parts.append(f"(?:{grammar})")
        elif isinstance(segment, EndOfSequence):
            if i != len(segments) - 1:
                raise ConfigError("EndOfSequence before the last segment cannot be written as a regex; end the "
                                  "template there")
        else:
            raise ConfigError(f"unknown segment {segment!r}")
    return "".join(parts)
