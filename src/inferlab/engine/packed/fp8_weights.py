"""FP8 weights for the packed prefill: each linear weight stored as e4m3 with one fp32 scale per output
channel, each activation row quantized the same way when it is used, and the product taken by
torch._scaled_mm (FP8 tensor cores, row-wise scales, bf16 out) on CUDA devices with FP8 (compute capability
>= 8.9: Ada, Hopper). Elsewhere `fp8_linear` computes the same quantized product in fp32 (the reference: CPU
tests). The embedding, the norms and the score head stay in the model dtype.

Quantization is engine/kv_quant.quantize (scale = max|x| / 448 over the last dim, exact e4m3 rounding) for
weights and, on CUDA, its Triton twin (kernels/triton_fp8_rows.py) for activations.

`Fp8Gemm` takes the place of the forward's GemmPlan (engine/forwards/llama.py, gemma.py call `gemm.linear(x, w, bias,
name)` and `gemm.mlp(h, gate_up, down)` and never look at the weights themselves), so the same layer loop
runs over `Fp8Weight`s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from inferlab.engine import kv_quant
from inferlab.errors import UnsupportedError

FP8_MIN_CAPABILITY = (8, 9)
FUSED = ("qkv", "o", "gate_up", "down")  # the LayerWeights fields stored as Fp8Weight


@dataclass
class Fp8Weight:
    values: torch.Tensor  # [out, in] float8_e4m3fn
    scale: torch.Tensor  # [out] fp32: w ~ values * scale[:, None]

    @classmethod
    def quantize(cls, w: torch.Tensor) -> "Fp8Weight":
        values, scale = kv_quant.quantize(w)
        return cls(values.contiguous(), scale.contiguous())


def fp8_linear(x: torch.Tensor, w: Fp8Weight) -> torch.Tensor:
    """x [T, in] (model dtype) @ w^T -> [T, out] in x's dtype, both operands quantized (module docstring)."""
    if x.device.type == "cuda":
        from inferlab.engine.kernels.triton_fp8_rows import quantize_rows

        xq, xs = quantize_rows(x.contiguous())
        return torch._scaled_mm(xq, w.values.t(), scale_a=xs[:, None], scale_b=w.scale[None, :], out_dtype=x.dtype)
    return fp8_linear_reference(x, w)


def fp8_linear_reference(x: torch.Tensor, w: Fp8Weight) -> torch.Tensor:
    xq, xs = kv_quant.quantize(x)
    return (kv_quant.dequantize(xq, xs) @ kv_quant.dequantize(w.values, w.scale).t()).to(x.dtype)


class Fp8Gemm:
    """The GemmPlan interface over Fp8Weight (module docstring). act_mul: the MLP's gated activation."""

    def __init__(self, act_mul: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.act_mul = act_mul

    def linear(self, x: torch.Tensor, w: Fp8Weight, bias: torch.Tensor | None, name: str) -> torch.Tensor:
        out = fp8_linear(x, w)
        return out if bias is None else out + bias

    def mlp(self, h: torch.Tensor, w_gate_up: Fp8Weight, w_down: Fp8Weight) -> torch.Tensor:
        return fp8_linear(self.act_mul(fp8_linear(h, w_gate_up)), w_down)


def check_fp8_device(device: torch.device, dtype: torch.dtype) -> None:
    """Refuse FP8 weights where torch._scaled_mm cannot run them (CPU runs the reference)."""
    if device.type != "cuda":
        return
    capability = tuple(torch.cuda.get_device_capability(device))
    if capability < FP8_MIN_CAPABILITY:
        raise UnsupportedError(
            f"--weights fp8 needs a GPU with FP8 tensor cores (CUDA compute capability >= 8.9: Ada, Hopper or newer); "
            f"{torch.cuda.get_device_name(device)} has {capability[0]}.{capability[1]}. Use --weights auto (the model "
            "dtype)"
        )
    if dtype != torch.bfloat16:
        raise UnsupportedError(f"--weights fp8 computes in bfloat16 on CUDA (row-wise scaled matmuls); the model dtype "
                               f"is {str(dtype).removeprefix('torch.')}: pass --dtype bfloat16 (or auto)")
    try:  # torch builds without row-wise FP8 scaling say so here rather than in the first batch
        probe = Fp8Weight.quantize(torch.randn(32, 32, device=device))
        fp8_linear(torch.randn(16, 32, device=device, dtype=dtype), probe)
    except RuntimeError as e:
        raise UnsupportedError(f"--weights fp8: torch._scaled_mm with row-wise scales fails on this device/torch "
                               f"({str(e).splitlines()[0][:200]}); use --weights auto") from None


def quantize_layers(layers: list, device: torch.device) -> None:
    """Replace each layer's projection weights by Fp8Weight, in place (the model-dtype copies are freed)."""
    bad = [list(getattr(layer, name).shape) for layer in layers for name in FUSED
           if any(d % 16 for d in getattr(layer, name).shape)]
    if bad:
        raise UnsupportedError(f"--weights fp8 needs projection sizes that are multiples of 16 (FP8 matmuls); this model "
                               f"has a {bad[0]} weight. Use --weights auto")
    for layer in layers:
        for name in FUSED:
            setattr(layer, name, Fp8Weight.quantize(getattr(layer, name)))
    if device.type == "cuda":
        torch.cuda.empty_cache()
