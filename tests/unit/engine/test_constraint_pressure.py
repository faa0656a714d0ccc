"""Constraint pressure on the torch path (engine/constraints/pressure.py, batch/pressure_rows.py): the
runtime's per-step values and per-row accumulators against the float64 reference (pressure_reference.py)
at hole and copy steps, in decode and prefill; then through the Engine: each constrained Result's
pressure equals the reference replayed on transformers' logits of the same tokens, unconstrained Results
carry none, the tokens are the same with it off, and an engine without constrained requests pays nothing
for it. The Triton kernels' are in triton_interpreter_cases.py."""

from __future__ import annotations

import pytest
import torch
from pressure_reference import ReferenceRow, conformer_like_programs, pressing_logits, reference_pressure

from inferlab.constraints.token_automaton import grammar_set_for
from inferlab.engine.constraints.pressure import PressureBuffers, pressure_from_columns
from inferlab.engine.constraints.runtime import ConstraintRuntime
from inferlab.models.builtin_tokenizer import build_builtin_tokenizer

pytestmark = pytest.mark.usefixtures("one_cpu_thread")
VOCAB = 1536  # the built-in tokenizer's 1379 ids, padded as a model's embedding is


@pytest.fixture(scope="module")
def tokenizer():
    return build_builtin_tokenizer()


def _runtime(tokenizer, programs, rows: int, vocab: int = VOCAB) -> ConstraintRuntime:
    runtime = ConstraintRuntime(grammar_set_for(tokenizer), rows, 256, vocab, "cpu", mask_impl="torch")
    runtime.assign_rows(list(range(rows)), list(programs) + [None] * (rows - len(programs)))
    return runtime


def _assert_matches(got: PressureBuffers, row: int, reference: ReferenceRow) -> None:
    pressure = pressure_from_columns(got.snapshot_columns(row + 1)[row].tolist())
    assert pressure.steps == len(reference.values)
    assert pressure.mean == pytest.approx(reference.mean, abs=2e-6)
    assert pressure.max == pytest.approx(reference.max, abs=2e-6)
    assert reference.values[pressure.max_step] >= reference.max - 2e-6  # a step at the maximum (fp32 ties), its op
    assert pressure.max_op == reference.ops[pressure.max_step]


def test_torch_mask_measures_the_float64_pressure_at_hole_and_copy_steps(tokenizer):
    """Three conformer-like programs and an unconstrained row, step by step to their ends (rows finish at
    different steps and stop accumulating): pressure.now equals the float64 reference at every step of a
    constrained row, the mask is the one without pressure, and the rows' accumulators give the reference's
    mean, max and where."""
    programs = conformer_like_programs(tokenizer, 3, atoms=2)
    runtime, plain = _runtime(tokenizer, programs, 4), _runtime(tokenizer, programs, 4)
    buffers = PressureBuffers.allocate(4, torch.device("cpu"))
    buffers.reset(torch.arange(4))
    g = torch.Generator().manual_seed(1)
    finished = torch.zeros(4, dtype=torch.bool)
    reference = [ReferenceRow() for _ in range(3)]
    kinds = set()
    while not bool(finished[:3].all()):
        logits = pressing_logits(4, VOCAB, runtime, g)
        expected = reference_pressure(logits, runtime)
        masked = runtime.mask_logits(logits.clone(), None, buffers)
        assert torch.equal(masked, plain.mask_logits(logits.clone()))
        sampled = masked.argmax(dim=1)
        for row in range(3):
            if not finished[row]:
                assert float(buffers.now[row]) == pytest.approx(expected[row], abs=2e-6)
                reference[row].add(expected[row], int(runtime.ptr[row]))
                kinds.add(int(runtime.op_kind[row, runtime.ptr[row]]))
        tokens = runtime.emit(sampled, torch.ones(4, dtype=torch.bool), finished, None, buffers)
        plain.emit(sampled, torch.ones(4, dtype=torch.bool), finished)
        finished = finished | (runtime.ptr == runtime.last_op) & (tokens == programs[0].eos_token_id)
    assert kinds == {1, 2}  # copy and hole steps
    assert min(min(r.values) for r in reference) < 0.01 and max(max(r.values) for r in reference) > 0.99
    for row in range(3):
        _assert_matches(buffers, row, reference[row])
    assert pressure_from_columns(buffers.snapshot_columns(4)[3].tolist()) is None  # unconstrained: never measured


def test_prefill_lanes_measure_and_accumulate_into_their_rows(tokenizer):
    """Prefill: lanes map to admitted rows (lane 0 -> row 2, lane 1 -> row 0); row 1 stays untouched."""
    programs = conformer_like_programs(tokenizer, 3, atoms=1, seed=3)
    runtime = _runtime(tokenizer, programs, 3)
    buffers = PressureBuffers.allocate(3, torch.device("cpu"))
    buffers.reset(torch.arange(3))
    lanes = torch.tensor([2, 0])
    logits = pressing_logits(3, VOCAB, runtime, torch.Generator().manual_seed(2))[[2, 0]]
    expected = reference_pressure(logits, runtime, [2, 0])
    runtime.mask_logits(logits, lanes, buffers)
    assert buffers.now[:2].tolist() == pytest.approx(expected, abs=2e-6)
    runtime.emit(logits.argmax(dim=1), torch.ones(2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool), lanes,
                 buffers)
    got = [pressure_from_columns(values) for values in buffers.snapshot_columns(3).tolist()]
    assert got[1] is None
    assert (got[2].mean, got[0].mean) == pytest.approx(expected, abs=2e-6)
    assert got[2].max_step == got[0].max_step == 0 and got[2].steps == 1


def _engine(path, **knobs):
    from inferlab.engine import Engine, EngineConfig

    return Engine(EngineConfig(model=path, max_slots=3, max_seq_len=512, decode_steps_per_sync=8, **knobs))


def _replayed_pressure(model, tokenizer, result, program, prompt: tuple[int, ...]) -> ReferenceRow:
    """The reference of one finished request: transformers' logits at each of its tokens (teacher-forced),
    the program stepped through its tokens by a one-row torch runtime."""
    ids = torch.tensor([list(prompt) + result.token_ids[:-1]])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 :].float()  # [tokens, V]
    runtime = _runtime(tokenizer, [program], 1, logits.shape[1])
    row = ReferenceRow()
    for step, token in enumerate(result.token_ids):
        row.add(reference_pressure(logits[step : step + 1], runtime)[0], int(runtime.ptr[0]))
        runtime.advance(torch.tensor([token]))
    return row


@pytest.mark.slow  # ~10 s: three engines and transformers' forward
def test_engine_results_carry_the_pressure_of_their_own_tokens(tiny_checkpoint):
    """Conformer requests (more than rows: refills and compaction) beside an unconstrained one, with the
    plain race, greedy, top-p and top-k: each constrained Result's pressure is the float64 reference over
    transformers' logits of its tokens; the unconstrained one has none; with constraint_pressure=False the
    tokens are the same and no Result has one."""
    from transformers import AutoModelForCausalLM

    from inferlab.constraints.program import compile_program
    from inferlab.types import Request, SamplingParams
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.template import build_template

    path = tiny_checkpoint("tiny")
    samplings = [dict(temperature=1.0), dict(temperature=0.0), dict(top_p=0.9), dict(top_k=20, temperature=0.8)]
    runs, programs = {}, {}
    for on in (True, False):
        with _engine(path, constraint_pressure=on) as engine:
            requests = []
            for i, smiles in enumerate(["CCO", "C=O", "CN", "OCC#N"]):
                template = build_template(smiles, get_profile("v3-fixed4"))
                programs[f"c{i}"] = compile_program(template.segments, engine.tokenizer)
                requests.append(Request(id=f"c{i}", prompt_ids=tuple(template.prompt_ids(engine.tokenizer)),
                                        constraint=programs[f"c{i}"], sampling=SamplingParams(seed=i, **samplings[i])))
            requests.insert(1, Request(id="free", prompt_ids=(5, 6, 7), sampling=SamplingParams(max_new_tokens=6)))
            runs[on] = {r.id: r for r in engine.generate(requests)}
            tokenizer, prompts = engine.tokenizer, {r.id: r.prompt_ids for r in requests}
    assert {k: r.token_ids for k, r in runs[True].items()} == {k: r.token_ids for k, r in runs[False].items()}
    assert all(r.constraint_pressure is None for r in runs[False].values())
    assert runs[True]["free"].constraint_pressure is None
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()  # the checkpoint's fp32
    for rid, program in programs.items():
        result = runs[True][rid]
        got, reference = result.constraint_pressure, _replayed_pressure(model, tokenizer, result, program, prompts[rid])
        assert got.steps == len(result.token_ids) == len(reference.values), rid
        assert got.mean == pytest.approx(reference.mean, abs=1e-4), rid
        assert got.max == pytest.approx(reference.max, abs=1e-4), rid
        assert reference.values[got.max_step] >= reference.max - 1e-4, rid
        assert got.max_op == reference.ops[got.max_step], rid
        assert 0 <= program.segment_at(got.max_op) < len(program.segments)


def test_an_engine_without_constrained_requests_pays_nothing_for_pressure(tiny_checkpoint):
    """No accumulators, no snapshot columns, the plain hooks; the first constrained request allocates them."""
    from inferlab.engine.batch.features import Variant
    from inferlab.engine.hooks import NO_CONSTRAINTS
    from inferlab.types import Request, SamplingParams

    with _engine(tiny_checkpoint("tiny")) as engine:
        engine.generate([Request(id="a", prompt_ids=(5, 6), sampling=SamplingParams(max_new_tokens=3))])
        features = engine.runner.features
        assert features.pressure.buffers is None and features.snapshot_tail(3).columns == []
        assert features.logits_hooks(Variant(0)) is NO_CONSTRAINTS


def test_pressure_tells_the_program_a_model_writes_from_one_it_does_not(tiny_checkpoint, tmp_path):
    """A model that writes `[CONFORMER]Cl(O)N[/CONFORMER]` by itself (a bigram checkpoint,
    logit_controlled_checkpoints.py): the program of that text costs it nothing; the program of the same text
    with `[OH]`'s H forced (a wrong descriptor style, in miniature) peaks at ~1 at exactly the forced H."""
    from logit_controlled_checkpoints import bigram

    from inferlab.constraints.program import compile_program
    from inferlab.constraints.segments import Copy, EndOfSequence
    from inferlab.types import Request, SamplingParams

    tokenizer = build_builtin_tokenizer()
    text, prompt = "[CONFORMER]Cl(O)N[/CONFORMER]", tokenizer.bos_token_id
    chain = [prompt] + tokenizer(text, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    assert len(set(chain)) == len(chain)  # a bigram can write it
    path = bigram(tiny_checkpoint("tiny"), tmp_path / "bigram", dict(zip(chain, chain[1:])))
    with _engine(path) as engine:
        right, wrong = (compile_program([Copy(t), EndOfSequence()], engine.tokenizer)
                        for t in (text, text.replace("(O)", "(OH)")))  # fmt: skip
        got = {r.id: r for r in engine.generate([
            Request(id=name, prompt_ids=(prompt,), constraint=program, sampling=SamplingParams(seed=1))
            for name, program in (("right", right), ("wrong", wrong))])}  # fmt: skip
    assert got["right"].constraint_pressure.max < 1e-4
    forced_h = got["wrong"].token_ids.index(tokenizer.convert_tokens_to_ids("H"))
    peak = got["wrong"].constraint_pressure
    assert peak.max > 0.999 and peak.max_step == peak.max_op == forced_h  # copy ops: one token each
    assert wrong.segment_at(peak.max_op) == 0 and peak.mean > 10 * got["right"].constraint_pressure.mean
