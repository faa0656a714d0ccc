"""Triton helpers of the FP8 KV cache: one head's scale and its values rounded to the e4m3 grid.

The same operations as engine/kv_quant.py (the torch reference), so kernels and reference store the same
bytes: scale = max|x| / 448 (IEEE division: `div_rn`, not the GPU's approximate `/`), x / scale rounded to
the nearest e4m3 value (ties to even, saturating at +-448) in fp32 arithmetic. The caller then casts the
result to fp8 exactly: no rounding is left to the conversion instruction (whose saturation rules vary)
nor to the Triton interpreter (whose fp32 -> fp8 cast drops the carry of a value rounding up to the next
power of two). A NaN anywhere in the head makes its scale NaN, so a broken model stays visibly broken, as
it would with a bf16 cache (a plain max would skip the NaN on the GPU).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _round_e4m3(y):
    """fp32 -> the nearest e4m3fn value as fp32 (see engine/kv_quant.round_e4m3)."""
    y = tl.minimum(tl.maximum(y, -448.0), 448.0)
    a = tl.abs(y)
    step_exponent = tl.maximum((a.to(tl.int32, bitcast=True) >> 23) - 3, 118)  # 3 mantissa bits; step >= 2^-9
    step = (step_exponent << 23).to(tl.float32, bitcast=True)
    inverse = ((254 - step_exponent) << 23).to(tl.float32, bitcast=True)
    v = a * inverse  # exact, in [0, 16)
    whole = tl.floor(v)
    frac = v - whole
    odd = (whole.to(tl.int32) & 1) == 1
    rounded = (whole + ((frac > 0.5) | ((frac == 0.5) & odd)).to(tl.float32)) * step
    return tl.where(y < 0, -rounded, rounded)


@triton.jit
def _amax(x, AXIS: tl.constexpr):
    """max |x| along AXIS (a 1-D vector: 0; each row of a 2-D block: 1); NaN where x holds a NaN."""
    total = tl.sum(x, axis=AXIS)
    return tl.where(total != total, total, tl.max(tl.abs(x), axis=AXIS))


@triton.jit
def _nan_max(a, b):
    return tl.where((a != a) | (b != b), a + b, tl.maximum(a, b))


@triton.jit
def e4m3_scale(x1, x2):
    """The scale of one head held as two fp32 1-D parts (halves; masked lanes 0): max|x| / 448, fp32 scalar."""
    return tl.math.div_rn(_nan_max(_amax(x1, 0), _amax(x2, 0)), 448.0)


@triton.jit
def to_e4m3(x, scale):
    """fp32 x / scale on the e4m3 grid, as fp32 (cast it to fp8: exact); an all-zero head (scale 0) gives 0."""
    return _round_e4m3(tl.math.div_rn(x, tl.where(scale > 0, scale, 1.0)))


@triton.jit
def e4m3_scales(x1, x2):
    """e4m3_scale of each row of a 2-D block (one head per row, as two fp32 halves): [rows] fp32."""
    return tl.math.div_rn(_nan_max(_amax(x1, 1), _amax(x2, 1)), 448.0)
