"""The packed prefill's MLP: cuBLAS gate_up + act_mul + cuBLAS down, or the gate_up GEMM with the gated
product in its epilogue (kernels/triton_gemm_wide.py) + cuBLAS down, whichever the encoder's start-up timed
faster on this GPU, these shapes and its batch size.

`choose` runs on CUDA at the encoder's warm-up, on layer 0's weights and `tokens` random rows: each
candidate tile must agree with the cuBLAS path (bf16 rounding apart), then the whole MLP is timed (median of
5 CUDA-event timings, warm) and a tile is kept only when it takes < MARGIN of cuBLAS's time, so the choice
does not flip on noise. WideMlpGemm then serves the model's GEMM plan: every projection and every MLP of
fewer than MIN_ROWS tokens as the model's own plan, the MLP of a larger batch through the chosen tile.
FP8 weights keep their own plan (packed/fp8_weights.py).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from inferlab.engine.kernels.triton_gemm_wide import CANDIDATES, WideConfig, wide_gated_linear

log = logging.getLogger(__name__)

MARGIN = 0.95  # the fused tile is chosen when it takes < 95% of cuBLAS + act_mul's time
MIN_ROWS = 512  # below this a batch keeps the model's plan (its timing was at the encoder's batch size)
CUBLAS = "cublas"


class WideMlpGemm:
    """The model's GEMM plan (`inner`), with the MLP of batches of >= min_rows tokens through `config`."""

    def __init__(self, inner: Any, config: WideConfig, activation: str, min_rows: int = MIN_ROWS) -> None:
        self.inner = inner
        self.config = config
        self.activation = activation
        self.min_rows = min_rows

    def linear(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, name: str) -> torch.Tensor:
        return self.inner.linear(x, w, bias, name)

    def mlp(self, h: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
        if h.shape[0] < self.min_rows:
            return self.inner.mlp(h, w_gate_up, w_down)
        return F.linear(wide_gated_linear(h, w_gate_up, self.config, self.activation), w_down)

    def __getattr__(self, name: str) -> Any:  # act_mul, counters, ...: the inner plan's
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def choose(gemm: Any, layer: Any, hidden: int, dtype: torch.dtype, device: torch.device, tokens: int,
           candidates: tuple[WideConfig, ...] = CANDIDATES) -> tuple[Any, str, dict[str, float]]:
    """(the GEMM plan to use, the chosen name, {name: ms}) for the model's `gemm` plan and one of its layers."""
    activation = getattr(gemm, "activation", "silu")
    g = torch.Generator(device=device).manual_seed(0)
    h = torch.randn(tokens, hidden, generator=g, device=device, dtype=dtype)

    def cublas() -> torch.Tensor:
        return gemm.mlp(h, layer.gate_up, layer.down)

    want = cublas().float()
    scale = want.abs().max().item()
    runs = {CUBLAS: cublas}
    for config in candidates:
        def fused(config=config) -> torch.Tensor:
            return F.linear(wide_gated_linear(h, layer.gate_up, config, activation), layer.down)

        try:
            error = (fused().float() - want).abs().max().item()
        except Exception as e:  # noqa: BLE001 - a tile this GPU cannot compile (shared memory) is no candidate
            log.info("packed MLP: %s unavailable (%s)", config, str(e).splitlines()[0][:200] if str(e) else e)
            continue
        if not error <= 0.02 * scale:  # bf16 rounding of gate_up in another order stays far below; NaN fails
            log.warning("packed MLP: %s disagrees with cuBLAS (max error %.3g of %.3g); not used", config, error, scale)
            continue
        runs[str(config)] = fused
    times = {name: _median_ms(run) for name, run in runs.items()}
    best = min(times, key=times.__getitem__)
    if best == CUBLAS or times[best] >= MARGIN * times[CUBLAS]:
        chosen, plan = CUBLAS, gemm
    else:
        config = next(c for c in candidates if str(c) == best)
        chosen, plan = best, WideMlpGemm(gemm, config, activation)
    log.info("packed MLP at %d tokens: %s (%s)", tokens, chosen, {n: round(t, 3) for n, t in times.items()})
    return plan, chosen, {n: round(t, 3) for n, t in times.items()}


def _median_ms(run) -> float:
    run()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]
