"""Triton kernel: the per-row top-k / top-p / min-p threshold without sorting the vocabulary.

A sort of [rows, vocab] fp32 with int64 indices (what transformers and sampler.filter_threshold do) costs
milliseconds at 256 x 128k; a threshold only needs one order statistic per row. One program per row
finds them by radix selection over the order-preserving int32 key of each logit (sampler.float_key),
DIGIT_BITS bits per pass, streaming the row once per pass:
  pass 0       the row maximum (min-p, and the softmax shift of top-p);
  top-k        per digit, counts of the keys under the known prefix -> the k-th largest key;
  top-p        per digit, softmax masses exp((x - max) / T) of the top-k survivors under the known
               prefix -> the smallest key whose cumulative (ascending, ties included) mass exceeds
               (1 - top_p) x total, which is transformers' rule.
Logits produced in bfloat16 have 16 meaningful key bits (KEY_BITS=16: 4 passes of 4 bits per filter);
fp32 logits need KEY_BITS=32. Rows skip the filters they do not use. Same result as the sort-based
reference up to the order of fp32 summation (boundary cases within rounding).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _key32(x):
    bits = x.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _unsigned_key(x):
    """The key as int64 in [0, 2^32): unsigned order, so digits can be taken from the top."""
    return _key32(x).to(tl.int64) + 2147483648


@triton.jit
def _kth_largest_key(base, vocab, k, BLOCK: tl.constexpr, KEY_BITS: tl.constexpr, DIGIT_BITS: tl.constexpr):
    """Radix selection by counts: the key of the k-th largest logit (ties: all of them are >= it)."""
    offs = tl.arange(0, BLOCK)
    bins = tl.arange(0, 1 << DIGIT_BITS)
    prefix = tl.zeros([], tl.int64)  # the digits chosen so far
    above = tl.zeros([], tl.int64)  # keys above the prefix's range
    for level in tl.static_range(KEY_BITS // DIGIT_BITS):
        shift = 32 - DIGIT_BITS * (level + 1)
        counts = tl.zeros([1 << DIGIT_BITS], tl.int64)
        for start in range(0, vocab, BLOCK):
            valid = start + offs < vocab
            u = _unsigned_key(tl.load(base + start + offs, mask=valid, other=float("-inf")))
            hit = valid & ((u >> (shift + DIGIT_BITS)) == prefix)
            digit = (u >> shift) & ((1 << DIGIT_BITS) - 1)
            counts += tl.sum((hit[:, None] & (digit[:, None] == bins[None, :])).to(tl.int64), axis=0)
        at_or_above = above + tl.sum(counts, axis=0) - tl.cumsum(counts, axis=0) + counts  # [bins]
        d = tl.sum((at_or_above >= k).to(tl.int64), axis=0) - 1  # the digit holding the k-th largest
        above += tl.sum(tl.where(bins > d, counts, 0), axis=0)
        prefix = prefix * (1 << DIGIT_BITS) + d
    return ((prefix << (32 - KEY_BITS)) - 2147483648).to(tl.int32)


@triton.jit
def _top_p_key(
    base, vocab, top, temperature, p, tau_k, BLOCK: tl.constexpr, KEY_BITS: tl.constexpr, DIGIT_BITS: tl.constexpr
):
    """Radix selection by softmax mass over the keys >= tau_k: the smallest key whose cumulative
    ascending mass (ties included) exceeds (1 - p) x the total."""
    offs = tl.arange(0, BLOCK)
    bins = tl.arange(0, 1 << DIGIT_BITS)
    prefix = tl.zeros([], tl.int64)
    below = tl.zeros([], tl.float32)  # mass of the survivors below the prefix's range
    target = tl.zeros([], tl.float32)
    for level in tl.static_range(KEY_BITS // DIGIT_BITS):
        shift = 32 - DIGIT_BITS * (level + 1)
        mass = tl.zeros([1 << DIGIT_BITS], tl.float32)
        for start in range(0, vocab, BLOCK):
            valid = start + offs < vocab
            x = tl.load(base + start + offs, mask=valid, other=float("-inf"))
            key = _key32(x)
            u = key.to(tl.int64) + 2147483648
            hit = valid & (key >= tau_k) & ((u >> (shift + DIGIT_BITS)) == prefix)
            w = tl.where(hit, tl.exp((x - top) / temperature), 0.0)
            digit = (u >> shift) & ((1 << DIGIT_BITS) - 1)
            mass += tl.sum(tl.where(digit[:, None] == bins[None, :], w[:, None], 0.0), axis=0)
        if level == 0:
            target = (1.0 - p) * tl.sum(mass, axis=0)
        cumulative = below + tl.cumsum(mass, axis=0)
        d = tl.minimum(tl.sum((cumulative <= target).to(tl.int64), axis=0), (1 << DIGIT_BITS) - 1)
        below += tl.sum(tl.where(bins < d, mass, 0.0), axis=0)
        prefix = prefix * (1 << DIGIT_BITS) + d
    return ((prefix << (32 - KEY_BITS)) - 2147483648).to(tl.int32)


@triton.jit
def _filter_kernel(
    LOGITS,
    TEMP,
    TOP_K,
    TOP_P,
    MIN_P,
    TAU,
    stride,
    vocab,
    BLOCK: tl.constexpr,
    KEY_BITS: tl.constexpr,
    DIGIT_BITS: tl.constexpr,
    DO_TOP: tl.constexpr,
):
    row = tl.program_id(0)
    base = LOGITS + row * stride
    offs = tl.arange(0, BLOCK)
    top = tl.full([], float("-inf"), tl.float32)
    for start in range(0, vocab, BLOCK):
        x = tl.load(base + start + offs, mask=start + offs < vocab, other=float("-inf"))
        top = tl.maximum(top, tl.max(x, axis=0))
    temperature = tl.load(TEMP + row)
    min_p = tl.load(MIN_P + row)
    tau = tl.full([], -2147483648, tl.int32)  # keep all
    if min_p > 0:
        tau = _key32(top + temperature * tl.log(min_p))
    if DO_TOP:  # a batch without top-k/top-p compiles none of this
        k = tl.load(TOP_K + row)
        p = tl.load(TOP_P + row)
        tau_k = tl.full([], -2147483648, tl.int32)
        if (k > 0) & (k < vocab):
            tau_k = _kth_largest_key(base, vocab, k, BLOCK, KEY_BITS, DIGIT_BITS)
        tau = tl.maximum(tau, tau_k)
        if p < 1.0:
            tau = tl.maximum(tau, _top_p_key(base, vocab, top, temperature, p, tau_k, BLOCK, KEY_BITS, DIGIT_BITS))
    tl.store(TAU + row, tau)


def filter_threshold(
    logits: torch.Tensor,  # [rows, vocab] fp32
    temperature: torch.Tensor,  # [rows] fp32 > 0
    top_k: torch.Tensor,  # [rows] int64
    top_p: torch.Tensor,  # [rows] fp32
    min_p: torch.Tensor,  # [rows] fp32
    level: int,  # sampler.FILTER_*
    key_bits: int = 32,  # 16 when the logits are exactly bfloat16 values (a bf16 LM head)
    block: int = 1024,
    digit_bits: int = 4,
    num_warps: int = 4,
) -> torch.Tensor | None:  # [rows] int32 threshold keys (see sampler.filter_threshold)
    if level == 0:
        return None
    rows, vocab = logits.shape
    assert logits.stride(-1) == 1 and key_bits % digit_bits == 0
    tau = torch.empty(rows, dtype=torch.int32, device=logits.device)
    _filter_kernel[(rows,)](
        logits,
        temperature,
        top_k,
        top_p,
        min_p,
        tau,
        logits.stride(0),
        vocab,
        BLOCK=block,
        KEY_BITS=key_bits,
        DIGIT_BITS=digit_bits,
        DO_TOP=level >= 2,  # FILTER_SORT: top-k/top-p
        num_warps=num_warps,
    )
    return tau
