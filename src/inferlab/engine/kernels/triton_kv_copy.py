"""Triton kernel: copy the first positions of some KV-cache slots into other slots, every layer, K and V,
in one launch (KVCache.copy_prefix: rows that share a prompt get its K/V without a prefill of their own).

Grid (pairs, layers x kv_heads, blocks of the prefix): a slot's prefix for one (layer, kv head) is one
contiguous run of `length x head_dim` elements ([..., max_len, head_dim] with head_dim innermost), so each
program copies one block of it for K and V. The cache is passed as an integer view of the same element size
(a bit copy: the kernel does not care whether it holds bf16, fp32 or fp8). Offsets are int64 (a layer of a
large cache exceeds 2^31 elements). No host sync: pairs and length are the only host values.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@triton.jit(do_not_specialize=["elems"])
def _copy_prefix_kernel(K, V, SRC, DST, layer_stride, slot_stride, head_stride, elems,
                        KV_HEADS: tl.constexpr, BLOCK_SIZE: tl.constexpr):  # fmt: skip
    pair = tl.program_id(0)
    layer_head = tl.program_id(1)
    layer = (layer_head // KV_HEADS).to(tl.int64)
    head = (layer_head % KV_HEADS).to(tl.int64)
    src = tl.load(SRC + pair).to(tl.int64)
    dst = tl.load(DST + pair).to(tl.int64)
    offs = tl.program_id(2).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    m = offs < elems
    base = layer * layer_stride + head * head_stride + offs
    tl.store(K + base + dst * slot_stride, tl.load(K + base + src * slot_stride, mask=m), mask=m)
    tl.store(V + base + dst * slot_stride, tl.load(V + base + src * slot_stride, mask=m), mask=m)


def copy_prefix(
    k: torch.Tensor,  # [layers, slots, kv_heads, max_len, head_dim], contiguous
    v: torch.Tensor,
    src_slots: torch.Tensor,  # [pairs] int64 (device)
    dst_slots: torch.Tensor,  # [pairs] int64 (device): distinct, none of them a source
    length: int,  # positions [0, length) are copied
    block: int = BLOCK,  # elements per program
) -> None:
    layers, _, kv_heads, max_len, head_dim = k.shape
    assert k.is_contiguous() and v.is_contiguous() and 0 < length <= max_len
    bits = _BITS[k.element_size()]
    kb, vb = k.view(bits), v.view(bits)
    elems = length * head_dim
    grid = (src_slots.shape[0], layers * kv_heads, triton.cdiv(elems, block))
    _copy_prefix_kernel[grid](
        kb, vb, src_slots.contiguous(), dst_slots.contiguous(), k.stride(0), k.stride(1), k.stride(2), elems,
        KV_HEADS=kv_heads, BLOCK_SIZE=block,
    )  # fmt: skip
