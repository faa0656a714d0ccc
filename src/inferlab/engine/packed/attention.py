"""Attention of the packed prefill: causal within each row, never across rows, over q/k/v views of the qkv
projection ([T, heads, head_dim] with the projection's token stride).

Three implementations of one contract (`Impl(q, k, v, batch, scale, window, softcap) -> [T, heads, head_dim]`):
- "torch": the reference, row by row: SDPA with native GQA (engine/attention.prefill_attention), or
  engine/attention.windowed_attention where a window cuts into the row or the scores are soft-capped. CPU,
  tests, and the check below.
- "triton": engine/kernels/triton_varlen_attention.py (windows and soft-caps included), CUDA; "triton-alt" the
  same kernel with the other warp count.
- "flash": PyTorch's FlashAttention-2 varlen kernel (torch.ops.aten._flash_attention_forward with cumulative
  lengths), CUDA, half precision, no soft-cap.
`PackedAttention` picks per kind of layer (window or not, soft-cap or not) once, at the encoder's warm-up
(`choose`): every candidate that accepts the kind runs a small packed batch and must match the torch
reference (a kernel that refuses the inputs or disagrees is dropped, with the reason logged), then the
survivors are timed on a batch of the encoder's own size and the fastest is kept. On CPU it is "torch".
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Callable

import torch

from inferlab.engine.attention import needs_windowed, prefill_attention, windowed_attention
from inferlab.engine.packed.batch import DeviceBatch, on_device, pack_rows

log = logging.getLogger(__name__)

Impl = Callable[..., torch.Tensor]


def varlen_attention_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: DeviceBatch, scale: float,
                           window: int = 0, softcap: float | None = None) -> torch.Tensor:
    """The reference: each row's causal attention on its own (see the module docstring)."""
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    for start, n in zip(batch.host.starts, batch.host.lengths):
        rows = slice(start, start + n)
        qi, ki, vi = (x[rows].transpose(0, 1).unsqueeze(0) for x in (q, k, v))  # [1, heads, n, head_dim]
        if needs_windowed(n, window, softcap):
            a = windowed_attention(qi, ki, vi, scale, window, softcap)
        else:
            a = prefill_attention(qi, ki, vi, scale)
        out[rows] = a[0].transpose(0, 1)
    return out


def varlen_attention_triton(q, k, v, batch: DeviceBatch, scale: float, window: int = 0,
                            softcap: float | None = None, alternative: bool = False) -> torch.Tensor:
    from inferlab.engine.kernels.triton_varlen_attention import varlen_attention

    return varlen_attention(q, k, v, batch.cu_seqlens, batch.host.max_len, scale, window, softcap,
                            alternative=alternative)


def varlen_attention_flash(q, k, v, batch: DeviceBatch, scale: float, window: int = 0,
                           softcap: float | None = None) -> torch.Tensor:
    assert softcap is None, "FlashAttention has no soft-cap"
    n = batch.host.max_len
    windowed = {"window_size_left": window - 1, "window_size_right": 0} if window and window < n else {}
    return torch.ops.aten._flash_attention_forward(
        q, k, v, batch.cu_seqlens, batch.cu_seqlens, n, n, 0.0, True, False, scale=scale, **windowed
    )[0]


IMPLS: dict[str, Impl] = {
    "torch": varlen_attention_torch,
    "triton": varlen_attention_triton,
    "triton-alt": partial(varlen_attention_triton, alternative=True),  # the same tiles, the other warp count
    "flash": varlen_attention_flash,
}


def _accepts(name: str, softcap: float | None, dtype: torch.dtype) -> bool:
    if name == "flash":
        return softcap is None and dtype in (torch.bfloat16, torch.float16)
    return True


Kind = tuple[bool, bool]  # (windowed, soft-capped)


class PackedAttention:
    """One implementation per kind of layer; "torch" until `choose` ran (always on CPU)."""

    def __init__(self, device: torch.device, candidates: tuple[str, ...] = ("triton", "triton-alt", "flash")) -> None:
        self.device = device
        self.candidates = candidates if device.type == "cuda" else ()
        self.chosen: dict[Kind, str] = {}
        self.timings_ms: dict[str, dict[str, float]] = {}  # kind label -> {impl: ms} of the timed batch

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: DeviceBatch, scale: float,
                 window: int = 0, softcap: float | None = None) -> torch.Tensor:
        name = self.chosen.get((bool(window), softcap is not None), "torch")
        return IMPLS[name](q, k, v, batch, scale, window, softcap)

    def choose(self, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, kinds: list[tuple[int, float | None]],
               timing_tokens: int, timing_row: int) -> None:
        """For each distinct (window, softcap) among `kinds`: check, time, keep the fastest (module docstring)."""
        for window, softcap in dict.fromkeys(kinds):
            kind = (bool(window), softcap is not None)
            if kind in self.chosen:
                continue
            label = f"window={window} softcap={softcap}"
            alive = [n for n in self.candidates if _accepts(n, softcap, dtype) and
                     self._agrees(n, heads, kv_heads, head_dim, dtype, window, softcap)]
            if not alive:
                self.chosen[kind] = "torch"
                if self.candidates:
                    log.warning("packed attention (%s): no kernel passed its check; the torch reference runs", label)
                continue
            times = {n: self._time(n, heads, kv_heads, head_dim, dtype, window, softcap, timing_tokens, timing_row)
                     for n in alive}
            self.timings_ms[label] = {n: round(t, 3) for n, t in times.items()}
            self.chosen[kind] = min(times, key=times.__getitem__)
            log.info("packed attention (%s): %s (%s)", label, self.chosen[kind], self.timings_ms[label])

    def _qkv(self, lengths: list[int], heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype):
        """Random q, k, v as views of one qkv buffer (the forward's layout) and the batch on the device."""
        batch = on_device(pack_rows([[0] * n for n in lengths]), self.device)
        g = torch.Generator(device=self.device).manual_seed(0)
        qkv = torch.randn(sum(lengths), (heads + 2 * kv_heads) * head_dim, generator=g, device=self.device, dtype=dtype)
        q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=1)
        return (q.view(-1, heads, head_dim), k.view(-1, kv_heads, head_dim), v.view(-1, kv_heads, head_dim)), batch

    def _agrees(self, name: str, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, window: int,
                softcap: float | None) -> bool:
        (q, k, v), batch = self._qkv([1, 77, 200, 130], heads, kv_heads, head_dim, dtype)
        scale = head_dim**-0.5
        try:
            got = IMPLS[name](q, k, v, batch, scale, window, softcap).float()
        except Exception as e:  # noqa: BLE001 - a kernel that refuses these inputs is not a candidate
            log.info("packed attention: %s unavailable (%s)", name, str(e).splitlines()[0][:200] if str(e) else e)
            return False
        want = varlen_attention_torch(q, k, v, batch, scale, window, softcap).float()
        error = (got - want).abs().max().item()
        if not error <= 0.02:  # values ~N(0, 1) averaged: bf16 rounding stays far below this; NaN fails too
            log.warning("packed attention: %s disagrees with the reference (max error %.3g); not used", name, error)
            return False
        return True

    def _time(self, name: str, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, window: int,
              softcap: float | None, tokens: int, row: int) -> float:
        """Median ms of 5 calls on `tokens` tokens in rows of `row` (CUDA events)."""
        lengths = [row] * max(1, tokens // row)
        (q, k, v), batch = self._qkv(lengths, heads, kv_heads, head_dim, dtype)
        fn = IMPLS[name]
        fn(q, k, v, batch, head_dim**-0.5, window, softcap)
        times = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(q, k, v, batch, head_dim**-0.5, window, softcap)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return sorted(times)[len(times) // 2]
