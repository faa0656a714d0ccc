"""FP8 (e4m3fn) storage of K and V with one fp32 scale per (layer, slot, kv head, position): the torch side.

A head's new key (or value) x [head_dim] is stored as q = round_e4m3(x / s), s = max|x| / 448 (e4m3's largest
finite value), and read back as q * s. The scale is computed when the position is written, so no calibration
is needed and each head position uses the whole e4m3 range (3 mantissa bits: <= 2^-4 relative error).
`round_e4m3` rounds to the e4m3 grid in fp32 arithmetic (ties to even, saturating, subnormals included), so
the cast to float8_e4m3fn afterwards is exact; the Triton kernels do the same operations (kernels/
triton_fp8.py), so both store the same bytes whatever the conversion instruction or the Triton interpreter
(whose fp32 -> fp8 cast drops the carry of a value rounding up to the next power of two) would do.
"""

from __future__ import annotations

import torch

E4M3_MAX = 448.0
FP8_KV_DTYPE = torch.float8_e4m3fn
SCALE_DTYPE = torch.float32  # scales are kept in fp32: 4 bytes per (layer, kv head, position) for K and for V
_MIN_ULP_EXPONENT = 127 - 9  # e4m3's subnormal step is 2^-9 (biased fp32 exponent 118)


def round_e4m3(y: torch.Tensor) -> torch.Tensor:
    """fp32 -> the nearest e4m3fn value (ties to even), as fp32; |y| > 448 saturates to +-448."""
    y = y.float().clamp(-E4M3_MAX, E4M3_MAX)
    a = y.abs()
    exponent = a.view(torch.int32) >> 23  # biased; a >= 0 so no sign bit
    step_exponent = torch.clamp(exponent - 3, min=_MIN_ULP_EXPONENT)  # 3 mantissa bits; subnormals below 2^-6
    step = (step_exponent << 23).view(torch.float32)  # a power of two
    inverse = ((254 - step_exponent) << 23).view(torch.float32)  # 1 / step, exact
    v = a * inverse  # exact: [0, 16)
    whole = torch.floor(v)
    frac = v - whole
    odd = torch.remainder(whole, 2) == 1
    rounded = (whole + ((frac > 0.5) | ((frac == 0.5) & odd)).float()) * step  # exact
    return torch.where(y < 0, -rounded, rounded)


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., head_dim] (any float dtype) -> (q [..., head_dim] float8_e4m3fn, scale [...] fp32), x ~ q * scale."""
    xf = x.float()
    amax = xf.abs().amax(dim=-1)  # [...]
    # A tensor divisor: CUDA divides by a Python scalar as a multiplication by its reciprocal, which can land
    # one ulp away from the IEEE quotient the Triton kernels compute (div_rn); the bytes must be the same.
    scale = amax / torch.full_like(amax, E4M3_MAX)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero head stores zeros
    q = round_e4m3(xf / safe[..., None])
    return q.to(FP8_KV_DTYPE), scale


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(q [..., head_dim] fp8, scale [...] fp32) -> [..., head_dim] fp32."""
    return q.float() * scale[..., None]


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype == FP8_KV_DTYPE
