"""The device runtime, step by step, against host-side expectations (CPU tensors)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from inferlab.constraints.program import compile_program
from inferlab.constraints.segments import Copy, EndOfSequence, Hole
from inferlab.engine.constraints.pressure import PressureBuffers
from inferlab.engine.constraints.runtime import ConstraintRuntime
from inferlab.errors import CapacityError, ConfigError, InputError

FIXED4 = Hole("coord3-fixed4")
STRIPPED = Hole("coord3-stripped")


def _finite(row: torch.Tensor) -> set[int]:
    return set(torch.isfinite(row).nonzero().flatten().tolist())


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False).input_ids


def _step(runtime, tokens: list[int]) -> torch.Tensor:
    """One decode step where the 'sampler' proposes `tokens`; returns the emitted tokens."""
    emitted = runtime.choose(torch.tensor(tokens))
    runtime.advance(emitted)
    return emitted


@pytest.fixture
def qwen_runtime(qwen_case):
    return ConstraintRuntime(qwen_case.grammar_set, max_rows=4, max_program_len=64, vocab_size=151936, device="cpu")


def test_a_conformer_row_beside_an_unconstrained_row(qwen_case, qwen_runtime):
    tok, gs, rt = qwen_case.tokenizer, qwen_case.grammar_set, qwen_runtime
    program = compile_program([Copy("[C]<"), FIXED4, Copy(">[O]<"), FIXED4, Copy(">"), EndOfSequence()], tok)
    rt.assign(0, program)
    rt.assign(1, None)
    copies = program.copy_token_ids()
    generator = torch.Generator().manual_seed(0)

    # Copy ops: logits untouched, the copy token forced whatever was sampled.
    for expected in copies[:2]:  # "[C" "]<"
        logits = torch.randn(2, 151936, generator=generator)
        assert torch.equal(rt.mask_logits(logits.clone()), logits)
        assert _step(rt, [7, 7]).tolist() == [expected, 7]

    # In the hole: exactly the tokens with a live move from the start state, never a padded id.
    start = gs.grammars["coord3-fixed4"].start_state
    masked = rt.mask_logits(torch.zeros(2, 151936))
    assert _finite(masked[0]) == set(gs.allowed_tokens(start))
    assert _finite(masked[0]) == set(_ids(tok, "-0123456789"))  # a value starts with '-' or a digit
    assert _finite(masked[1]) == set(range(151936))  # the unconstrained row

    # Write one block; the automaton tracks it token by token (',-' is one token).
    block = _ids(tok, "1.2345,-0.0310,0.9400")
    for t in block:
        assert t in _finite(rt.mask_logits(torch.zeros(2, 151936))[0])
        assert _step(rt, [t, 3]).tolist() == [t, 3]
    # Accepting and complete: only the exit token `>[` remains; emitting it consumes the copy op.
    exit_token = copies[2]
    assert tok.decode([exit_token]) == ">["
    assert _finite(rt.mask_logits(torch.zeros(2, 151936))[0]) == {exit_token}
    _step(rt, [exit_token, 3])
    assert rt.ptr[0].item() == 4 and rt.state[0].item() == 0  # at "O", the next copy
    for expected in copies[3:5]:  # "O" "]<"
        assert _step(rt, [0, 0]).tolist()[0] == expected
    assert rt.state[0].item() == start  # entered the second hole
    for t in _ids(tok, "-1.0000,2.0000,-3.0000"):
        _step(rt, [t, 0])
    eos = tok.eos_token_id
    _step(rt, [copies[5], 0])  # the exit `>`: now at the EOS op
    for _ in range(3):  # EOS is forced, and the last op is sticky
        assert _step(rt, [5, 5]).tolist() == [eos, 5]
        assert rt.ptr[0].item() == program.length - 1
    assert rt.ptr[1].item() == 0 and rt.state[1].item() == 0  # the free row never moved


def test_accepting_states_that_can_continue_offer_the_exit_too(qwen_case, qwen_runtime):
    tok, rt = qwen_case.tokenizer, qwen_runtime
    program = compile_program([Copy("[C]<"), STRIPPED, Copy(">"), EndOfSequence()], tok)
    rt.assign(2, program)
    for t in program.copy_token_ids()[:2] + _ids(tok, "0,0,1"):
        _step(rt, [0, 0, t])
    allowed = _finite(rt.mask_logits(torch.zeros(3, 151936))[2])
    assert allowed == set(_ids(tok, "0123456789.>"))  # "1" may go on ("12", "1.5") or stop
    _step(rt, [0, 0, _ids(tok, ">")[0]])
    assert rt.choose(torch.tensor([0, 0, 0]))[2].item() == tok.eos_token_id


def test_a_single_token_copy_between_holes_enters_the_next_hole(llama_case):
    tok, gs = llama_case.tokenizer, llama_case.grammar_set
    program = compile_program([FIXED4, Copy(">"), STRIPPED, Copy(">"), EndOfSequence()], tok)
    rt = ConstraintRuntime(gs, 1, 8, 2048, "cpu")
    rt.assign(0, program)
    assert rt.state[0].item() == gs.grammars["coord3-fixed4"].start_state
    for t in _ids(tok, "0.0000,0.0000,0.0000>"):
        _step(rt, [t])
    assert rt.ptr[0].item() == 2 and rt.state[0].item() == gs.grammars["coord3-stripped"].start_state
    masked = rt.mask_logits(torch.zeros(1, 2048))
    assert max(_finite(masked[0])) < len(tok)  # padded ids 1379..2047 are never allowed


def test_only_the_first_b_rows_are_touched(qwen_case, qwen_runtime):
    program = compile_program([Copy("[C]<"), FIXED4, Copy(">"), EndOfSequence()], qwen_case.tokenizer)
    for row in range(4):
        qwen_runtime.assign(row, program)
    _step(qwen_runtime, [0, 0])
    assert qwen_runtime.ptr.tolist() == [1, 1, 0, 0]


def test_reassigning_a_row_replaces_its_program(qwen_case, qwen_runtime):
    tok = qwen_case.tokenizer
    long = compile_program([Copy("[C]<"), FIXED4, Copy(">[C]<"), FIXED4, Copy(">"), EndOfSequence()], tok)
    short = compile_program([Copy("[N]"), EndOfSequence()], tok)
    qwen_runtime.assign(0, long)
    for _ in range(5):
        _step(qwen_runtime, [11])
    qwen_runtime.assign(0, short)
    emitted = [_step(qwen_runtime, [11]).item() for _ in range(short.length + 2)]
    assert emitted == short.copy_token_ids() + [tok.eos_token_id] * 2


def test_refusals(qwen_case, llama_case, qwen_runtime):
    program = compile_program([Copy("[C]<"), FIXED4, Copy(">"), EndOfSequence()], qwen_case.tokenizer)
    small = ConstraintRuntime(qwen_case.grammar_set, 1, 3, 151936, "cpu")
    with pytest.raises(CapacityError, match="raise max_program_len to >= 5"):
        small.assign(0, program)
    other = compile_program([Copy("[C]<"), FIXED4, Copy(">"), EndOfSequence()], llama_case.tokenizer)
    with pytest.raises(InputError, match="another tokenizer"):
        qwen_runtime.assign(0, other)
    with pytest.raises(InputError, match="outside 0..3"):
        qwen_runtime.assign(4, program)
    with pytest.raises(ConfigError, match="model's \\(padded\\) vocabulary"):
        ConstraintRuntime(qwen_case.grammar_set, 1, 3, 151000, "cpu")


class _ForbidHostSync(TorchDispatchMode):
    """Fails on every op that reads a tensor value on the host or makes a shape depend on data: what a
    CUDA graph cannot capture (and what costs a device->host sync per step)."""

    FORBIDDEN = {"aten::_local_scalar_dense", "aten::is_nonzero", "aten::nonzero", "aten::masked_select",
                 "aten::unique", "aten::_unique2", "aten::equal"}  # fmt: skip

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name in self.FORBIDDEN:
            raise AssertionError(f"host sync / data-dependent op {name}")
        if name == "aten::index" and any(getattr(i, "dtype", None) == torch.bool for i in args[1]):
            raise AssertionError("boolean-mask indexing (data-dependent shape)")
        return func(*args, **(kwargs or {}))


def test_the_guard_catches_what_graphs_cannot_capture():
    x = torch.arange(4)
    for bad in (lambda: x[x > 1], lambda: bool(x.sum() > 0), lambda: x.sum().item(), lambda: x.nonzero()):
        with pytest.raises(AssertionError, match="data-dependent"), _ForbidHostSync():
            bad()


def test_in_graph_functions_never_sync_or_depend_on_data_shapes(qwen_case, qwen_runtime):
    program = compile_program([Copy("[C]<"), FIXED4, Copy(">"), EndOfSequence()], qwen_case.tokenizer)
    qwen_runtime.assign(0, program)
    qwen_runtime.assign(1, None)
    logits = torch.randn(3, 151936)
    pressure = PressureBuffers.allocate(4, torch.device("cpu"))
    live, finished = torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool)
    with _ForbidHostSync():
        for _ in range(8):  # through copies into the hole
            masked = qwen_runtime.mask_logits(logits.clone())
            tokens = qwen_runtime.choose(masked.argmax(dim=-1))
            qwen_runtime.advance(tokens)
        for step in range(4):  # the constraint pressure measured and accumulated (decode, then prefill lanes)
            lanes = torch.tensor([1, 0]) if step % 2 else None
            rows = logits[:2].clone() if step % 2 else logits.clone()
            masked = qwen_runtime.mask_logits(rows, lanes, pressure)
            qwen_runtime.emit(masked.argmax(dim=-1), live[: len(rows)], finished[: len(rows)], lanes, pressure)
        pressure.reset(torch.tensor([0, 2]))
        pressure.move(torch.tensor([0]), torch.tensor([3]))
        pressure.snapshot_columns(3)
