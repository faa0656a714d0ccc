"""Parse our regex subset into a small syntax tree. Owns the syntax only; grammar.py builds automata.

The subset, chosen so that every accepted pattern means exactly what it means to Python's `re` (tests
compare the two): literal characters, `\\` + a punctuation character (a literal), `[...]` classes with
ranges (`[0-9]`, `[a-cx]`, escapes inside), groups `( )` and `(?: )`, alternation `|`, and one quantifier
per atom: `?`, `*`, `+`, `{m}`, `{m,}`, `{m,n}`. Anything else (`.`, `^`, `$`, `[^...]`, `\\d`, stacked or
lazy quantifiers, a lone `]` or `}`) is refused with a ConfigError that names the position and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferlab.errors import ConfigError

MAX_REPEAT = 1000  # a bound on {m,n}: each repeat copies the sub-automaton
_SPECIAL = set("()|?*+{}[].^$\\")
_QUANTIFIER_START = set("?*+{")


@dataclass(frozen=True)
class CharSet:
    """One character out of `chars` (a literal is a one-character set)."""

    chars: frozenset[str]


@dataclass(frozen=True)
class Concat:
    items: tuple[Node, ...]  # empty tuple = the empty string


@dataclass(frozen=True)
class Alternation:
    options: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat:
    item: Node
    min_count: int
    max_count: int | None  # None = unbounded


Node = CharSet | Concat | Alternation | Repeat


def parse_regex(pattern: str) -> Node:
    """Return the syntax tree of `pattern`; raise ConfigError naming the first problem."""
    parser = _Parser(pattern)
    node = parser.alternation()
    if parser.pos != len(pattern):
        parser.fail("unbalanced ')'", "remove it or escape it as '\\)'")
    return node


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.pos = 0

    def fail(self, problem: str, fix: str) -> None:
        raise ConfigError(f"grammar {self.pattern!r}, position {self.pos}: {problem}; {fix}")

    def peek(self) -> str | None:
        return self.pattern[self.pos] if self.pos < len(self.pattern) else None

    def take(self) -> str:
        ch = self.pattern[self.pos]
        self.pos += 1
        return ch

    def alternation(self) -> Node:
        options = [self.concat()]
        while self.peek() == "|":
            self.take()
            options.append(self.concat())
        return options[0] if len(options) == 1 else Alternation(tuple(options))

    def concat(self) -> Node:
        items = []
        while self.peek() is not None and self.peek() not in "|)":
            items.append(self.repeat())
        return items[0] if len(items) == 1 else Concat(tuple(items))

    def repeat(self) -> Node:
        if self.peek() in _QUANTIFIER_START:
            self.fail(f"quantifier {self.peek()!r} has nothing to repeat", "escape it with '\\'")
        node = self.atom()
        if self.peek() in _QUANTIFIER_START:
            node = self.quantifier(node)
            if self.peek() in _QUANTIFIER_START:
                self.fail("stacked or lazy quantifiers are not supported", "wrap the repeated part in ( )")
        return node

    def quantifier(self, node: Node) -> Node:
        ch = self.take()
        if ch == "?":
            return Repeat(node, 0, 1)
        if ch == "*":
            return Repeat(node, 0, None)
        if ch == "+":
            return Repeat(node, 1, None)
        close = self.pattern.find("}", self.pos)
        body = self.pattern[self.pos : close] if close >= 0 else ""
        low, comma, high = body.partition(",")
        if close < 0 or not low.isdigit() or not (high.isdigit() or high == ""):
            self.fail("'{' must be followed by m}, m,} or m,n}", "write {2}, {1,} or {1,3}, or escape '\\{'")
        self.pos = close + 1
        min_count = int(low)
        max_count = min_count if not comma else (int(high) if high else None)
        if max_count is not None and max_count < min_count:
            self.fail(f"{{{body}}} has max < min", "swap the bounds")
        if max(min_count, max_count or 0) > MAX_REPEAT:
            self.fail(f"{{{body}}} repeats more than {MAX_REPEAT} times", "use * or + for long runs")
        return Repeat(node, min_count, max_count)

    def atom(self) -> Node:
        ch = self.take()
        if ch == "(":
            if self.pattern.startswith("?:", self.pos):
                self.pos += 2
            elif self.peek() == "?":
                self.fail("only the (?: ) group extension is supported", "use ( ) or (?: )")
            node = self.alternation()
            if self.peek() != ")":
                self.fail("missing ')'", "close the group")
            self.take()
            return node
        if ch == "[":
            return self.char_class()
        if ch == "\\":
            return CharSet(frozenset(self.escaped()))
        if ch in _SPECIAL:
            self.pos -= 1
            self.fail(f"{ch!r} is not supported here", f"escape it as '\\{ch}' for the literal character")
        return CharSet(frozenset(ch))

    def escaped(self) -> str:
        if self.peek() is None:
            self.fail("pattern ends with '\\'", "escape the backslash as '\\\\'")
        ch = self.take()
        if ch.isalnum():  # \d, \w, \1 ... mean something else to `re`
            self.pos -= 1
            self.fail(
                f"escape '\\{ch}' is not supported (only punctuation may be escaped)", "write a class such as [0-9]"
            )
        return ch

    def char_class(self) -> Node:
        if self.peek() == "^":
            self.fail("negated classes [^...] are not supported", "list the allowed characters")
        chars: set[str] = set()
        first = True
        while True:
            ch = self.peek()
            if ch is None:
                self.fail("missing ']'", "close the class")
            if ch == "]" and not first:
                self.take()
                break
            if ch == "]" or ch == "[":
                self.fail(f"{ch!r} inside a class is ambiguous", f"escape it as '\\{ch}'")
            low = self.class_char()
            if self.peek() == "-" and self.pattern[self.pos + 1 : self.pos + 2] not in ("]", ""):
                self.take()
                high = self.class_char()
                if ord(high) < ord(low):
                    self.fail(f"range {low}-{high} is reversed", f"write {high}-{low}")
                chars.update(chr(c) for c in range(ord(low), ord(high) + 1))
            else:
                chars.add(low)
            first = False
        return CharSet(frozenset(chars))

    def class_char(self) -> str:
        ch = self.take()
        return self.escaped() if ch == "\\" else ch
