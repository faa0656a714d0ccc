"""Triton kernels: the per-row top-k / top-p / min-p threshold, parallel over the vocabulary, no sort.

A threshold is one order statistic per row, found by radix selection over the order-preserving key of
each logit (sampler.float_key; unsigned here: u = key ^ 0x80000000), DIGIT_BITS = 4 bits per pass, with
the vocabulary split into `chunks` slices per row so that rows x chunks programs fill the GPU (one program
per row took 850 us at 16 x 128k: no parallelism). Every launch is a fixed grid (rows, chunks), so the
chain is CUDA-graph capturable:
  max pass      each program: its slice's maximum -> PMAX [rows, chunks] (min-p, and the softmax shift);
  count passes  top-k (FILTER_TOP_K only): for keys under the prefix chosen so far, a 16-bin histogram
                of counts per slice -> HIST [pass, rows, chunks, 16];
  mass passes   top-p: the same with softmax masses exp((x - max) / T) of the top-k survivors;
  finish        one program per row: the last digits and the combined threshold.
Each pass first derives the previous pass's digit from that pass's per-slice histograms, summed over the
slices in a fixed order (deterministic: no atomics), and the state it started from (prefix, and the count
above / mass below the prefix's range); slice 0 writes the state of its own pass for the next one. The
count rule picks the digit holding the k-th largest key; the mass rule the digit where the ascending
cumulative mass first exceeds (1 - p) x the total, which is transformers' top-p rule with all ties at the
threshold kept. bf16 logits have 16 meaningful key bits (4 passes per filter), others 32 (8 passes). The
threshold never exceeds the row maximum, so at least one token survives. Same thresholds as the sorted
reference (sampler.filter_threshold) up to the order of fp32 summation (boundary cases within rounding).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.engine.kernels import device_props

DIGIT_BITS = 4  # the kernels spell it as 4, 16 bins and `& 15`
BINS = 1 << DIGIT_BITS
MAX_CHUNKS = 64  # slices per row at most (a power of two: the kernels' arange over slices)


@triton.jit
def _ukey(x):
    """fp32 -> uint32 with the same order (sampler.float_key with the sign bit flipped)."""
    bits = x.to(tl.int32, bitcast=True)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return key.to(tl.uint32, bitcast=True) ^ 0x80000000


@triton.jit
def _signed_key(ukey):
    return (ukey ^ 0x80000000).to(tl.int32, bitcast=True)


@triton.jit
def _slice_bins(HIST, row, chunks, MAX_CHUNKS: tl.constexpr):
    """A pass's histogram of one row: its per-slice bins summed over the slices in a fixed order -> [16]."""
    c = tl.arange(0, MAX_CHUNKS)
    b = tl.arange(0, 16)
    h = tl.load(HIST + (row * chunks + c[:, None]) * 16 + b[None, :], mask=c[:, None] < chunks, other=0.0)
    return tl.sum(h, axis=0)


@triton.jit
def _count_digit(bins, above, k):
    """The digit holding the k-th largest key, and the count above it (bins: counts under the prefix)."""
    b = tl.arange(0, 16)
    at_or_above = above + tl.sum(bins, axis=0) - tl.cumsum(bins, axis=0) + bins  # non-increasing in b
    d = tl.maximum(tl.sum((at_or_above >= k.to(tl.float32)).to(tl.int32), axis=0) - 1, 0)
    return d, above + tl.sum(tl.where(b > d, bins, 0.0), axis=0)


@triton.jit
def _mass_digit(bins, below, target):
    """The digit where the ascending cumulative mass first exceeds target (else the highest non-empty one),
    and the mass below it."""
    b = tl.arange(0, 16)
    cumulative = below + tl.cumsum(bins, axis=0)
    d = tl.sum((cumulative <= target).to(tl.int32), axis=0)
    d = tl.minimum(d, tl.max(tl.where(bins > 0, b, 0), axis=0))
    return d, below + tl.sum(tl.where(b < d, bins, 0.0), axis=0)


@triton.jit
def _next_state(HIST, PREFIX, ACC, row, rows, chunks, level, k, target, MASS: tl.constexpr,
                MAX_CHUNKS: tl.constexpr):  # fmt: skip
    """(prefix, acc) after the digit of pass `level` (state and histogram of that pass, in memory); k serves
    the count rule, target = (1 - p) x total mass the mass rule."""
    bins = _slice_bins(HIST + level * rows * chunks * 16, row, chunks, MAX_CHUNKS)
    prefix = tl.load(PREFIX + level * rows + row).to(tl.uint32, bitcast=True)
    acc = tl.load(ACC + level * rows + row)
    if MASS:
        d, acc = _mass_digit(bins, acc, target)
    else:
        d, acc = _count_digit(bins, acc, k)
    return (prefix << 4) | d.to(tl.uint32), acc


@triton.jit
def _top_k_ukey(HIST_K, PREFIX_K, ACC_K, row, rows, chunks, k, KEY_BITS: tl.constexpr, MAX_CHUNKS: tl.constexpr):
    """The unsigned key of the k-th largest logit, from the last count pass."""
    prefix, _ = _next_state(HIST_K, PREFIX_K, ACC_K, row, rows, chunks, KEY_BITS // 4 - 1, k, 0.0, False, MAX_CHUNKS)
    if KEY_BITS < 32:
        prefix = prefix << (32 - KEY_BITS)
    return prefix


@triton.jit(do_not_specialize=["span", "chunks"])  # one compiled kernel for every bucket
def _max_kernel(LOGITS, PMAX, stride, vocab, span, chunks, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    base = LOGITS + row.to(tl.int64) * stride
    offs = tl.arange(0, BLOCK)
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(chunk * span, tl.minimum(chunk * span + span, vocab), BLOCK):
        x = tl.load(base + start + offs, mask=start + offs < vocab, other=float("-inf")).to(tl.float32)
        best = tl.maximum(best, x)
    tl.store(PMAX + row * chunks + chunk, tl.max(best, axis=0))


@triton.jit
def _row_max(PMAX, row, chunks, MAX_CHUNKS: tl.constexpr):
    c = tl.arange(0, MAX_CHUNKS)
    return tl.max(tl.load(PMAX + row * chunks + c, mask=c < chunks, other=float("-inf")), axis=0)


@triton.jit(do_not_specialize=["span", "rows", "chunks", "level", "pmax_cols"])
def _pass_kernel(
    LOGITS, PMAX, HIST, PREFIX, ACC, TARGET, HIST_K, PREFIX_K, ACC_K, TEMP, TOP_K, TOP_P,
    stride, vocab, span, rows, chunks, level, pmax_cols,
    MASS: tl.constexpr, HAS_TOP_K: tl.constexpr, KEY_BITS: tl.constexpr, MAX_CHUNKS: tl.constexpr,
    BLOCK: tl.constexpr,
):  # fmt: skip
    """One radix pass of one mode (MASS: top-p masses; else top-k counts) over one slice of one row."""
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    k = tl.load(TOP_K + row)
    p = tl.load(TOP_P + row)
    if MASS:
        active = p < 1.0
    else:
        active = (k > 0) & (k < vocab)
    if active:
        floor = tl.zeros([], tl.uint32)  # top-p counts only the top-k survivors: keys >= the k-th largest
        if MASS:
            if HAS_TOP_K:
                if (k > 0) & (k < vocab):
                    floor = _top_k_ukey(HIST_K, PREFIX_K, ACC_K, row, rows, chunks, k, KEY_BITS, MAX_CHUNKS)
        prefix = tl.zeros([], tl.uint32)
        acc = tl.zeros([], tl.float32)
        if level > 0:
            target = tl.zeros([], tl.float32)
            if MASS:
                if level == 1:  # the target needs the total mass: pass 0's bins
                    target = (1.0 - p) * tl.sum(_slice_bins(HIST, row, chunks, MAX_CHUNKS), axis=0)
                    if chunk == 0:
                        tl.store(TARGET + row, target)
                else:
                    target = tl.load(TARGET + row)  # written by pass 1 (an earlier launch)
            prefix, acc = _next_state(HIST, PREFIX, ACC, row, rows, chunks, level - 1, k, target, MASS, MAX_CHUNKS)
        if chunk == 0:
            tl.store(PREFIX + level * rows + row, prefix.to(tl.int32, bitcast=True))
            tl.store(ACC + level * rows + row, acc)
        top = _row_max(PMAX, row, pmax_cols, MAX_CHUNKS)
        t = tl.load(TEMP + row)
        inv_t = 1.0 / tl.where(t > 0.0, t, 1.0)  # greedy rows (t <= 0) count as 1: the argmax is kept anyway
        shift = 28 - 4 * level  # this pass's digit: bits [shift, shift + 4) of the unsigned key
        base = LOGITS + row.to(tl.int64) * stride
        offs = tl.arange(0, BLOCK)
        b = tl.arange(0, 16)
        acc = tl.zeros([BLOCK, 16], tl.float32)  # per-lane partial histograms: one reduction after the loop
        for start in range(chunk * span, tl.minimum(chunk * span + span, vocab), BLOCK):
            valid = start + offs < vocab
            x = tl.load(base + start + offs, mask=valid, other=float("-inf")).to(tl.float32)
            u = _ukey(x)
            hit = valid & (((u >> shift) >> 4) == prefix)  # under the prefix (level 0: prefix 0, all keys)
            if MASS:
                hit = hit & (u >= floor)
                w = tl.where(hit, tl.exp((x - top) * inv_t), 0.0)
            else:
                w = hit.to(tl.float32)
            digit = ((u >> shift) & 15).to(tl.int32)
            acc += tl.where(digit[:, None] == b[None, :], w[:, None], 0.0)
        tl.store(HIST + ((level * rows + row) * chunks + chunk) * 16 + b, tl.sum(acc, axis=0))


@triton.jit(do_not_specialize=["rows", "chunks", "pmax_cols"])
def _finish_kernel(
    TAU, PMAX, TEMP, TOP_K, TOP_P, MIN_P, HIST_K, PREFIX_K, ACC_K, HIST_P, PREFIX_P, ACC_P, TARGET,
    vocab, rows, chunks, pmax_cols,
    DO_TOP: tl.constexpr, HAS_TOP_K: tl.constexpr, KEY_BITS: tl.constexpr, MAX_CHUNKS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    top = _row_max(PMAX, row, pmax_cols, MAX_CHUNKS)
    min_p = tl.load(MIN_P + row)
    tau = tl.full([], -2147483648, tl.int32)  # sampler.KEEP_ALL
    if min_p > 0:
        t = tl.load(TEMP + row)
        tau = _signed_key(_ukey(top + tl.where(t > 0.0, t, 1.0) * tl.log(min_p)))
    if DO_TOP:
        k = tl.load(TOP_K + row)
        if HAS_TOP_K:
            if (k > 0) & (k < vocab):
                key_k = _top_k_ukey(HIST_K, PREFIX_K, ACC_K, row, rows, chunks, k, KEY_BITS, MAX_CHUNKS)
                tau = tl.maximum(tau, _signed_key(key_k))
        if tl.load(TOP_P + row) < 1.0:
            target = tl.load(TARGET + row)
            last = KEY_BITS // 4 - 1
            prefix, _ = _next_state(HIST_P, PREFIX_P, ACC_P, row, rows, chunks, last, k, target, True, MAX_CHUNKS)
            if KEY_BITS < 32:
                prefix = prefix << (32 - KEY_BITS)
            tau = tl.maximum(tau, _signed_key(prefix))
    tl.store(TAU + row, tl.minimum(tau, _signed_key(_ukey(top))))  # the maximum always survives


def _sm_count(device: torch.device) -> int:
    """Streaming multiprocessors; 1 on CPU (the interpreter runs programs one by one: fewer is faster)."""
    return device_props.sm_count(device, cpu_value=1)


def choose_chunks(rows: int, vocab: int, block: int, sm_count: int) -> int:
    """Slices per row: at most 4 programs per SM in all (what is resident at once at ~64 registers x 256
    threads), so the pass runs in one wave with no idle tail (3 slices of 256 rows would make 1.45 waves,
    as slow as 2); each slice at least one block, at most MAX_CHUNKS."""
    return max(1, min((4 * sm_count) // rows, triton.cdiv(vocab, block), MAX_CHUNKS))


def row_max_partials(logits: torch.Tensor, block: int = 256, chunks: int | None = None, num_warps: int = 8
                     ) -> torch.Tensor:  # fmt: skip
    """[rows, vocab] -> [rows, chunks] fp32 maxima of each row's slices (the filter's max pass; chunks None:
    choose_chunks)."""
    rows, vocab = logits.shape
    if chunks is None:
        chunks = choose_chunks(rows, vocab, block, _sm_count(logits.device))
    assert 1 <= chunks <= MAX_CHUNKS
    span = triton.cdiv(triton.cdiv(vocab, chunks), block) * block
    pmax = torch.empty((rows, chunks), dtype=torch.float32, device=logits.device)
    _max_kernel[(rows, chunks)](logits, pmax, logits.stride(0), vocab, span, chunks, BLOCK=block, num_warps=num_warps)
    return pmax


def filter_threshold(
    logits: torch.Tensor,  # [rows, vocab] bf16, fp16 or fp32 (masks already applied), unit stride along vocab
    temperature: torch.Tensor,  # [rows] fp32 (<= 0, greedy, counts as 1)
    top_k: torch.Tensor,  # [rows] int64, 0 = off
    top_p: torch.Tensor,  # [rows] fp32, 1 = off
    min_p: torch.Tensor,  # [rows] fp32, 0 = off
    level: int,  # sampler.FILTER_*: NONE, MIN_P, TOP_P (top-p + min-p), TOP_K (all three)
    block: int = 256,  # keys per step of a pass program: one per thread at 8 warps
    chunks: int | None = None,  # slices per row; None: choose_chunks
    num_warps: int = 8,  # one key per thread: ~50-65 registers with Triton 3.6 and 3.9, 4 programs per SM
    pmax: torch.Tensor | None = None,  # [rows, <= MAX_CHUNKS] maxima of slices covering each row (only their
    # maximum is read), when the caller has them (row_max_partials, or the race's chunk maxima)
) -> torch.Tensor | None:  # [rows] int32 threshold keys (see sampler.filter_threshold)
    """Runtime sizes (rows, slices, pass index) are kernel arguments, not compile-time constants: one
    compiled kernel serves every batch bucket and pass."""
    if level == 0:
        return None
    rows, vocab = logits.shape
    assert logits.stride(-1) == 1
    key_bits = 16 if logits.dtype == torch.bfloat16 else 32  # bf16 -> fp32 leaves the low 16 key bits zero
    npass = key_bits // DIGIT_BITS
    if chunks is None:
        chunks = choose_chunks(rows, vocab, block, _sm_count(logits.device))
    if pmax is None:
        pmax = row_max_partials(logits, block, chunks, num_warps)
    assert pmax.shape[0] == rows and 1 <= pmax.shape[1] <= MAX_CHUNKS and 1 <= chunks <= MAX_CHUNKS
    span = triton.cdiv(triton.cdiv(vocab, chunks), block) * block
    dev, f32, i32 = logits.device, torch.float32, torch.int32
    tau = torch.empty(rows, dtype=i32, device=dev)
    do_top, has_top_k = level >= 2, level >= 3
    state = {}
    for mass in ([False] if has_top_k else []) + ([True] if do_top else []):
        hist = torch.empty((npass, rows, chunks, BINS), dtype=f32, device=dev)
        prefix, acc = (
            torch.empty((npass, rows), dtype=i32, device=dev),
            torch.empty((npass, rows), dtype=f32, device=dev),
        )
        state[mass] = (hist, prefix, acc)
    target = torch.empty(rows, dtype=f32, device=dev)
    hist_k, prefix_k, acc_k = state.get(False, (pmax, tau, pmax))  # placeholders: never read without top-k
    for mass, (hist, prefix, acc) in state.items():
        for pass_index in range(npass):
            _pass_kernel[(rows, chunks)](
                logits, pmax, hist, prefix, acc, target, hist_k, prefix_k, acc_k, temperature, top_k, top_p,
                logits.stride(0), vocab, span, rows, chunks, pass_index, pmax.shape[1],
                MASS=mass, HAS_TOP_K=has_top_k, KEY_BITS=key_bits, MAX_CHUNKS=MAX_CHUNKS, BLOCK=block,
                num_warps=num_warps,
            )  # fmt: skip
    hist_p, prefix_p, acc_p = state.get(True, (pmax, tau, pmax))
    _finish_kernel[(rows,)](
        tau, pmax, temperature, top_k, top_p, min_p, hist_k, prefix_k, acc_k, hist_p, prefix_p, acc_p, target,
        vocab, rows, chunks, pmax.shape[1],
        DO_TOP=do_top, HAS_TOP_K=has_top_k, KEY_BITS=key_bits, MAX_CHUNKS=MAX_CHUNKS,
    )  # fmt: skip
    return tau
