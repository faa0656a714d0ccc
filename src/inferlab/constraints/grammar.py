"""Compile a pattern of our regex subset (regex_syntax.py) into a minimal deterministic character
automaton: Thompson NFA -> subset construction -> removal of dead states -> Moore minimisation.

Owns the character level only. token_automaton.py lifts a CharDFA to a tokenizer's tokens; fills.py
derives sample strings from it. States are numbered 0..n-1 in breadth-first order from the start (over
sorted characters), so the same pattern always gives the same automaton; DEAD (-1) is implicit.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import lru_cache

from inferlab.constraints.regex_syntax import Alternation, CharSet, Concat, Node, Repeat, parse_regex
from inferlab.errors import ConfigError

DEAD = -1
MAX_ALPHABET = 1024  # larger classes would make the subset construction slow for no use we have


@dataclass(frozen=True, eq=False)
class CharDFA:
    """A minimal DFA over characters; only live states (reachable and able to reach acceptance) exist."""

    pattern: str
    alphabet: str  # every character some transition reads, sorted
    transitions: tuple[dict[str, int], ...]  # [state] char -> next state; a missing char means DEAD
    start: int  # DEAD when the pattern matches nothing
    accepting: frozenset[int]

    @property
    def num_states(self) -> int:
        return len(self.transitions)

    def step(self, state: int, ch: str) -> int:
        return DEAD if state == DEAD else self.transitions[state].get(ch, DEAD)

    def run(self, text: str, state: int | None = None) -> int:
        """The state after reading `text` from `state` (default: the start), or DEAD."""
        state = self.start if state is None else state
        for ch in text:
            state = self.step(state, ch)
            if state == DEAD:
                break
        return state

    def matches(self, text: str) -> bool:
        return self.run(text) in self.accepting

    def is_bounded(self) -> bool:
        """True when the language is finite, i.e. the live automaton has no cycle."""
        return self.topological_order() is not None

    def topological_order(self) -> list[int] | None:
        """States with every transition going forward (Kahn's algorithm), or None if there is a cycle."""
        indegree = [0] * self.num_states
        for row in self.transitions:
            for t in row.values():
                indegree[t] += 1
        queue = deque(s for s in range(self.num_states) if indegree[s] == 0)
        order = []
        while queue:
            s = queue.popleft()
            order.append(s)
            for t in self.transitions[s].values():
                indegree[t] -= 1
                if indegree[t] == 0:
                    queue.append(t)
        return order if len(order) == self.num_states else None


@lru_cache(maxsize=64)
def compile_grammar(pattern: str) -> CharDFA:
    """Pattern -> minimal CharDFA (cached; patterns are few and immutable)."""
    nfa = _Nfa()
    start, end = nfa.build(parse_regex(pattern))
    alphabet = "".join(sorted({ch for moves in nfa.moves for chars, _ in moves for ch in chars}))
    if len(alphabet) > MAX_ALPHABET:
        raise ConfigError(
            f"grammar {pattern!r} reads {len(alphabet)} distinct characters (limit {MAX_ALPHABET}); "
            "narrow its character classes"
        )
    dfa_moves, dfa_accepting = _determinise(nfa, start, end, alphabet)
    return _minimise(pattern, alphabet, dfa_moves, dfa_accepting)


class _Nfa:
    """Thompson NFA: per state a list of epsilon targets and a list of (chars, target) moves."""

    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.moves: list[list[tuple[frozenset[str], int]]] = []

    def state(self) -> int:
        self.eps.append([])
        self.moves.append([])
        return len(self.eps) - 1

    def build(self, node: Node) -> tuple[int, int]:
        """Fresh (start, end) states recognising `node`."""
        s, e = self.state(), self.state()
        if isinstance(node, CharSet):
            self.moves[s].append((node.chars, e))
        elif isinstance(node, Concat):
            cur = s
            for item in node.items:
                a, b = self.build(item)
                self.eps[cur].append(a)
                cur = b
            self.eps[cur].append(e)
        elif isinstance(node, Alternation):
            for option in node.options:
                a, b = self.build(option)
                self.eps[s].append(a)
                self.eps[b].append(e)
        elif isinstance(node, Repeat):
            cur = s
            for _ in range(node.min_count):
                a, b = self.build(node.item)
                self.eps[cur].append(a)
                cur = b
            if node.max_count is None:  # a star: loop back through one more copy
                a, b = self.build(node.item)
                self.eps[cur].append(a)
                self.eps[b].append(cur)
            else:  # each optional copy may be skipped straight to the end
                for _ in range(node.max_count - node.min_count):
                    a, b = self.build(node.item)
                    self.eps[cur].append(a)
                    self.eps[cur].append(e)
                    cur = b
            self.eps[cur].append(e)
        else:  # pragma: no cover - the parser produces only the four node kinds
            raise AssertionError(f"unknown node {node!r}")
        return s, e

    def closure(self, states: frozenset[int]) -> frozenset[int]:
        seen, stack = set(states), list(states)
        while stack:
            for t in self.eps[stack.pop()]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)


def _determinise(nfa: _Nfa, start: int, end: int, alphabet: str) -> tuple[list[dict[str, int]], list[bool]]:
    """Subset construction. Returns per DFA state its moves (char -> state) and whether it accepts."""
    first = nfa.closure(frozenset([start]))
    index = {first: 0}
    queue = deque([first])
    moves: list[dict[str, int]] = [{}]
    accepting = [end in first]
    while queue:
        subset = queue.popleft()
        here = index[subset]
        for ch in alphabet:
            targets = frozenset(t for s in subset for chars, t in nfa.moves[s] if ch in chars)
            if not targets:
                continue
            nxt = nfa.closure(targets)
            if nxt not in index:
                index[nxt] = len(moves)
                moves.append({})
                accepting.append(end in nxt)
                queue.append(nxt)
            moves[here][ch] = index[nxt]
    return moves, accepting


def _minimise(pattern: str, alphabet: str, moves: list[dict[str, int]], accepting: list[bool]) -> CharDFA:
    n = len(moves)
    # Live = can reach acceptance (every state is reachable by construction).
    live = set(s for s in range(n) if accepting[s])
    changed = True
    while changed:
        changed = False
        for s in range(n):
            if s not in live and any(t in live for t in moves[s].values()):
                live.add(s)
                changed = True
    if 0 not in live:
        return CharDFA(pattern, alphabet, (), DEAD, frozenset())

    def target_block(s: int, ch: str, block: dict[int, int]) -> int:
        t = moves[s].get(ch, DEAD)
        return block[t] if t in live else DEAD

    # Moore refinement: split blocks until every state's successors' blocks agree within a block.
    block = {s: int(accepting[s]) for s in live}
    while True:
        signatures = {s: (block[s],) + tuple(target_block(s, ch, block) for ch in alphabet) for s in live}
        numbering: dict[tuple[int, ...], int] = {}
        refined = {s: numbering.setdefault(sig, len(numbering)) for s, sig in sorted(signatures.items())}
        if len(numbering) == len(set(block.values())):
            break
        block = refined

    # Renumber blocks breadth-first from the start block for a canonical, deterministic automaton.
    representative = {}
    for s in sorted(live):
        representative.setdefault(block[s], s)
    order = {block[0]: 0}
    queue = deque([block[0]])
    out_moves: list[dict[str, int]] = []
    out_accepting = set()
    while queue:
        b = queue.popleft()
        rep = representative[b]
        row = {}
        for ch in alphabet:
            t = target_block(rep, ch, block)
            if t == DEAD:
                continue
            if t not in order:
                order[t] = len(order)
                queue.append(t)
            row[ch] = order[t]
        out_moves.append(row)
        if accepting[rep]:
            out_accepting.add(order[b])
    used = "".join(sorted({ch for row in out_moves for ch in row}))
    return CharDFA(pattern, used, tuple(out_moves), 0, frozenset(out_accepting))
