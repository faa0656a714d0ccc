"""The fused hole mask for CUDA: one Triton kernel writes -inf into the logits of rows in a hole wherever the
row's automaton state forbids the token. Owns the kernel and its launch; runtime.py decides which rows are in
a hole and which exit token is open, and keeps the pure-torch mask (CPU, and the reference in tests).

Why a kernel: the torch mask gathers a bool row per state ([B, V] written and read again) and then rewrites
every logit: about 3 passes over [B, V]. The kernel reads no logits at all: per block of 1024 token ids it
loads their classes ([V] int32, shared by all rows, L2-resident), looks the classes up in the row state's
tiny allowed-by-class row, and stores -inf where forbidden - one write pass, skipped entirely for rows that
are not in a hole (copy rows, unconstrained rows).
"""

from __future__ import annotations

from functools import lru_cache

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the torch mask serves when Triton is missing
    triton = None

BLOCK = 1024  # token ids per program


def triton_available() -> bool:
    return triton is not None


if triton is not None:

    @triton.jit
    def _hole_mask_kernel(
        logits_ptr,  # [B, V] float, row stride `row_stride`, column stride 1
        row_stride,
        vocab,
        row_state_ptr,  # [B] int64: the automaton state of a row in a hole, -1 for any other row
        exit_token_ptr,  # [B] int64: the exit token open in this step, -1 when none
        token_class_ptr,  # [V] int32
        allowed_ptr,  # [S, C] int8: 1 where the class has a live move from the state
        num_classes,
        BLOCK_SIZE: tl.constexpr,
    ):
        row = tl.program_id(0)
        state = tl.load(row_state_ptr + row)
        if state >= 0:
            ids = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
            in_vocab = ids < vocab
            cls = tl.load(token_class_ptr + ids, mask=in_vocab, other=0)
            allowed = tl.load(allowed_ptr + state * num_classes + cls, mask=in_vocab, other=0) != 0
            allowed = allowed | (ids == tl.load(exit_token_ptr + row))
            row_start = logits_ptr + row.to(tl.int64) * row_stride  # B x V may exceed 2**31
            tl.store(row_start + ids, float("-inf"), mask=in_vocab & ~allowed)


@lru_cache(maxsize=1)
def _interpreted():
    """The same kernel run by Triton's interpreter, for CPU tensors (tests)."""
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(_hole_mask_kernel.fn)


def apply_hole_mask(
    logits: torch.Tensor,  # [B, V] float, modified in place
    row_state: torch.Tensor,  # [B] int64, -1 = leave the row alone
    exit_token: torch.Tensor,  # [B] int64, -1 = no exit open
    token_class: torch.Tensor,  # [V] int32
    allowed_by_class: torch.Tensor,  # [S, C] int8
) -> torch.Tensor:
    assert logits.stride(1) == 1, "the mask kernel needs unit stride along the vocabulary"
    batch, vocab = logits.shape
    kernel = _interpreted() if logits.device.type == "cpu" else _hole_mask_kernel
    grid = (batch, triton.cdiv(vocab, BLOCK))
    kernel[grid](
        logits, logits.stride(0), vocab, row_state, exit_token, token_class, allowed_by_class,
        allowed_by_class.shape[1], BLOCK_SIZE=BLOCK,
    )  # fmt: skip
    return logits
