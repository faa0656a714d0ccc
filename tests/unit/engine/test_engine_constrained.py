"""Constrained generation through the Engine (CPU): conformer templates of real NCI molecules, compiled
against the engine's tokenizer, for the qwen3-chem tokenizer (tiny-qwen3) and the built-in Llama-3-style
one (tiny). Random weights, so only the constraint can make the outputs valid; each output is checked by
the template and decoded by RDKit independently of it, back to the input's molecular graph."""

from __future__ import annotations

import os
from functools import lru_cache

import pytest
from rdkit import RDConfig

from inferlab.constraints.program import compile_program
from inferlab.engine import Engine, EngineConfig
from inferlab.errors import InputError, UnsupportedError
from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
from inferlab.types import Request, SamplingParams
from inferlab.workloads.conformers.chemistry.decode import decode_generation
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.smiles import canonical_smiles
from inferlab.workloads.conformers.chemistry.template import build_template

PROFILE = get_profile("v3-fixed4")


@lru_cache(maxsize=4)
def small_nci_molecules(max_atoms: int, count: int) -> tuple[str, ...]:
    """The first `count` molecules of RDKit's NCI set with at most `max_atoms` heavy atoms that the text
    format represents (their zero-filled encoding decodes to the same graph)."""
    chosen = []
    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        for line in f:
            smiles = line.split()[0]
            try:
                template = build_template(smiles, PROFILE)
            except (InputError, UnsupportedError):
                continue
            filled = template.fill(["0.0000,0.0000,0.0000"] * template.num_atoms)
            if template.num_atoms <= max_atoms and decode_generation(filled, PROFILE).canonical_smiles == (
                canonical_smiles(smiles)
            ):
                chosen.append(smiles)
                if len(chosen) == count:
                    break
    return tuple(chosen)


pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def llama_engine(tiny_checkpoint):
    return Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=4, max_seq_len=512, decode_steps_per_sync=8))


def _conformer_request(engine, rid: str, smiles: str, **sampling) -> tuple[Request, object]:
    template = build_template(smiles, PROFILE)
    program = compile_program(template.segments, engine.tokenizer)
    request = Request(
        id=rid,
        prompt_ids=tuple(template.prompt_ids(engine.tokenizer)),
        constraint=program,
        sampling=SamplingParams(**sampling),
    )
    return request, template


def _assert_valid(engine, result, template, smiles: str) -> None:
    assert result.ok and result.finish_reason == "eos", (result.finish_reason, result.error)
    assert result.token_ids[-1] == engine.tokenizer.eos_token_id
    template.check(result.text, PROFILE)  # every descriptor and structure token is the template's
    decoded = decode_generation(result.text, PROFILE)  # RDKit, independently of the template
    assert decoded.canonical_smiles == canonical_smiles(smiles)
    assert decoded.mol.GetNumAtoms() == template.num_atoms


SAMPLINGS = [
    dict(temperature=0.0),
    dict(temperature=1.0, seed=5),
    dict(temperature=1.0, top_k=20, top_p=0.9, seed=6),
    dict(temperature=0.7, min_p=0.05, seed=7),
]


def test_conformers_of_real_molecules_with_a_llama3_style_tokenizer(llama_engine):
    molecules = small_nci_molecules(12, 8)
    cases = [
        _conformer_request(llama_engine, f"m{i}", smiles, **SAMPLINGS[i % len(SAMPLINGS)])
        for i, smiles in enumerate(molecules)
    ]
    results = llama_engine.generate([request for request, _ in cases])  # 8 requests through 4 slots
    for smiles, (_, template), result in zip(molecules, cases, results):
        _assert_valid(llama_engine, result, template, smiles)
    assert llama_engine.stats.constraint_setup_s > 0


@pytest.mark.slow
def test_conformers_with_the_qwen3_chem_tokenizer(tiny_checkpoint):
    engine = Engine(
        EngineConfig(model=tiny_checkpoint("tiny-qwen3"), max_slots=3, max_seq_len=256, decode_steps_per_sync=8)
    )
    molecules = small_nci_molecules(4, 3)  # a 150k vocabulary on CPU: keep the rows short
    cases = [_conformer_request(engine, f"q{i}", s, **SAMPLINGS[i]) for i, s in enumerate(molecules)]
    for smiles, (_, template), result in zip(molecules, cases, engine.generate([r for r, _ in cases])):
        _assert_valid(engine, result, template, smiles)


def test_unconstrained_rows_beside_constrained_ones_are_untouched(llama_engine):
    free = [
        Request(
            id=f"f{i}", prompt_ids=(7 + i, 3, 9), sampling=SamplingParams(temperature=1.0, max_new_tokens=30, seed=i)
        )
        for i in range(3)
    ]
    alone = [r.token_ids for r in llama_engine.generate(free)]
    molecules = small_nci_molecules(12, 3)
    constrained = [
        _conformer_request(llama_engine, f"c{i}", s, temperature=1.0, seed=40 + i) for i, s in enumerate(molecules)
    ]
    mixed = [constrained[0][0], free[0], constrained[1][0], free[1], free[2], constrained[2][0]]
    results = {r.id: r for r in llama_engine.generate(mixed)}
    assert [results[r.id].token_ids for r in free] == alone
    for smiles, (request, template) in zip(molecules, constrained):
        _assert_valid(llama_engine, results[request.id], template, smiles)


def test_a_constrained_request_gives_the_same_tokens_alone_and_in_a_crowd(llama_engine):
    molecules = small_nci_molecules(12, 6)
    target, _ = _conformer_request(llama_engine, "t", molecules[0], temperature=1.0, top_p=0.9, seed=77)
    alone = llama_engine.generate([target])[0].token_ids
    crowd = [_conformer_request(llama_engine, f"n{i}", s, temperature=1.0, seed=i)[0] for i, s in enumerate(molecules)]
    together = llama_engine.generate(crowd[:3] + [target] + crowd[3:])  # refills and compaction around it
    assert together[3].token_ids == alone


def test_compaction_moves_the_constraint_state_with_the_row(tiny_checkpoint):
    # rows in queue order (the large molecules' longer prompts would go first by length, and never move)
    engine = Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=4, max_seq_len=512, decode_steps_per_sync=2,
                                 prefill_by_length=False))
    small, large = small_nci_molecules(3, 2), small_nci_molecules(12, 12)[-2:]
    # rows 0, 1 finish early; rows 2, 3 are still inside their templates when they move down to rows 0, 1
    molecules = [small[0], small[1], large[0], large[1]]
    cases = [_conformer_request(engine, f"r{i}", s, temperature=1.0, seed=i) for i, s in enumerate(molecules)]
    results = engine.generate([r for r, _ in cases])
    assert engine.stats.row_moves > 0
    for smiles, (_, template), result in zip(molecules, cases, results):
        _assert_valid(engine, result, template, smiles)


def test_constraints_the_engine_cannot_run_become_error_results(llama_engine, qwen3_chem_dir):
    from transformers import AutoTokenizer

    smiles = small_nci_molecules(12, 8)[-1]
    template = build_template(smiles, PROFILE)
    ok, _ = _conformer_request(llama_engine, "ok", smiles, temperature=0.0)
    qwen_program = compile_program(template.segments, AutoTokenizer.from_pretrained(str(qwen3_chem_dir)))
    rebuilt_program = compile_program(template.segments, build_builtin_tokenizer())  # same texts: same key
    prompt = ok.prompt_ids
    requests = [
        Request(id="other-tokenizer", prompt_ids=prompt, constraint=qwen_program),
        Request(id="not-a-program", prompt_ids=prompt, constraint=template.segments),
        Request(id="stops", prompt_ids=prompt, constraint=ok.constraint, sampling=SamplingParams(stop_token_ids=(5,))),
        Request(id="too-long", prompt_ids=prompt * 9, constraint=ok.constraint),
        ok,
        Request(id="rebuilt", prompt_ids=prompt, constraint=rebuilt_program, sampling=SamplingParams(temperature=0.0)),
    ]
    by_id = {r.id: r for r in llama_engine.generate(requests)}
    assert "another tokenizer" in by_id["other-tokenizer"].error
    assert "must be a ConstraintProgram" in by_id["not-a-program"].error
    assert "stop_token_ids [5]" in by_id["stops"].error
    needed = 9 * len(prompt) + ok.constraint.max_new_tokens
    assert f"= {needed} exceeds max_seq_len=512" in by_id["too-long"].error
    assert f"max_seq_len >= {needed}" in by_id["too-long"].error
    _assert_valid(llama_engine, by_id["ok"], template, smiles)
    assert by_id["rebuilt"].token_ids == by_id["ok"].token_ids


def test_an_engine_without_a_tokenizer_constrains_with_the_grammar_set_it_is_given(tiny_checkpoint, llama_engine):
    """load_tokenizer=False (the conformer pipeline's engine: its process never imports transformers): the
    GrammarSet given as a Future constrains exactly as the engine's own; without one, constrained and text
    requests are refused naming the fix, and Result.text is None."""
    from concurrent.futures import Future

    from inferlab.constraints.token_automaton import grammar_set_for

    smiles = small_nci_molecules(12, 1)[0]
    request, _ = _conformer_request(llama_engine, "m", smiles, temperature=1.0, seed=3)
    given: Future = Future()
    given.set_result(grammar_set_for(llama_engine.tokenizer))
    config = EngineConfig(model=tiny_checkpoint("tiny"), max_slots=4, max_seq_len=512, decode_steps_per_sync=8,
                          load_tokenizer=False)
    with Engine(config, grammar_set=given) as bare:
        assert bare.tokenizer is None and bare.stats.tokenizer_s == 0.0
        assert bare.runner.features.constraints.runtime_job is not None  # started at start-up, not at the request
        [result] = bare.generate([request])
        assert result.ok and result.text is None
        assert result.token_ids == llama_engine.generate([request])[0].token_ids
        assert bare.stats.constraint_build_s > 0 and bare.runner.features.constraints.runtime_job is None
    with Engine(config) as no_grammar:
        constrained, text = no_grammar.generate([request, Request(id="t", prompt="hello")])
        assert "load_tokenizer=False without a grammar_set" in constrained.error
        assert "EngineConfig.load_tokenizer=False" in text.error
