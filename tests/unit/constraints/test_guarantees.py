"""The promise, property-tested: whatever the logits and the sampling settings, every constrained row's
output is text of its program (copies exact, each hole matching its grammar by `re.fullmatch`), ends with
EOS, has a length within [min_new_tokens, max_new_tokens], and its forced copy ids are what the tokenizer
writes for the text actually generated. Both tokenizers; random programs; adversarial logits."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from inferlab.constraints.grammars import GRAMMARS
from inferlab.constraints.program import compile_program
from inferlab.constraints.segments import Copy, EndOfSequence, Hole
from inferlab.constraints.simulate import AdversarialLogits, ReferenceSampling, check_output, reference_decode
from inferlab.engine.constraints.runtime import ConstraintRuntime
from inferlab.errors import UnsupportedError

STRUCTURE = "[]()=#/\\123456789%CcNnOoSsH@+-."  # bonds, branches, ring closures, atoms, charges
LETTERS = "CcNnOoSsBrClHF"
LURE_TEXTS = [">", ">[", ">(", ">)", "]<", "<", "<-", "a", "C", "..", "-.", ",,", " ", "[/CONFORMER]", "1e", "+"]
SAMPLINGS = [
    ReferenceSampling(0.0),
    ReferenceSampling(1.0),
    ReferenceSampling(1.0, top_k=5),
    ReferenceSampling(1.0, top_k=50, top_p=0.9),
    ReferenceSampling(0.7, top_k=20, top_p=0.5),
]
TOP_P_ONLY = ReferenceSampling(1.0, top_p=0.8)  # a sort over the whole vocabulary: built-in tokenizer only
MAX_ROWS, MAX_LEN = 4, 160


@st.composite
def conformer_like(draw) -> list:
    """`[CONFORMER][atom]<hole>`, then per atom `>` + random structure text + `[atom]<hole>`, then
    `>` + structure + `[/CONFORMER]` and EOS; holes mix the fixed4 and stripped grammars."""
    atom = st.text(alphabet=LETTERS, min_size=1, max_size=3)
    structure = st.text(alphabet=STRUCTURE, max_size=5)
    hole = st.sampled_from(sorted(GRAMMARS)).map(Hole)
    segments = [Copy(f"[CONFORMER][{draw(atom)}]<"), draw(hole)]
    for _ in range(draw(st.integers(0, 2))):
        segments += [Copy(f">{draw(structure)}[{draw(atom)}]<"), draw(hole)]
    return segments + [Copy(f">{draw(structure)}[/CONFORMER]"), EndOfSequence()]


@st.composite
def free_form(draw) -> list:
    """Random structure text on both sides of the holes: the compiler may refuse (UnsupportedError)."""
    text = st.text(alphabet=STRUCTURE + "<>", min_size=1, max_size=6)
    segments = [Copy(draw(text))]
    for _ in range(draw(st.integers(1, 2))):
        segments += [draw(st.sampled_from(sorted(GRAMMARS)).map(Hole)), Copy(draw(text))]
    return segments + [EndOfSequence()]


@pytest.fixture(scope="module")
def runtimes(qwen_case, llama_case):
    return {
        c.name: ConstraintRuntime(c.grammar_set, MAX_ROWS, MAX_LEN, c.model_vocab, "cpu")
        for c in (qwen_case, llama_case)
    }


def _lure_ids(case) -> list[int]:
    tok = case.tokenizer
    ids = {i for text in LURE_TEXTS for i in tok(text, add_special_tokens=False).input_ids}
    return sorted(ids | {tok.eos_token_id, len(tok), case.model_vocab - 1})  # padded ids included


def _generate_and_check(case, runtime, programs, sampling, seed) -> None:
    """Rows 0..n-1 constrained, one more row free; every constrained row must be a valid output."""
    for row, program in enumerate(programs + [None]):
        runtime.assign(row, program)
    batch = len(programs) + 1
    generator = torch.Generator().manual_seed(seed)
    varied = {t for info in case.grammar_set.grammars.values() for t in info.candidate_tokens}
    logits = AdversarialLogits(batch, case.model_vocab, varied, _lure_ids(case), generator, "cpu")
    steps = max(p.max_new_tokens for p in programs) + 2  # two more: EOS must stay
    tokens = reference_decode(runtime, steps, logits, sampling, generator)
    eos = case.tokenizer.eos_token_id
    for row, program in enumerate(programs):
        ids = tokens[row].tolist()
        note(f"row {row}: {case.tokenizer.decode(ids)!r}")
        assert check_output(program, ids, case.tokenizer) is None, check_output(program, ids, case.tokenizer)
        assert set(ids[ids.index(eos) :]) == {eos}


def _check(case, runtimes, data, samplings, programs_strategy=conformer_like()) -> None:
    segments = data.draw(st.lists(programs_strategy, min_size=1, max_size=MAX_ROWS - 1))
    programs = [compile_program(s, case.tokenizer) for s in segments]
    sampling = data.draw(st.sampled_from(samplings))
    _generate_and_check(case, runtimes[case.name], programs, sampling, data.draw(st.integers(0, 2**31)))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_qwen_outputs_are_always_valid(qwen_case, runtimes, data):
    _check(qwen_case, runtimes, data, SAMPLINGS)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_llama_style_outputs_are_always_valid(llama_case, runtimes, data):
    _check(llama_case, runtimes, data, SAMPLINGS + [TOP_P_ONLY])


@pytest.mark.parametrize("tokenizer_case", ["qwen_case", "llama_case"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_free_form_programs_compile_soundly_or_are_refused(request, tokenizer_case, runtimes, data):
    case = request.getfixturevalue(tokenizer_case)
    segments = data.draw(free_form())
    try:
        program = compile_program(segments, case.tokenizer)
    except UnsupportedError as refusal:
        note(f"refused: {refusal}")
        return
    _generate_and_check(case, runtimes[case.name], [program], data.draw(st.sampled_from(SAMPLINGS)), 0)
