"""The program compiler: op arrays against the tokenizer's own cut, bounds, and every refusal."""

from __future__ import annotations

import pickle

import pytest
import numpy as np
from constraint_helpers import make_tokenizer

from inferlab.constraints.program import COPY, HOLE, compile_program
from inferlab.constraints.segments import Copy, EndOfSequence, Hole
from inferlab.constraints.token_automaton import build_grammar_set, grammar_set_for
from inferlab.errors import InputError, UnsupportedError

FIXED4 = Hole("coord3-fixed4")
STRIPPED = Hole("coord3-stripped")
# Acetic-acid-like skeleton: [C][C](=[O])[O]
SKELETON = [
    Copy("[CONFORMER][C]<"), FIXED4, Copy(">[C]<"), FIXED4, Copy(">(=[O]<"), FIXED4, Copy(">)[O]<"), FIXED4,
    Copy(">[/CONFORMER]"), EndOfSequence(),
]
FILLS = ["1.2345,-0.0310,0.9400", "-10.4289,0.0000,2.0000", "0.0000,0.0000,0.0000", "-1.0000,-2.0000,-3.0000"]


def _texts(program, tokenizer) -> list[str]:
    return [tokenizer.decode([a]) if k == COPY else f"<hole {a}>" for k, a in program.ops.T.tolist()]


def test_qwen_skeleton_ops_match_the_studied_cut(qwen_case):
    program = compile_program(SKELETON, qwen_case.tokenizer)
    hole = f"<hole {qwen_case.grammar_set.grammars['coord3-fixed4'].start_state}>"
    assert _texts(program, qwen_case.tokenizer) == [
        "[CONFORMER]", "[C", "]<", hole, ">[", "C", "]<", hole, ">(", "=[", "O", "]<", hole,
        ">", ")[", "O", "]<", hole, ">", "[/CONFORMER]", "<|endoftext|>",
    ]  # fmt: skip  (the study: `)[O-]` is cut `>` `)[` `O` `-` `]<`)
    copies = 16
    assert program.min_new_tokens == copies + 1 + 4 * 20 and program.max_new_tokens == copies + 1 + 4 * 29
    assert program.grammar_set_key == qwen_case.grammar_set.key and program.initial_state == 0


def test_copy_tokens_equal_the_tokenizers_cut_of_real_filled_texts(case):
    program = compile_program(SKELETON, case.tokenizer)
    for shift in range(len(FILLS)):
        parts = []
        for i, seg in enumerate(SKELETON[:-1]):
            parts.append(seg.text if isinstance(seg, Copy) else FILLS[(i + shift) % len(FILLS)])
        text = "".join(parts)
        encoded = case.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        in_holes = []
        pos = 0
        for part, seg in zip(parts, SKELETON):
            if isinstance(seg, Hole):
                in_holes.append((pos, pos + len(part)))
            pos += len(part)
        copy_ids = [
            t for t, (b, e) in zip(encoded.input_ids, encoded.offset_mapping)
            if not any(h0 <= b and e <= h1 for h0, h1 in in_holes)
        ]  # fmt: skip
        assert copy_ids + [case.tokenizer.eos_token_id] == program.copy_token_ids()


def test_llama_style_cut_and_bounds(llama_case):
    segments = [Copy("[C]<"), FIXED4, Copy(">"), STRIPPED, Copy(">"), EndOfSequence()]
    program = compile_program(segments, llama_case.tokenizer)
    kinds = program.ops[0].tolist()
    assert kinds == [COPY, COPY, COPY, HOLE, COPY, HOLE, COPY, COPY]
    assert program.min_new_tokens == 3 + 14 + 1 + 5 + 1 + 1
    assert program.max_new_tokens == 3 + 29 + 1 + 29 + 1 + 1
    assert program.patterns.keys() == {"coord3-fixed4", "coord3-stripped"}


def test_programs_may_start_with_a_hole_and_end_a_hole_at_eos(case):
    program = compile_program([FIXED4, Copy(">x"), STRIPPED, EndOfSequence()], case.tokenizer)
    gs = case.grammar_set
    assert program.initial_state == gs.grammars["coord3-fixed4"].start_state
    assert program.ops[:, -2].tolist() == [HOLE, gs.grammars["coord3-stripped"].start_state]
    assert program.ops[:, -1].tolist() == [COPY, case.tokenizer.eos_token_id]
    assert compile_program([EndOfSequence()], case.tokenizer).ops.tolist() == [[COPY], [case.tokenizer.eos_token_id]]


def test_adjacent_copies_merge_before_tokenizing(qwen_case):
    split = compile_program([Copy("[C]"), Copy("<"), FIXED4, Copy(">"), EndOfSequence()], qwen_case.tokenizer)
    whole = compile_program([Copy("[C]<"), FIXED4, Copy(">"), EndOfSequence()], qwen_case.tokenizer)
    assert split.ops.tolist() == whole.ops.tolist()


@pytest.mark.parametrize(
    "segments, fragment",
    [
        ([], "empty"),
        ([Copy("a")], "must end with EndOfSequence()"),
        ([EndOfSequence(), Copy("a"), EndOfSequence()], "EndOfSequence must be the last"),
        ([Copy("<"), FIXED4, STRIPPED, EndOfSequence()], "two holes with no Copy between them"),
        ([Copy("<"), Hole("coord9"), EndOfSequence()], "known grammars: coord3-fixed4, coord3-stripped"),
        ([Copy(""), EndOfSequence()], "empty Copy"),
        (["[C]<", EndOfSequence()], "use Copy(text)"),
    ],
)
def test_malformed_programs_are_input_errors(qwen_case, segments, fragment):
    with pytest.raises(InputError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        compile_program(segments, qwen_case.tokenizer)


def test_a_token_straddling_a_boundary_is_refused(qwen_case, llama_case):
    # qwen merges "<-" unless "]<" wins: after "1" the '<' joins the hole's '-'.
    with pytest.raises(UnsupportedError, match=r"merges token '<-'.*Copy\(text='\[C\]1<'\)"):
        compile_program([Copy("[C]1<"), FIXED4, Copy(">"), EndOfSequence()], qwen_case.tokenizer)
    # The built-in tokenizer groups digits: a ring digit before a hole joins the hole's first digits.
    with pytest.raises(UnsupportedError, match=r"merges token '\d+'"):
        compile_program([Copy(">1"), STRIPPED, Copy(">"), EndOfSequence()], llama_case.tokenizer)


def test_a_copy_cut_that_depends_on_the_fill_is_refused():
    # A pre-tokenizer whose split of "ab" looks ahead at the next character: "a" "b" before '-', else "ab".
    tok = make_tokenizer(list("ab-0123456789>") + ["ab"], [("a", "b")], r"[a-z]+(?=[a-z]-)|[a-z]+|[0-9]|[^a-z0-9]")
    gs = build_grammar_set(tok, {"int": "-?[0-9]"})
    with pytest.raises(UnsupportedError) as err:
        compile_program([Copy("ab"), Hole("int"), Copy(">"), EndOfSequence()], tok, gs)
    message = str(err.value)
    assert "copy text 'ab'" in message and "['ab']" in message and "['a' 'b']" in message
    assert "after: '-" in message  # names the fill that changed it


def test_an_exit_token_the_hole_could_continue_with_is_refused(llama_case, qwen_case):
    with pytest.raises(UnsupportedError, match="starts with token ','"):
        compile_program([Copy("[C]<"), FIXED4, Copy(",x"), EndOfSequence()], llama_case.tokenizer)
    with pytest.raises(UnsupportedError, match="starts with token '2'"):
        compile_program([Copy("[C]<"), STRIPPED, Copy("2>"), EndOfSequence()], qwen_case.tokenizer)


def test_grammar_set_of_another_tokenizer_is_refused(qwen_case, llama_case):
    with pytest.raises(InputError, match="another tokenizer"):
        compile_program(SKELETON, llama_case.tokenizer, qwen_case.grammar_set)


def test_a_program_compiled_twice_is_identical(qwen_case):
    a = compile_program(SKELETON, qwen_case.tokenizer)
    b = compile_program(SKELETON, qwen_case.tokenizer, grammar_set_for(qwen_case.tokenizer))
    assert a.ops.tolist() == b.ops.tolist() and a.segments == b.segments


def test_programs_and_grammar_sets_pickle_for_process_pools(qwen_case):
    program = compile_program(SKELETON, qwen_case.tokenizer)
    copy = pickle.loads(pickle.dumps(program))
    assert copy.ops.tolist() == program.ops.tolist() and copy.patterns == program.patterns
    assert copy.segments == program.segments and copy.grammar_set_key == program.grammar_set_key
    grammar_set = pickle.loads(pickle.dumps(qwen_case.grammar_set))
    assert grammar_set.key == qwen_case.grammar_set.key
    assert np.array_equal(grammar_set.transitions, qwen_case.grammar_set.transitions)


def test_segment_at_names_the_segment_of_every_op(llama_case):
    """Copy runs (several COPY ops), holes (one HOLE op each), EndOfSequence (the final COPY)."""
    program = compile_program([Copy("[C]<"), Hole("coord3-fixed4"), Copy(">[O]<"), Hole("coord3-fixed4"),
                               Copy(">"), EndOfSequence()], llama_case.tokenizer)
    kinds = program.ops[0].tolist()
    segments = [program.segment_at(op) for op in range(program.length)]
    assert segments == sorted(segments) and segments[-1] == len(program.segments) - 1 == 5
    assert [s for s, kind in zip(segments, kinds) if kind == HOLE] == [1, 3]
    assert {s for s, kind in zip(segments[:-1], kinds) if kind == COPY} == {0, 2, 4}
    with pytest.raises(InputError, match="outside this program's ops"):
        program.segment_at(program.length)
