"""Lift character automata (grammar.py) to one tokenizer's tokens: the GrammarSet, built once per tokenizer
and cached, holding the host-side tables that the engine's runtime (engine/constraints/runtime.py) moves
to the device.

A token is a candidate of a grammar when its text (the token decoded alone) is non-empty, consists only of
characters of the grammar's alphabet, and decodes the same inside a sequence (so byte-level pieces of a
multi-byte character and SentencePiece tokens whose leading space vanishes when decoded alone are never
candidates). transition(state, token) runs the character DFA over the token's text; a token that dies is
not allowed. Nothing assumes one token per character: Llama-3-style tokenizers write `770` as one token.

All grammars share one state space: state 0 is dead, each grammar owns a contiguous range. States from
which no token path reaches acceptance are removed, so every live state offers at least one token or the
exit. Tokens that behave identically in every state share a class: transitions are [S, C] over classes,
class 0 = "dead everywhere" (every non-candidate token, padded ids included). Owns the tables only; the
program compiler (program.py) and the device runtime (engine/constraints/runtime.py) use them.
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from inferlab.constraints.grammar import DEAD, CharDFA, compile_grammar
from inferlab.constraints.grammars import GRAMMARS
from inferlab.errors import ConfigError, UnsupportedError

log = logging.getLogger(__name__)

DEAD_STATE = 0
DEAD_CLASS = 0


@dataclass(frozen=True)
class GrammarInfo:
    name: str
    pattern: str
    start_state: int  # global state id (>= 1) of the empty prefix
    num_states: int  # live token-level states of this grammar
    min_tokens: int  # fewest tokens from the start to acceptance
    max_tokens: int  # most tokens from the start to acceptance (holes are bounded)
    candidate_tokens: tuple[int, ...]  # token ids allowed in at least one state


@dataclass(frozen=True, eq=False)
class GrammarSet:
    """Token-level automata of several grammars for one tokenizer, in one global state space. Immutable by
    contract (never mutate its mappings or tensors); it pickles."""

    key: str  # fingerprint of the token texts, EOS and grammar patterns; programs carry it
    tokenizer_vocab_size: int  # len(tokenizer): ids the tables cover
    eos_token_id: int
    grammars: Mapping[str, GrammarInfo]
    char_dfas: Mapping[str, CharDFA]
    # the tables are numpy (host side; no torch in the processes that compile programs): the engine's runtime
    # takes them to its device
    transitions: np.ndarray  # [S, C] int64 next state per (state, token class); row 0 = dead
    token_class: np.ndarray  # [V_tok] int64 class of each token id; 0 = dead everywhere
    accepting: np.ndarray  # [S] bool

    @property
    def num_states(self) -> int:
        return self.transitions.shape[0]

    @property
    def num_classes(self) -> int:
        return self.transitions.shape[1]

    def next_state(self, state: int, token_id: int) -> int:
        """Host-side transition (tests and diagnostics; the device uses the tables)."""
        if not 0 <= token_id < self.tokenizer_vocab_size:
            return DEAD_STATE
        return int(self.transitions[state, self.token_class[token_id]])

    def allowed_tokens(self, state: int) -> list[int]:
        """Token ids with a live transition from `state`."""
        live_classes = np.flatnonzero(self.transitions[state] != DEAD_STATE)
        return np.flatnonzero(np.isin(self.token_class, live_classes)).tolist()

    def is_candidate(self, grammar: str, token_id: int) -> bool:
        return token_id in self.grammars[grammar].candidate_tokens


def token_texts(tokenizer) -> list[str]:
    """Each id of the tokenizer decoded alone, exactly (no space clean-up, specials kept).

    A fast tokenizer's Rust backend decodes the whole vocabulary in one decode_batch call, several times
    faster than batch_decode's per-id Python path (paid by the engine's constraint set-up and by every
    template-building process). transformers' decode of a fast tokenizer is that same backend call plus the
    clean-up we turn off; a spread sample of ids (every added token among them) is checked against
    batch_decode, and any difference falls back to batch_decode for all ids."""
    ids = [[i] for i in range(len(tokenizer))]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        texts = backend.decode_batch(ids, skip_special_tokens=False)
        sample = sorted(set(range(0, len(ids), max(1, len(ids) // 2048))) | set(tokenizer.added_tokens_decoder))
        sample = [i for i in sample if i < len(ids)]
        if len(texts) == len(ids) and [texts[i] for i in sample] == _python_decode(tokenizer, [ids[i] for i in sample]):
            return texts
        log.warning("the tokenizer's backend decodes some ids differently from transformers: decoding each "
                    "id through batch_decode (slower)")
    return _python_decode(tokenizer, ids)


def _python_decode(tokenizer, ids: list[list[int]]) -> list[str]:
    return tokenizer.batch_decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def grammar_set_for(tokenizer, grammar_names: tuple[str, ...] | None = None) -> GrammarSet:
    """The GrammarSet of `tokenizer` for the named grammars (default: all of GRAMMARS), built once per
    tokenizer object and cached for its lifetime."""
    names = tuple(sorted(GRAMMARS)) if grammar_names is None else tuple(sorted(set(grammar_names)))
    per_tokenizer = _CACHE.setdefault(tokenizer, {})
    if names not in per_tokenizer:
        per_tokenizer[names] = build_grammar_set(tokenizer, {n: _pattern(n) for n in names})
    return per_tokenizer[names]


def _pattern(name: str) -> str:
    if name not in GRAMMARS:
        raise ConfigError(f"unknown grammar {name!r}; known grammars: {', '.join(sorted(GRAMMARS))}")
    return GRAMMARS[name]


def build_grammar_set(tokenizer, patterns: Mapping[str, str]) -> GrammarSet:
    """Build the tables for `patterns` (name -> pattern) over `tokenizer`'s vocabulary."""
    if not patterns:
        raise ConfigError("a GrammarSet needs at least one grammar")
    if tokenizer.eos_token_id is None:
        raise UnsupportedError("the tokenizer has no EOS token; EndOfSequence cannot be forced")
    texts = token_texts(tokenizer)
    lifted = {name: _lift(name, pattern, texts, tokenizer) for name, pattern in sorted(patterns.items())}

    # Global numbering: 0 dead, then each grammar's live states (its start first).
    global_id: dict[tuple[str, int], int] = {}
    for name, lift in lifted.items():
        for q in lift.states:
            global_id[(name, q)] = len(global_id) + 1
    num_states = len(global_id) + 1

    # Classes: tokens with the same (state -> next state) behaviour everywhere share one.
    behaviour: dict[int, list[tuple[int, int]]] = {}
    for name, lift in lifted.items():
        for q, row in lift.moves.items():
            for tok, r in row.items():
                behaviour.setdefault(tok, []).append((global_id[(name, q)], global_id[(name, r)]))
    class_of_signature: dict[tuple[tuple[int, int], ...], int] = {}
    token_class = np.zeros(len(texts), dtype=np.int64)
    for tok in sorted(behaviour):
        signature = tuple(sorted(behaviour[tok]))
        token_class[tok] = class_of_signature.setdefault(signature, len(class_of_signature) + 1)
    transitions = np.zeros((num_states, len(class_of_signature) + 1), dtype=np.int64)
    for signature, cls in class_of_signature.items():
        for s, r in signature:
            transitions[s, cls] = r
    accepting = np.zeros(num_states, dtype=np.bool_)
    infos = {}
    for name, lift in lifted.items():
        for q in lift.states:
            accepting[global_id[(name, q)]] = q in lift.dfa.accepting
        infos[name] = GrammarInfo(
            name=name,
            pattern=patterns[name],
            start_state=global_id[(name, lift.dfa.start)],
            num_states=len(lift.states),
            min_tokens=lift.min_tokens,
            max_tokens=lift.max_tokens,
            candidate_tokens=lift.candidates,
        )
    return GrammarSet(
        key=_fingerprint(texts, tokenizer.eos_token_id, patterns),
        tokenizer_vocab_size=len(texts),
        eos_token_id=tokenizer.eos_token_id,
        grammars=infos,
        char_dfas={name: lift.dfa for name, lift in lifted.items()},
        transitions=transitions,
        token_class=token_class,
        accepting=accepting,
    )


@dataclass
class _Lift:
    dfa: CharDFA
    states: list[int]  # live DFA states in breadth-first order from the start
    moves: dict[int, dict[int, int]]  # live state -> token id -> live state
    candidates: tuple[int, ...]
    min_tokens: int
    max_tokens: int


def _lift(name: str, pattern: str, texts: list[str], tokenizer) -> _Lift:
    dfa = compile_grammar(pattern)
    if dfa.start == DEAD:
        raise ConfigError(f"grammar {name!r} ({pattern!r}) matches no string")
    if not dfa.is_bounded():
        raise UnsupportedError(
            f"grammar {name!r} ({pattern!r}) is unbounded (it has * or +); a hole needs a finite language to "
            "size the KV cache: write bounded repeats such as {0,8}"
        )
    alphabet = set(dfa.alphabet)
    chars_ok = [i for i, t in enumerate(texts) if t and "\ufffd" not in t and set(t) <= alphabet]
    # A token must decode the same inside a sequence as alone: [t, t] must read text + text.
    pairs = tokenizer.batch_decode([[i, i] for i in chars_ok], skip_special_tokens=False,
                                   clean_up_tokenization_spaces=False)
    tokens = [i for i, pair in zip(chars_ok, pairs) if pair == texts[i] * 2]

    all_moves = {q: {} for q in range(dfa.num_states)}
    for q in range(dfa.num_states):
        for tok in tokens:
            r = dfa.run(texts[tok], q)
            if r != DEAD:
                all_moves[q][tok] = r
    live = _co_reachable(all_moves, dfa.accepting)
    if dfa.start not in live:
        raise UnsupportedError(
            f"grammar {name!r} ({pattern!r}): no sequence of this tokenizer's tokens spells an accepted string"
        )
    states = _reachable(all_moves, dfa.start, live)
    moves = {q: {tok: r for tok, r in all_moves[q].items() if r in live} for q in states}
    candidates = tuple(sorted({tok for row in moves.values() for tok in row}))
    min_tokens, max_tokens = _token_path_bounds(moves, dfa)
    return _Lift(dfa, states, moves, candidates, min_tokens, max_tokens)


def _co_reachable(moves: dict[int, dict[int, int]], accepting: frozenset[int]) -> set[int]:
    live = set(accepting)
    changed = True
    while changed:
        changed = False
        for q, row in moves.items():
            if q not in live and any(r in live for r in row.values()):
                live.add(q)
                changed = True
    return live


def _reachable(moves: dict[int, dict[int, int]], start: int, live: set[int]) -> list[int]:
    order, queue, seen = [], deque([start]), {start}
    while queue:
        q = queue.popleft()
        order.append(q)
        for r in sorted(set(moves[q].values())):
            if r in live and r not in seen:
                seen.add(r)
                queue.append(r)
    return order


def _token_path_bounds(moves, dfa: CharDFA) -> tuple[int, int]:
    """Fewest and most tokens on a path from the start to an accepting state. A token move q -> r follows
    a character path q -> r, so the character automaton's topological order orders the token graph too."""
    fewest: dict[int, int] = {}
    most: dict[int, int] = {}
    for q in reversed(dfa.topological_order()):  # successors first
        if q not in moves:
            continue
        options = [0] if q in dfa.accepting else []
        options_most = list(options)
        for r in set(moves[q].values()):
            options.append(fewest[r] + 1)
            options_most.append(most[r] + 1)
        fewest[q], most[q] = min(options), max(options_most)
    return fewest[dfa.start], most[dfa.start]


def _fingerprint(texts: list[str], eos: int, patterns: Mapping[str, str]) -> str:
    digest = hashlib.sha256()
    digest.update("\x00".join(texts).encode("utf-8", "surrogatepass"))
    digest.update(f"\x01{eos}\x01".encode())
    for name, pattern in sorted(patterns.items()):
        digest.update(f"{name}\x02{pattern}\x03".encode())
    return digest.hexdigest()[:16]
