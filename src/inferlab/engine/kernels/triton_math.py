"""Scalar math shared by the Triton kernels (fp32 in, fp32 out): tanh, the tanh-approximated GELU, SiLU.

tanh is written with exp ((1 - e) / (1 + e), e = exp(-2|x|), sign restored) rather than a libdevice call, so
the same code runs in the Triton interpreter (the CPU tests) and on every Triton version; it never
overflows, saturates exactly to +-1, and its absolute error is a few fp32 ulps, which is all its two users
need: GELU adds it to 1, and the soft-caps multiply it by the cap (transformers computes both in the model
dtype).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def gelu_tanh(x):
    """torch's gelu(x, approximate="tanh"): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


@triton.jit
def silu(x):
    return x / (1.0 + tl.exp(-x))


@triton.jit
def gate_activation(x, GELU_TANH: tl.constexpr):
    """The MLP's gate activation: SiLU (SwiGLU, the Llama family) or the tanh GELU (GeGLU, Gemma)."""
    if GELU_TANH:
        return gelu_tanh(x)
    else:
        return silu(x)
