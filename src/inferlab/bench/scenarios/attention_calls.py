"""One attention call per kernel choice, over fixed q/k/v: PyTorch SDPA with its backend left to auto or
forced (torch.nn.attention.sdpa_kernel), or the flash-attn library's own kernel. Used by the
attention-kernels scenario; child process only (imports torch).

Each builder returns `run(n)`: n back-to-back calls under one backend context, returning the last
output in SDPA layout [batch, q_heads, q_len, head_dim].
"""

from __future__ import annotations

from typing import Any, Callable

from inferlab.errors import UnsupportedError

SDPA_KERNELS = ("auto", "flash", "efficient", "cudnn", "math")
KERNELS = SDPA_KERNELS + ("flash_attn",)


def _sdpa_backend(kernel: str) -> Any:
    from torch.nn.attention import SDPBackend

    return {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[kernel]


def expand_kv(t: Any, q_heads: int) -> Any:
    """t  # [batch, kv_heads, len, head_dim] -> [batch, q_heads, len, head_dim] (as HF's repeat_kv)."""
    return t.repeat_interleave(q_heads // t.shape[1], dim=1)


def build_call(kernel: str, q: Any, k: Any, v: Any, causal: bool, gqa: str) -> Callable[[int], Any]:
    """q  # [B, Hq, Sq, D]; k, v  # [B, Hkv, Sk, D]. gqa: 'native' hands the kv heads to the kernel
    (enable_gqa / flash-attn's own GQA), 'expand' repeats them to Hq first (not timed)."""
    import torch.nn.functional as F

    if kernel == "flash_attn":
        return _flash_attn_call(q, k, v, causal, gqa)
    grouped = k.shape[1] != q.shape[1]
    if grouped and gqa == "expand":
        k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
        grouped = False
    extra = {"enable_gqa": True} if grouped else {}

    def run(n: int) -> Any:
        out = None
        for _ in range(n):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)
        return out

    if kernel == "auto":
        return run

    from torch.nn.attention import sdpa_kernel

    backend = _sdpa_backend(kernel)

    def forced(n: int) -> Any:
        with sdpa_kernel([backend]):
            return run(n)

    return forced


def require_flash_attn() -> Callable[..., Any]:
    """flash-attn's flash_attn_func, or UnsupportedError with the import error (checked before any
    tensor is made, so an absent library costs no device initialisation)."""
    try:
        from flash_attn import flash_attn_func
    except Exception as e:  # ImportError, or an ABI mismatch raising OSError/undefined symbol
        raise UnsupportedError(f"flash-attn is not usable here: {type(e).__name__}: {e}") from None
    return flash_attn_func


def _flash_attn_call(q: Any, k: Any, v: Any, causal: bool, gqa: str) -> Callable[[int], Any]:
    import torch

    flash_attn_func = require_flash_attn()
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise UnsupportedError(f"flash-attn runs only float16/bfloat16, not {q.dtype}; set dtype=bfloat16")
    if gqa == "expand" and k.shape[1] != q.shape[1]:
        k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    # flash-attn's layout is [B, S, H, D]; converted once, outside the timed calls.
    qf, kf, vf = (t.transpose(1, 2).contiguous() for t in (q, k, v))

    def run(n: int) -> Any:
        out = None
        for _ in range(n):
            out = flash_attn_func(qf, kf, vf, causal=causal)
        return out.transpose(1, 2)

    return run


def math_reference(q: Any, k: Any, v: Any, causal: bool) -> Any:
    """The same attention in float32 through SDPA's math backend, kv heads expanded: the yardstick."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qf, kf, vf = q.float(), expand_kv(k.float(), q.shape[1]), expand_kv(v.float(), q.shape[1])
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        return F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
