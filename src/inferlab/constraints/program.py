"""Compile a segment list (segments.py) against a tokenizer into a ConstraintProgram: the host-side,
immutable, cacheable op arrays that the engine's runtime (engine/constraints/runtime.py) copies into a
row's device buffers at admission.

Ops: COPY(token id) forces that token; HOLE(start state) lets the model write any string of the grammar,
token by token, until it emits the next op's token (the "exit token", e.g. `>[` or `>`), which the
runtime allows only in accepting states. EndOfSequence becomes COPY(eos).

Copy tokens come from tokenizing the whole text with sample fills in every hole (fills.py), and the
compiler refuses, with UnsupportedError naming what and why, whenever that is not sound:
- a token straddles a copy/hole boundary (e.g. `]<-` as one token), so no fixed copy token exists;
- a copy run's tokens change with the hole's content (shows both tokenizations and the fill);
- a copy run's first token could also continue the hole before it (the hole's end would be ambiguous).
Malformed programs (empty, holes touching, EndOfSequence not last, unknown grammar) raise InputError.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from inferlab.constraints.fills import sample_fills
from inferlab.constraints.segments import Copy, EndOfSequence, Hole, Segment
from inferlab.constraints.token_automaton import GrammarSet, grammar_set_for
from inferlab.errors import InputError, UnsupportedError

COPY = 1
HOLE = 2


@dataclass(frozen=True, eq=False)
class ConstraintProgram:
    """One compiled constraint. Share it between every request that needs it (it pickles, for process
    pools); never mutate its array or mapping."""

    # [2, L] int64 on the host (the runtime copies it to its device): ops[0] kind (COPY/HOLE), ops[1] token id
    # or start state
    ops: np.ndarray
    grammar_set_key: str  # the GrammarSet its start states belong to
    min_new_tokens: int  # fewest tokens a row can emit, EOS included
    max_new_tokens: int  # most tokens a row can emit, EOS included (exact bound: size the KV by it)
    segments: tuple[Segment, ...]  # the source, adjacent copies merged
    patterns: Mapping[str, str]  # grammar name -> pattern of each grammar its holes use
    hole_tokens: Mapping[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # grammar -> (min, max)

    @property
    def length(self) -> int:
        return self.ops.shape[1]

    def copy_token_ids(self) -> list[int]:
        """The forced tokens in order (EOS included)."""
        return self.ops[1][self.ops[0] == COPY].tolist()

    @property
    def eos_token_id(self) -> int:
        """The token of the final op (EndOfSequence), which ends a row."""
        return int(self.ops[1, -1])

    @property
    def initial_state(self) -> int:
        """The automaton state a row starts in: the first hole's start, or 0 when it starts with a copy."""
        return int(self.ops[1, 0]) if int(self.ops[0, 0]) == HOLE else 0

    def segment_at(self, op: int) -> int:
        """The index into `segments` of the segment op `op` belongs to (a Copy's run of COPY ops, a Hole's
        one HOLE op, EndOfSequence's final COPY)."""
        if not 0 <= op < self.length:
            raise InputError(f"op {op} is outside this program's ops 0..{self.length - 1}")
        if op == self.length - 1:
            return len(self.segments) - 1
        return bisect.bisect_right(self._segment_starts, op) - 1

    def hole_start(self, token_ids, hole: int) -> int:
        """The index in `token_ids` (an output written under this program) where HOLE op number `hole` (0-based,
        in order) starts, by the runtime's reading of the ops: a COPY op takes one token, a HOLE takes tokens up to
        its exit (the next op's token)."""
        kinds, values = self.ops[0].tolist(), self.ops[1].tolist()
        t, seen = 0, 0
        for op, kind in enumerate(kinds):
            if kind != HOLE:
                t += 1
                continue
            if seen == hole:
                return t
            seen += 1
            while token_ids[t] != values[op + 1]:
                t += 1
        raise InputError(f"the program has {seen} holes; there is no hole {hole}")

    def first_op(self, segment: int) -> int:
        """The index of segment `segment`'s first op."""
        return self.length - 1 if segment == len(self.segments) - 1 else self._segment_starts[segment]

    def suffix(self, segment: int) -> ConstraintProgram:
        """The program from segment `segment` on: what a row continues under after the tokens of the segments
        before it (a retry from inside a conformer; its prompt holds those tokens). Its ops are this program's
        from that segment's first op, and its bounds count only what remains."""
        if not 0 < segment < len(self.segments) - 1:
            raise InputError(f"a suffix starts at segment 1..{len(self.segments) - 2}, not {segment}")
        ops = np.ascontiguousarray(self.ops[:, self.first_op(segment):])
        copies = int((ops[0] == COPY).sum())
        holes = [self.hole_tokens[s.grammar] for s in self.segments[segment:] if isinstance(s, Hole)]
        return dataclasses.replace(self, ops=ops, min_new_tokens=copies + sum(h[0] for h in holes),
                                   max_new_tokens=copies + sum(h[1] for h in holes),
                                   segments=self.segments[segment:])

    @functools.cached_property
    def _segment_starts(self) -> list[int]:
        """The first op of each segment but EndOfSequence: a HOLE op, or a COPY op after a HOLE (or first)."""
        hole = (self.ops[0] == HOLE).tolist()
        return [i for i in range(len(hole)) if hole[i] or i == 0 or hole[i - 1]]


def compile_program(segments, tokenizer, grammar_set: GrammarSet | None = None) -> ConstraintProgram:
    """Segments -> ConstraintProgram for `tokenizer` (grammar_set defaults to the cached one of all
    grammars, which is what the engine's runtime is built with)."""
    grammar_set = grammar_set_for(tokenizer) if grammar_set is None else grammar_set
    if len(tokenizer) != grammar_set.tokenizer_vocab_size or tokenizer.eos_token_id != grammar_set.eos_token_id:
        raise InputError("the GrammarSet was built for another tokenizer; build it with grammar_set_for(tokenizer)")
    if not getattr(tokenizer, "is_fast", False):
        raise UnsupportedError(
            "constraints need a fast (Rust) tokenizer for character offsets; load it with use_fast=True"
        )
    pieces = _normalise(segments, grammar_set)
    copy_tokens = _copy_tokens(pieces, tokenizer, grammar_set)

    ops: list[tuple[int, int]] = []
    min_total = max_total = 0
    for index, piece in enumerate(pieces):
        if isinstance(piece, Copy):
            ops += [(COPY, t) for t in copy_tokens[index]]
            min_total += len(copy_tokens[index])
            max_total += len(copy_tokens[index])
        elif isinstance(piece, Hole):
            info = grammar_set.grammars[piece.grammar]
            _check_exit(piece, pieces[index + 1], copy_tokens.get(index + 1), grammar_set, tokenizer)
            ops.append((HOLE, info.start_state))
            min_total += info.min_tokens
            max_total += info.max_tokens
        else:
            ops.append((COPY, grammar_set.eos_token_id))
            min_total += 1
            max_total += 1
    return ConstraintProgram(
        ops=np.ascontiguousarray(np.array(ops, dtype=np.int64).T),
        grammar_set_key=grammar_set.key,
        min_new_tokens=min_total,
        max_new_tokens=max_total,
        segments=tuple(pieces),
        patterns={p.grammar: grammar_set.grammars[p.grammar].pattern for p in pieces if isinstance(p, Hole)},
        hole_tokens={p.grammar: (grammar_set.grammars[p.grammar].min_tokens, grammar_set.grammars[p.grammar].max_tokens)
                     for p in pieces if isinstance(p, Hole)},
    )


def _normalise(segments, grammar_set: GrammarSet) -> list[Segment]:
    """Validate the structure and merge adjacent copies."""
    pieces: list[Segment] = []
    for position, seg in enumerate(segments):
        if not isinstance(seg, (Copy, Hole, EndOfSequence)):
            raise InputError(f"segment {position} is {seg!r}; use Copy(text), Hole(grammar) or EndOfSequence()")
        if isinstance(seg, Copy) and not seg.text:
            raise InputError(f"segment {position} is an empty Copy; drop it")
        if isinstance(seg, Hole) and seg.grammar not in grammar_set.grammars:
            raise InputError(
                f"segment {position}: unknown grammar {seg.grammar!r}; known grammars: "
                + ", ".join(sorted(grammar_set.grammars))
            )
        if pieces and isinstance(pieces[-1], EndOfSequence):
            raise InputError(f"segment {position} follows EndOfSequence(); EndOfSequence must be the last segment")
        if pieces and isinstance(seg, Hole) and isinstance(pieces[-1], Hole):
            raise InputError(
                f"segments {position - 1} and {position} are two holes with no Copy between them; "
                "separate them by a Copy whose text marks where the first hole ends"
            )
        if pieces and isinstance(seg, Copy) and isinstance(pieces[-1], Copy):
            pieces[-1] = Copy(pieces[-1].text + seg.text)
        else:
            pieces.append(seg)
    if not pieces:
        raise InputError("the constraint program is empty; give at least one Copy and end with EndOfSequence()")
    if not isinstance(pieces[-1], EndOfSequence):
        raise InputError(
            f"a constraint describes the whole output and must end with EndOfSequence(); it ends with {pieces[-1]!r}"
        )
    return pieces


def _copy_tokens(pieces: list[Segment], tokenizer, grammar_set: GrammarSet) -> dict[int, list[int]]:
    """Tokenize the text with every fill; return piece index -> its copy token ids (equal for every fill)."""
    fills = {p.grammar: sample_fills(grammar_set.char_dfas[p.grammar]) for p in pieces if isinstance(p, Hole)}
    rounds = max((len(f) for f in fills.values()), default=1)
    layouts = []  # per round: (text, piece start offsets, fill per piece)
    for k in range(rounds):
        starts, chosen = [], []
        offset = 0
        for index, piece in enumerate(pieces):
            starts.append(offset)
            if isinstance(piece, Hole):
                options = fills[piece.grammar]
                chosen.append(options[(k + index) % len(options)])  # rotate so neighbours differ
            else:
                chosen.append(piece.text if isinstance(piece, Copy) else "")
            offset += len(chosen[-1])
        layouts.append(("".join(chosen), starts, chosen))
    encoded = tokenizer([text for text, _, _ in layouts], add_special_tokens=False, return_offsets_mapping=True)

    reference: dict[int, list[int]] | None = None
    for k, (text, starts, chosen) in enumerate(layouts):
        found = _assign_tokens(
            pieces, text, starts, chosen, encoded["input_ids"][k], encoded["offset_mapping"][k], tokenizer
        )
        if reference is None:
            reference = found
            continue
        for index, ids in found.items():
            if ids != reference[index]:
                raise UnsupportedError(
                    f"the tokenizer cuts copy text {pieces[index].text!r} differently depending on the hole "
                    f"content: {_show(reference[index], tokenizer)} with fills "
                    f"{_neighbour_fills(layouts[0][2], index)}, but {_show(ids, tokenizer)} with fills "
                    f"{_neighbour_fills(chosen, index)}; "
                    "change the copy text so its first/last characters cannot merge with the hole's"
                )
    for index, ids in reference.items():
        decoded = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if decoded != pieces[index].text:
            raise UnsupportedError(
                f"copy text {pieces[index].text!r} tokenizes to {_show(ids, tokenizer)}, which decodes to "
                f"{decoded!r}; this tokenizer does not round-trip the text (SentencePiece-style space handling?)"
            )
    return reference


def _assign_tokens(pieces, text, starts, chosen, ids, offsets, tokenizer) -> dict[int, list[int]]:
    """Map each token to the piece its characters lie in; refuse a token that straddles two pieces."""
    found: dict[int, list[int]] = {i: [] for i, p in enumerate(pieces) if isinstance(p, Copy)}
    for tok, (begin, end) in zip(ids, offsets):
        if end <= begin:
            raise UnsupportedError(
                f"token {tokenizer.decode([tok])!r} covers no characters of {text!r} (offsets {begin}-{end}); "
                "this tokenizer inserts tokens that constraints cannot place"
            )
        index = bisect.bisect_right(starts, begin) - 1  # among pieces starting here, the last (non-empty) one
        if end > starts[index] + len(chosen[index]):
            raise UnsupportedError(
                f"the tokenizer merges token {tokenizer.decode([tok])!r} (characters {begin}-{end} of "
                f"{text[max(0, begin - 12) : end + 12]!r}) across the boundary of {pieces[index]!r}; no fixed copy "
                "token exists there: change the copy text so its edge cannot merge with the hole's characters"
            )
        if index in found:
            found[index].append(tok)
    return found


def _check_exit(hole: Hole, following: Segment, following_tokens, grammar_set: GrammarSet, tokenizer) -> None:
    exit_token = grammar_set.eos_token_id if isinstance(following, EndOfSequence) else following_tokens[0]
    if grammar_set.is_candidate(hole.grammar, exit_token):
        raise UnsupportedError(
            f"the copy after a {hole.grammar!r} hole starts with token {tokenizer.decode([exit_token])!r}, which "
            "the hole could also continue with, so its end would be ambiguous; start the copy with a character "
            "outside the grammar's alphabet"
        )


def _show(ids: list[int], tokenizer) -> str:
    return "[" + " ".join(repr(tokenizer.decode([t])) for t in ids) + "]"


def _neighbour_fills(chosen: list[str], index: int) -> str:
    before = repr(chosen[index - 1]) if index > 0 else "-"
    after = repr(chosen[index + 1]) if index + 1 < len(chosen) else "-"
    return f"(before: {before}, after: {after})"
