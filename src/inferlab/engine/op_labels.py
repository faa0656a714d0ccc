"""Every operation of the engine's decode step inside a range named after its kernel family, so that a profiler
can tell which kernels belong to which part of the step (DecodeStepProbe.labelled; the bench's decode-profile
scenario opens the ranges and reads the profile).

`labelled_ops(runner, range_for)`: while inside, the runner's model and sampler call an op set (ops.py Ops)
whose every operation runs inside `range_for(family)`; the GEMM plan's projections (`gemm qkv`, `gemm o`,
`gemm mlp`: gate_up, the activation and down) and the LM head (`gemm lm_head`) are wrapped the same way, and so
is the step's work outside the op set: in a constrained step the constraint's hooks (`constraint`: the mask,
the forced rows, emit's choose and advance, the pressure they measure; hooks.py), except the fused race, which
draws the token with the mask in registers in place of the sampler's race (`sampling`), and in a packed step
(forced_runs.py) the booking and packing (`forced runs`) and the booked tokens' pressure (`forced pressure`).
On the way out the runner, its model, its features and its ForcedRuns get their own op set, GEMM plan, LM head,
hooks and methods back. Only eager steps see the labels: a captured graph replays the kernels it recorded.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import Any, Callable, ContextManager, Iterator

RangeFactory = Callable[[str], ContextManager[Any]]  # family -> the range its operations run in

OP_FAMILIES = {  # ops.Ops fields -> family
    "embed_rms_norm": "norm", "rms_norm": "norm", "add_rms_norm": "norm", "add_steer_rms_norm": "norm",
    "decode_rope_attention": "attention", "decode_packed_attention": "attention", "rope_qkv": "attention",
    "silu_mul": "gemm mlp", "gelu_tanh_mul": "gemm mlp", "sampling_logits": "sampling", "filter_threshold": "sampling",
    "race_argmax": "sampling", "top_p_draw": "sampling", "mask_stops": "bookkeeping", "record": "bookkeeping",
    "collect_rows": "other",
}  # fmt: skip
PROJECTIONS = ("qkv", "o")  # the names the forwards give GemmPlan.linear
LM_HEAD = "gemm lm_head"
CONSTRAINT = "constraint"  # the constraint's hooks (its fused race apart: the draw, `sampling`)
FORCED_RUNS = "forced runs"  # ForcedRuns.pack: a packed step's booking and the layout of its positions
FORCED_PRESSURE = "forced pressure"  # ForcedRuns.measure: the booked tokens' pressure from the bulk logits
LABELS = tuple(sorted({*OP_FAMILIES.values(), *(f"gemm {p}" for p in PROJECTIONS), "gemm mlp", LM_HEAD, CONSTRAINT,
                       FORCED_RUNS, FORCED_PRESSURE}))


def _ranged(fn: Callable, family: str, range_for: RangeFactory) -> Callable:
    def call(*args, **kwargs):
        with range_for(family):
            return fn(*args, **kwargs)

    return call


class _LabelledGemm:
    """A GemmPlan whose projections run inside their family's range (everything else is the plan's)."""

    def __init__(self, plan: Any, range_for: RangeFactory) -> None:
        self._plan = plan
        self._range_for = range_for

    def linear(self, x, w, bias, name: str):
        with self._range_for(f"gemm {name}"):
            return self._plan.linear(x, w, bias, name)

    def mlp(self, h, w_gate_up, w_down):
        with self._range_for("gemm mlp"):
            return self._plan.mlp(h, w_gate_up, w_down)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._plan, name)


class _LabelledHooks:
    """A constraint's hooks (hooks.ConstraintHooks) inside the `constraint` range; the race its fused_race gives
    inside `sampling`: it is the step's draw, reading the logits once as the sampler's race does."""

    def __init__(self, hooks: Any, range_for: RangeFactory) -> None:
        self.mask_logits = _ranged(hooks.mask_logits, CONSTRAINT, range_for)
        self.forced_rows = _ranged(hooks.forced_rows, CONSTRAINT, range_for)
        self.emit = _ranged(hooks.emit, CONSTRAINT, range_for)
        self._fused_race, self._range_for = hooks.fused_race, range_for

    def fused_race(self, *args, **kwargs):
        race = self._fused_race(*args, **kwargs)
        return None if race is None else _ranged(race, "sampling", self._range_for)


@contextmanager
def labelled_ops(runner: Any, range_for: RangeFactory) -> Iterator[None]:
    """The runner's model and sampler operations in their families' ranges while inside (module docstring)."""
    model, features, forced = runner.model, runner.features, runner.forced_runs
    model_ops, runner_ops, gemm = model.ops, runner.ops, model.gemm
    ops = dataclasses.replace(runner_ops, **{name: _ranged(getattr(runner_ops, name), family, range_for)
                                             for name, family in OP_FAMILIES.items()})
    model.ops = runner.ops = ops
    model.gemm = _LabelledGemm(gemm, range_for)
    # instance attributes in front of the methods, deleted on the way out
    has_head = hasattr(model, "_logits")
    if has_head:
        model._logits = _ranged(model._logits, LM_HEAD, range_for)
    hooks_of = features.logits_hooks  # unconstrained steps keep NO_CONSTRAINTS: no empty ranges around its no-ops
    features.logits_hooks = lambda variant: (_LabelledHooks(hooks_of(variant), range_for) if variant.constrained
                                             else hooks_of(variant))
    if forced is not None:
        forced.pack = _ranged(forced.pack, FORCED_RUNS, range_for)
        forced.measure = _ranged(forced.measure, FORCED_PRESSURE, range_for)
    try:
        yield
    finally:
        model.ops, runner.ops, model.gemm = model_ops, runner_ops, gemm
        if has_head:
            del model._logits
        del features.logits_hooks
        if forced is not None:
            del forced.pack, forced.measure
