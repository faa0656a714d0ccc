"""Triton kernel: fold one layer's residual stream into the rows' collection buffers (engine/collection.py).

One program per input vector (a decode row, or an admitted prompt's last position in prefill): it reads
its row's live flag, mode and n_out, then stores the vector ("last"), adds it to the fp32 sum ("mean",
restarted at n_out = 0) or writes it at column n_out ("all", while n_out < cap). Rows that are idle,
finished or collect nothing only load their flags. Same arithmetic as torch_ops.collect_rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inferlab.engine.collection import MODE_ALL, MODE_LAST, MODE_MEAN


@triton.jit
def _collect_kernel(
    X,
    ROWS,
    ACTIVE,
    FINISHED,
    N_OUT,
    MODE,
    ACC,
    ALL,
    stride_x,
    stride_acc,
    stride_all_row,
    stride_all_col,
    cap,
    dim,
    HAS_ROWS: tl.constexpr,
    HAS_ALL: tl.constexpr,
    LAST: tl.constexpr,
    MEAN: tl.constexpr,
    EVERY: tl.constexpr,
    BLOCK: tl.constexpr,
):
    lane = tl.program_id(0)
    if HAS_ROWS:
        row = tl.load(ROWS + lane)
    else:
        row = lane.to(tl.int64)
    live = (tl.load(ACTIVE + row) != 0) & (tl.load(FINISHED + row) == 0)
    mode = tl.load(MODE + row)
    n = tl.load(N_OUT + row)
    offs = tl.arange(0, BLOCK)
    pooled = live & ((mode == LAST) | (mode == MEAN))
    keep_sum = pooled & (mode == MEAN) & (n > 0)
    # per-row decisions as vector widths (0 = touch nothing)
    x = tl.load(X + lane * stride_x + offs, mask=offs < dim, other=0.0)
    old = tl.load(ACC + row * stride_acc + offs, mask=offs < tl.where(keep_sum, dim, 0), other=0.0)
    tl.store(ACC + row * stride_acc + offs, old + x.to(tl.float32), mask=offs < tl.where(pooled, dim, 0))
    if HAS_ALL:
        keep = live & (mode == EVERY) & (n < cap)
        col = tl.minimum(n, cap - 1)
        tl.store(ALL + row * stride_all_row + col * stride_all_col + offs, x.to(ALL.dtype.element_ty),
                 mask=offs < tl.where(keep, dim, 0))


def collect_rows(x: torch.Tensor, layer) -> None:
    """x [n, dim] -> the buffers of `layer` (an engine.collection.CollectLayer); one launch."""
    x2 = x if x.stride(-1) == 1 else x.contiguous()
    n, dim = x2.shape
    rows = layer.rows if layer.rows is not None else layer.mode  # unused pointer without a row map
    every = layer.all if layer.all is not None else layer.acc
    _collect_kernel[(n,)](
        x2, rows, layer.active, layer.finished, layer.n_out, layer.mode, layer.acc, every,
        x2.stride(0), layer.acc.stride(0), every.stride(0), every.stride(1) if layer.all is not None else 0,
        layer.all.shape[1] if layer.all is not None else 1, dim,
        HAS_ROWS=layer.rows is not None, HAS_ALL=layer.all is not None, LAST=MODE_LAST, MEAN=MODE_MEAN,
        EVERY=MODE_ALL, BLOCK=triton.next_power_of_2(dim),
    )  # fmt: skip
