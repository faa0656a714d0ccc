"""Scenario `decode-profile`: one decode step of the engine against its bound, kernel family by kernel family.

The engine's DecodeStepProbe sets the step up: `batch_size` rows of one prompt of `context_tokens - 1` random
ids admitted and prefilled (one prefill, the K/V copied to the other rows), so each row's attention reads
`context_tokens` positions, and their state frozen (every step reads and writes the same positions) while the
step is measured (decode_profile_run.py):
  step time     the decode step's CUDA-graph replays (eager steps on CPU), `warmup` steps first, then batches
                of 10 steps between device synchronisations until `min_repeats` and `min_duration_s`
  kernel time   `profile_steps` replays under torch.profiler: each kernel's device time, its family carried
                over from one eager step run with every operation in its family's profiler range
                (the probe's `labelled`; bench/step_profile.py); on CPU the aten ops' self times
  bound         each family's fewest bytes and FLOPs (bench/roofline.py) at the device's measured copy
                bandwidth, bf16 matrix rate and launch floor (bench/bandwidth.py, bench/device_limits.py,
                measured in the same run)
The row holds the per-family table (`families`: time, share of the step, achieved GB/s and TFLOP/s, % of the
bound, what bounds it, why a family misses it), the step's own bandwidth (weights + K/V over the step time,
as the engine's decode figure counts it), the top kernels, and where the profile came from; the replayed
step's kernels in order, with their families, go to RUN_DIR/profiles/<cell key>.json. `inferlab report`
renders the table (report_roofline.py).
"""

from __future__ import annotations

from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, common_knobs
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.errors import ConfigError

KNOBS = (
    Knob("batch_size", int, 16, "rows of the decode step (the engine's slots)", minimum=1),
    Knob("context_tokens", int, 330, "K/V positions each row attends over in the profiled step", minimum=2),
    Knob("kv_dtype", str, "auto", "KV cache: auto (the model dtype) or fp8 (e4m3 + per-position scales; CUDA >= 8.9)",
         choices=("auto", "fp8")),
    Knob("dtype", str, "bfloat16", "weights and activations", choices=("bfloat16", "float16", "float32")),
    Knob("temperature", float, 1.0, "sampling temperature (0 = greedy)", minimum=0.0),
    Knob("top_p", float, 1.0, "nucleus threshold (1.0: the plain race; < 1: top-p by rejection)", minimum=0.0),
    Knob("profile_steps", int, 5, "steps (graph replays) run under the profiler", minimum=1),
    Knob("tokenizer", str, "", "tokenizer folder for building a preset model ('' = the preset's own)"),
    *common_knobs(min_repeats=20, min_duration_s=0.3, warmup=5, repeats_help="timed batches of 10 steps"),
)


def validate(cell: Cell) -> None:
    c = cell.config
    if not 0.0 < c["top_p"] <= 1.0:
        raise ConfigError(f"top_p={c['top_p']} must be in (0, 1]; use 1.0 to disable it")
    assert cell.model is not None
    model_refs.check_text_model(cell.model, c["tokenizer"], "decode-profile")
    positions = model_refs.model_config(cell.model).get("max_position_embeddings")
    if positions and c["context_tokens"] > positions:
        raise ConfigError(f"context_tokens={c['context_tokens']} is beyond the model's {positions} positions; "
                          f"e.g. --set context_tokens={positions}")


def estimate_s(cell: Cell, accelerator: bool) -> float:
    """Process start and the engine's start-up (~20 s on a GPU, the GEMM plan cached after a model's first
    cell), the prefill, the device's ceilings once per run, then a few seconds of steps and profiles."""
    return 35.0 if accelerator else 15.0


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    from inferlab.bench.scenarios.decode_profile_run import profile_decode_step

    return profile_decode_step(cell, ctx)


SCENARIO = Scenario(
    name="decode-profile",
    description="one decode step of the engine against its bound: per kernel family, time, share, % of the bound",
    knobs=KNOBS,
    run=run,
    validate=validate,
    estimate_s=estimate_s,
    headline_metric="step_bandwidth_fraction",
    higher_is_better=True,
    workload_knobs=("batch_size", "context_tokens", "temperature", "top_p"),
    default_timeout_s=300.0,
)
