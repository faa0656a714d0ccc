"""Which implementation runs each projection of the decode step at each batch bucket: cuBLAS (F.linear)
or the skinny Triton GEMM (kernels/triton_gemm.py), decided once at start-up by timing both on the device.

At decode batch sizes (M <= 64 rows) a projection streams its weight matrix, and how close cuBLAS or our
kernel comes to the copy bandwidth depends on the shape, the batch and the GPU, so it is measured, not
assumed: for every (projection, bucket <= 64) the engine times cuBLAS and a few Triton tiles inside a CUDA
graph on a cold L2, over the weights of successive layers, and keeps Triton only where it wins by more than
MARGIN (so the choice does not flip on noise). The MLP is timed as one unit: cuBLAS gate_up + act_mul +
cuBLAS down, against the Triton gate_up with the gated product in its epilogue ("gated") and the Triton
down with it in its prologue ("swiglu_down"; Gemma's GELU-tanh uses the same kinds). A projection over M
rows that is no timed bucket (a packed decode step's, a prefill of at most MAX_ROWS tokens: the same GEMM
shape) takes the choice of the smallest timed bucket above M; larger prefills and the LM head stay on
cuBLAS. The choices are fixed for the engine's life (engine.stats.gemm_choices); `plan_key`,
`plan_to_json` and `plan_from_json` keep a plan in the start-up cache, and gemm_plans/ ships plans measured
on our GPUs.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

PROJECTIONS = ("qkv", "o", "mlp")  # mlp: gate_up, SwiGLU and down, timed as one unit
MAX_ROWS = 64  # the kernel's limit, and where cuBLAS's tensor-core kernels take over anyway
MARGIN = 0.95  # Triton is chosen when it takes < 95% of cuBLAS's time


@dataclass(frozen=True)
class MlpChoice:
    """Where the MLP uses the Triton kernel: "gated" (gate_up with the SwiGLU product in its epilogue, cuBLAS
    down) or "swiglu_down" (cuBLAS gate_up, down with the SwiGLU product in its prologue)."""

    kind: str
    config: object  # SkinnyConfig

    def __str__(self) -> str:
        return f"{self.kind} {self.config}"


@dataclass
class GemmPlan:
    """(projection, rows) -> the Triton config (MlpChoice for "mlp") to use; absent: cuBLAS."""

    act_mul: Callable  # ops.silu_mul (or ops.gelu_tanh_mul for Gemma), for the all-cuBLAS MLP
    choices: dict = field(default_factory=dict)  # {(name, rows): SkinnyConfig | MlpChoice}
    counters: torch.Tensor | None = None  # the split-K tile counters every Triton launch shares (zero between)
    activation: str = "silu"  # what act_mul computes, fused by the Triton MLP forms: "silu" or "gelu_tanh"
    buckets: tuple[int, ...] = ()  # the row counts timed (<= MAX_ROWS)

    def choice(self, name: str, rows: int):
        """The choice at `rows`: its own, or for rows that are no timed bucket (a packed decode step's rows +
        booked positions: forced_runs.py) the smallest timed bucket's above them; None: cuBLAS."""
        if (name, rows) in self.choices:
            return self.choices[(name, rows)]
        above = [b for b in self.buckets if b >= rows]
        return self.choices.get((name, min(above))) if above else None

    def linear(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, name: str) -> torch.Tensor:
        config = self.choice(name, x.shape[0]) if bias is None else None
        if config is None:
            return F.linear(x, w, bias)
        from inferlab.engine.kernels.triton_gemm import skinny_linear

        return skinny_linear(x, w, config, counters=self.counters)

    def mlp(self, h: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
        """(act(h @ gate^T) * (h @ up^T)) @ w_down^T for h [T, hidden] -> [T, hidden]."""
        choice = self.choice("mlp", h.shape[0])
        if choice is None:
            return F.linear(self.act_mul(F.linear(h, w_gate_up)), w_down)
        from inferlab.engine.kernels.triton_gemm import skinny_linear

        act, counters = self.activation, self.counters
        if choice.kind == "gated":
            return F.linear(skinny_linear(h, w_gate_up, choice.config, counters=counters, gated=True, activation=act),
                            w_down)  # fmt: skip
        return skinny_linear(F.linear(h, w_gate_up), w_down, choice.config, swiglu=True, counters=counters,
                             activation=act)  # fmt: skip

    def describe(self, buckets: list[int]) -> dict[str, str]:
        return {
            f"{name}@{rows}": str(self.choices.get((name, rows), "cublas"))
            for rows in buckets
            if rows <= MAX_ROWS
            for name in PROJECTIONS
        }


def plan_key(weights, buckets: list[int], device: torch.device, activation: str = "silu") -> dict:
    """Everything a timed plan depends on (the start-up cache's key); `activation`: GemmPlan.activation (the
    Triton MLP forms fuse it, so a GeGLU model's timings are not a SwiGLU model's of the same shapes)."""
    import triton

    from inferlab.engine.kernels import triton_gemm, triton_math
    from inferlab.engine.startup_cache import source_fingerprint

    props = torch.cuda.get_device_properties(device)
    return {
        "gpu": props.name,
        "capability": list(torch.cuda.get_device_capability(device)),
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "code": source_fingerprint(sys.modules[__name__], triton_gemm, triton_math),  # triton_math: the activations
        "layers": len(weights.layers),
        **model_fields(weights, activation),
        "buckets": [b for b in buckets if b <= MAX_ROWS],
    }


def model_fields(weights, activation: str) -> dict:
    """What a plan's timings depend on in the model: the dtype, the projections' shapes, a qkv bias (cuBLAS
    then keeps qkv) and the MLP's activation (the Triton MLP forms fuse it)."""
    layer = weights.layers[0]
    return {
        "dtype": str(layer.qkv.dtype).removeprefix("torch."),
        "shapes": {name: list(getattr(layer, name).shape) for name in ("qkv", "o", "gate_up", "down")},
        "qkv_bias": layer.qkv_bias is not None,
        "activation": activation,
    }


def plan_to_json(plan: GemmPlan, timings: dict) -> dict:
    """The plan's choices and timings as JSON values (plan_from_json reads them back)."""
    from dataclasses import asdict

    choices = {}
    for (name, rows), choice in plan.choices.items():
        if isinstance(choice, MlpChoice):
            choices[f"{name}@{rows}"] = {"kind": choice.kind, **asdict(choice.config)}
        else:
            choices[f"{name}@{rows}"] = {"kind": "linear", **asdict(choice)}
    return {"choices": choices, "timings": timings, "activation": plan.activation}


def plan_from_json(
    value: dict, act_mul: Callable, weights, device: torch.device, activation: str = "silu"
) -> tuple[GemmPlan, dict]:
    """A plan stored by plan_to_json for a model whose MLP computes `activation` (act_mul: GemmPlan's);
    raises ValueError when the entry does not describe a valid plan for it."""
    from inferlab.engine.kernels.triton_gemm import SkinnyConfig

    plan = _empty_plan(weights, act_mul, device, activation)
    try:
        if value.get("activation", "silu") != activation:
            raise ValueError(f"timed for activation {value.get('activation')!r}, the model's is {activation!r}")
        for label, entry in value["choices"].items():
            name, rows = label.split("@")
            entry = dict(entry)
            kind = entry.pop("kind")
            config = SkinnyConfig(**entry)
            if name not in PROJECTIONS or not 0 < int(rows) <= MAX_ROWS or config.block_n < 16:
                raise ValueError(f"unknown choice {label}")
            if (name == "mlp") != (kind in ("gated", "swiglu_down")) or kind not in ("linear", "gated", "swiglu_down"):
                raise ValueError(f"choice {label} has kind {kind!r}")
            plan.choices[(name, int(rows))] = MlpChoice(kind, config) if name == "mlp" else config
        timings = dict(value["timings"])
        plan.buckets = tuple(sorted({int(label.split("@")[1]) for label in timings}))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"not a GEMM plan ({e})") from None
    return plan, timings


def candidate_configs(n: int, k: int, rows: int, sm_count: int) -> list:
    """A few tiles per shape: 16 to 64 weight rows per program over the whole K, and one split-K tile for a
    narrow output over a long K (down: few output tiles)."""
    from inferlab.engine.kernels.triton_gemm import SkinnyConfig

    configs = [SkinnyConfig(16, 256 if rows <= 16 else 128, 1), SkinnyConfig(32, 128, 1), SkinnyConfig(64, 128, 1)]
    tiles, split = -(-n // 32), 1
    while tiles * split < sm_count and split < 8 and k // (2 * split) >= 128:
        split *= 2
    if split > 1:
        configs.append(SkinnyConfig(32, 128, split, num_stages=3))
    return configs


def tune_gemm_plan(
    weights, buckets: list[int], act_mul: Callable, device: torch.device, activation: str = "silu"
) -> tuple[GemmPlan, dict]:
    """Time cuBLAS against the Triton candidates for each projection and bucket <= MAX_ROWS; returns the plan
    and the timings {"name@rows": {impl: us}}. act_mul / activation: the MLP's gate product (GemmPlan)."""
    plan = _empty_plan(weights, act_mul, device, activation)
    plan.buckets = tuple(b for b in buckets if b <= MAX_ROWS)
    layers = weights.layers
    timings: dict[str, dict[str, float]] = {}
    flush = torch.empty(96 * 1024**2 // 4, dtype=torch.float32, device=device)  # 96 MB: > the L2 of an H100/H200
    side = torch.cuda.Stream()  # one warm-up stream for every timing: each new stream gets its own cuBLAS workspace
    baseline_us = _graph_us(None, len(layers), flush)  # the flushes alone
    for name, rows, options in _cells(weights, buckets, plan):
        cell = {label: _time_us(fn, len(layers), flush, baseline_us, side) for label, (fn, _) in options.items()}
        timings[f"{name}@{rows}"] = cell
        best = min((label for label in cell if label != "cublas"), key=cell.get)
        if cell[best] < MARGIN * cell["cublas"]:
            plan.choices[(name, rows)] = options[best][1]
    del flush
    log.info("GEMM plan: %s", {f"{name}@{rows}": str(c) for (name, rows), c in plan.choices.items()} or "cuBLAS only")
    return plan, timings


def launch_candidates(weights, buckets: list[int], act_mul: Callable, device: torch.device,
                      activation: str = "silu") -> None:
    """Every option tune_gemm_plan times, run once on the first layer: the kernels the timing compiles. The
    start-up's precompile runs it on meta tensors (kernel_precompile.py) when the engine will time its plan."""
    for _, _, options in _cells(weights, buckets, _empty_plan(weights, act_mul, device, activation)):
        for fn, _ in options.values():
            fn(0)


def _empty_plan(weights, act_mul: Callable, device: torch.device, activation: str) -> GemmPlan:
    """cuBLAS everywhere, with the split-K tile counters every Triton choice of the plan shares."""
    from inferlab.engine.kernels.triton_gemm import tile_counters

    plan = GemmPlan(act_mul, activation=activation)
    layer = weights.layers[0]
    widest = max(layer.qkv.shape[0], layer.o.shape[0], layer.gate_up.shape[0])
    plan.counters = tile_counters(widest, 16, device)  # 16: candidate_configs' narrowest tile
    return plan


def _cells(weights, buckets: list[int], plan: GemmPlan) -> Iterator[tuple[str, int, dict]]:
    """(projection, rows, options) of each cell the timing measures: every projection at every bucket <=
    MAX_ROWS, but qkv with a bias (Qwen2: cuBLAS's fused epilogue)."""
    from inferlab.engine.kernels.device_props import sm_count

    layers = weights.layers
    device, dtype = layers[0].qkv.device, layers[0].qkv.dtype
    sms = sm_count(device, cpu_value=8)
    for rows in [b for b in buckets if b <= MAX_ROWS]:
        for name in PROJECTIONS:
            if name != "qkv" or layers[0].qkv_bias is None:
                yield name, rows, _options(name, layers, rows, dtype, device, sms, plan)


def _options(name: str, layers, rows: int, dtype, device, sm_count: int, plan: GemmPlan) -> dict:
    """{label: (fn(layer index), the choice it stands for)} for one projection at one bucket; "cublas" first."""
    from inferlab.engine.kernels.triton_gemm import skinny_linear

    act_mul, act, counters = plan.act_mul, plan.activation, plan.counters
    if name != "mlp":
        mats = [layer.qkv if name == "qkv" else layer.o for layer in layers]
        n, k = mats[0].shape
        x = torch.randn(rows, k, device=device).to(dtype)
        options = {"cublas": (lambda i: F.linear(x, mats[i]), None)}
        for c in candidate_configs(n, k, rows, sm_count):
            options[str(c)] = (lambda i, c=c: skinny_linear(x, mats[i], c, counters=counters), c)
        return options
    gate_up, down = [layer.gate_up for layer in layers], [layer.down for layer in layers]
    inter, hidden = gate_up[0].shape[0] // 2, gate_up[0].shape[1]
    h = torch.randn(rows, hidden, device=device).to(dtype)
    options = {"cublas": (lambda i: F.linear(act_mul(F.linear(h, gate_up[i])), down[i]), None)}
    for c in candidate_configs(inter, hidden, rows, sm_count):
        if c.split_k == 1:
            choice = MlpChoice("gated", c)
            options[str(choice)] = (
                lambda i, c=c: F.linear(
                    skinny_linear(h, gate_up[i], c, counters=counters, gated=True, activation=act), down[i]
                ),
                choice,
            )
    for c in candidate_configs(hidden, inter, rows, sm_count):
        choice = MlpChoice("swiglu_down", c)
        options[str(choice)] = (
            lambda i, c=c: skinny_linear(
                F.linear(h, gate_up[i]), down[i], c, swiglu=True, counters=counters, activation=act
            ),
            choice,
        )
    return options


def _time_us(fn: Callable[[int], torch.Tensor], layers: int, flush: torch.Tensor, baseline_us: float,
             side: torch.cuda.Stream) -> float:
    """Device time of one call of fn(layer), the L2 flushed before each call, in a CUDA graph (no host
    overhead): (graph of flush + call for every layer - the flushes' own time) per call. `side`: where fn is
    compiled and warmed up, outside the capture and off the capture stream (cuBLAS)."""
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(layers):
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    return max(0.0, _graph_us(fn, layers, flush) - baseline_us) / layers


def _graph_us(fn, layers: int, flush: torch.Tensor) -> float:
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(layers):
            flush.zero_()
            if fn is not None:
                fn(i)
    graph.replay()  # warm
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / 3
