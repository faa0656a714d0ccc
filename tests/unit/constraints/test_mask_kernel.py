"""The Triton hole mask (run by Triton's interpreter on CPU) against the torch mask, its reference."""

from __future__ import annotations

import random

import pytest
import torch

from inferlab.engine.constraints.mask_kernel import triton_available
from inferlab.engine.constraints.program import compile_program
from inferlab.engine.constraints.runtime import ConstraintRuntime
from inferlab.engine.constraints.simulate import (
    AdversarialLogits,
    ReferenceSampling,
    reference_decode,
    synthetic_conformer_segments,
)
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


def test_same_masks_step_by_step(case):
    """Copy rows, hole rows (opening and accepting states) and a free row, over whole programs (the
    interpreter is slow at V = 151936: there every eighth step is compared)."""
    programs = _programs(case, 3, seed=1)
    by_torch, by_triton = _pair(case, programs, 4)
    generator = torch.Generator().manual_seed(0)
    every = 1 if case.model_vocab < 10_000 else 8
    for step in range(max(p.max_new_tokens for p in programs)):
        logits = torch.randn(4, case.model_vocab, generator=generator)
        masked = by_torch.mask_logits(logits.clone())
        if step % every == 0:
            assert torch.equal(by_triton.mask_logits(logits.clone()), masked)
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
