"""The Triton kernels of the constrained step (run by Triton's interpreter on CPU) against the torch path."""

from __future__ import annotations

import random

import pytest
import torch

from inferlab.constraints.program import compile_program
from inferlab.engine.constraints.runtime import ConstraintRuntime
from inferlab.constraints.simulate import (
    AdversarialLogits,
    ReferenceSampling,
    reference_decode,
    synthetic_conformer_segments,
)
from inferlab.engine.constraints.step_kernels import triton_available
from inferlab.errors import ConfigError

pytestmark = pytest.mark.skipif(not triton_available(), reason="triton is not installed")


def _pair(case, programs, rows):
    pair = []
    for impl in ("torch", "triton"):
        runtime = ConstraintRuntime(case.grammar_set, rows, 256, case.model_vocab, "cpu", mask_impl=impl)
        for row in range(rows):
            runtime.assign(row, programs[row] if row < len(programs) else None)
        pair.append(runtime)
    return pair


def _programs(case, count, seed):
    rng = random.Random(seed)
    grammars = ["coord3-fixed4", "coord3-stripped"]
    return [
        compile_program(synthetic_conformer_segments(rng.randint(1, 2), rng.choice(grammars), rng), case.tokenizer)
        for _ in range(count)
    ]


@pytest.mark.slow
def test_same_masks_step_by_step(case):
    """Copy rows, hole rows (opening and accepting states) and a free row, over whole programs (the
    interpreter is slow at V = 151936: there every eighth step is compared): the masked logits, and the
    flags of the rows whose token is forced (the sampler skips their draw)."""
    programs = _programs(case, 3, seed=1)
    by_torch, by_triton = _pair(case, programs, 4)
    generator = torch.Generator().manual_seed(0)
    every = 1 if case.model_vocab < 10_000 else 8
    for step in range(max(p.max_new_tokens for p in programs)):
        logits = torch.randn(4, case.model_vocab, generator=generator)
        masked = by_torch.mask_logits(logits.clone())
        if step % every == 0:
            assert torch.equal(by_triton.mask_logits(logits.clone()), masked), step
            assert torch.equal(by_triton.forced_rows(4).bool(), by_torch.forced_rows(4)), step
        tokens = by_torch.choose(masked.argmax(dim=-1))
        by_torch.advance(tokens)
        by_triton.advance(tokens)


def test_row_stride_of_a_wider_buffer_is_respected(llama_case):
    programs = _programs(llama_case, 2, seed=2)
    by_torch, by_triton = _pair(llama_case, programs, 2)
    for runtime in (by_torch, by_triton):
        for _ in range(3):  # into the first hole
            runtime.advance(runtime.choose(torch.zeros(2, dtype=torch.int64)))
    wide = torch.randn(2, llama_case.model_vocab + 64)
    expected = by_torch.mask_logits(wide[:, : llama_case.model_vocab].clone())
    result = wide.clone()
    by_triton.mask_logits(result[:, : llama_case.model_vocab])
    assert torch.equal(result[:, : llama_case.model_vocab], expected)
    assert torch.equal(result[:, llama_case.model_vocab :], wide[:, llama_case.model_vocab :])  # untouched


def test_same_generations_under_sampling(llama_case):
    programs = _programs(llama_case, 3, seed=3)
    outputs = []
    for runtime in _pair(llama_case, programs, 4):
        generator = torch.Generator().manual_seed(5)
        varied = {t for info in llama_case.grammar_set.grammars.values() for t in info.candidate_tokens}
        logits = AdversarialLogits(4, llama_case.model_vocab, varied, [0, 1, 2], generator, "cpu")
        steps = max(p.max_new_tokens for p in programs)
        outputs.append(reference_decode(runtime, steps, logits, ReferenceSampling(1.0, top_k=20), generator))
    assert torch.equal(outputs[0], outputs[1])


def test_mask_impl_is_validated(llama_case):
    with pytest.raises(ConfigError, match="choose one of auto, torch, triton"):
        ConstraintRuntime(llama_case.grammar_set, 1, 4, 2048, "cpu", mask_impl="cuda")
    assert ConstraintRuntime(llama_case.grammar_set, 1, 4, 2048, "cpu").mask_impl == "torch"


def _state(runtime):
    return runtime.ptr.clone(), runtime.state.clone()


def test_emit_kernel_equals_choose_then_advance(case):
    """The fused emit kernel (forced tokens + the advance of live rows) against the torch path, step by
    step over whole programs: copy and hole rows, a free row, rows that finished (their state must stay)."""
    programs = _programs(case, 3, seed=4)
    by_torch, by_triton = _pair(case, programs, 4)
    generator = torch.Generator().manual_seed(1)
    active = torch.tensor([True, True, True, False])
    for step in range(max(p.max_new_tokens for p in programs)):
        masked = by_torch.mask_logits(torch.randn(4, case.model_vocab, generator=generator))
        sampled = torch.where(torch.isfinite(masked), masked, -1e30).argmax(dim=-1)
        finished = torch.rand(4, generator=generator) < 0.1
        expected = by_torch.emit(sampled, active, finished)
        assert torch.equal(by_triton.emit(sampled, active, finished), expected), step
        assert all(torch.equal(a, b) for a, b in zip(_state(by_triton), _state(by_torch))), step


def test_emit_and_mask_kernels_address_rows_by_id_in_prefill(llama_case):
    programs = _programs(llama_case, 3, seed=5)
    by_torch, by_triton = _pair(llama_case, programs, 4)
    # prefill: lane i is runtime row rows[i], and the ids are a column of the runner's staged block
    # (prompt tokens | length | row id), so not unit-stride: the GPU fault of device run 5
    staged = torch.tensor([[7, 7, 9, 2], [7, 0, 9, 0], [7, 7, 9, 3]])
    rows = staged[:, 3]
    assert rows.stride(0) != 1
    generator = torch.Generator().manual_seed(2)
    yes, no = torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool)
    for step in range(30):
        logits = torch.randn(3, llama_case.model_vocab, generator=generator)
        masked = by_torch.mask_logits(logits.clone(), rows)
        assert torch.equal(by_triton.mask_logits(logits.clone(), rows), masked), step
        sampled = torch.where(torch.isfinite(masked), masked, -1e30).argmax(dim=-1)
        assert torch.equal(by_triton.emit(sampled, yes, no, rows), by_torch.emit(sampled, yes, no, rows)), step
        assert all(torch.equal(a, b) for a, b in zip(_state(by_triton), _state(by_torch))), step
