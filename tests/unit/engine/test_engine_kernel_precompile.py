"""The start-up's kernel precompile (engine/kernel_precompile.py), without a GPU: its dry run of the warm-up on
meta tensors asks the Triton JIT for exactly the specialisations the real warm-up launches (recorded by
tests/unit/engine/triton_launch_recorder.py with Triton's own argument binder for an sm_90 target), the
background thread reports instead of raising, and launches are diverted in the diverting thread only."""

from __future__ import annotations

import logging
import threading

import pytest
import torch

pytest.importorskip("triton")

from inferlab.engine import gemm_plan as gp  # noqa: E402
from inferlab.engine.jit_compiles import jit_compiles_counted  # noqa: E402
from inferlab.engine.kernel_precompile import (  # noqa: E402
    DryCapturer,
    DryRun,
    KernelPrecompile,
    divert_launches,
)
from inferlab.engine.kernels.device_props import meta_stands_for, sm_count  # noqa: E402
from inferlab.engine.ops import OPS_BUILDERS  # noqa: E402
from inferlab.engine.runner import ModelRunner  # noqa: E402
from inferlab.models.config import read_model_spec  # noqa: E402
from inferlab.models.loader import load_weights  # noqa: E402
from inferlab.engine.forwards.registry import forward_class  # noqa: E402
from tests.unit.engine.triton_launch_recorder import LaunchRecorder  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

CPU = torch.device("cpu")
SLOTS, MAX_LEN, PREFILL_TOKENS = 16, 48, 64
# Triton GEMM choices at the eager warm prefill's one token and at the largest decode bucket (SLOTS)
PLAN = {"choices": {"mlp@1": {"kind": "gated", "block_n": 32, "block_k": 128, "split_k": 1},
                    "qkv@16": {"kind": "linear", "block_n": 16, "block_k": 128, "split_k": 1},
                    "mlp@16": {"kind": "swiglu_down", "block_n": 32, "block_k": 128, "split_k": 2, "num_stages": 3}},
        "timings": {}, "activation": "silu"}


def _dry_run(path, kv_dtype: torch.dtype, use_graphs: bool, plan: dict | str | None) -> DryRun:
    """plan: the stored plan's JSON, "timed" (none stored: the engine times one) or None (gemm="cublas")."""
    spec = read_model_spec(path)
    stored = None if plan == "timed" else plan
    return DryRun(spec, forward_class(spec.architecture), OPS_BUILDERS["triton"](), torch.bfloat16,
                  kv_dtype, SLOTS, MAX_LEN, PREFILL_TOKENS, 8, True, use_graphs,
                  (lambda weights, buckets, activation: stored) if plan is not None else None)  # fmt: skip


def _real_launches(path, dry: DryRun, plan: dict | str | None) -> LaunchRecorder:
    """What the engine's start-up launches (Engine._gemm_plan: the timing's candidates when it times, then
    ModelRunner.warm_up) over the checkpoint's real weights on the CPU, every Triton launch recorded and
    skipped. A timed plan's choices are among its candidates: the warm-up here runs cuBLAS."""
    weights = load_weights(path, dry.spec, torch.bfloat16, CPU)
    runner = ModelRunner.build(dry.spec, dry.model_class, weights, dry.ops, dry.kv_dtype, SLOTS, MAX_LEN, 8, True)
    gemm = runner.model.gemm
    recorder = LaunchRecorder()
    with torch.inference_mode(), divert_launches(recorder):
        if plan == "timed":
            gp.launch_candidates(weights, runner.sizes, gemm.act_mul, CPU, gemm.activation)
        elif plan is not None:
            runner.model.gemm, _ = gp.plan_from_json(plan, gemm.act_mul, weights, CPU, gemm.activation)
        runner.warm_up(MAX_LEN, PREFILL_TOKENS, dry.use_graphs, DryCapturer())
    return recorder


def _dry_launches(dry: DryRun) -> LaunchRecorder:
    recorder = LaunchRecorder()
    with torch.inference_mode(), meta_stands_for(CPU), divert_launches(recorder):
        dry.warm_up()
    return recorder


@pytest.mark.parametrize("preset, kv_dtype, use_graphs, plan", [
    ("tiny", torch.bfloat16, True, PLAN),  # Llama, the graph path, Triton GEMM choices
    ("tiny-gemma3", torch.float8_e4m3fn, True, None),  # q/k norms, (1 + w), windows, post-norms, the fp8 cache
    ("tiny-gemma2", torch.bfloat16, False, "timed"),  # soft-caps, GeGLU candidates; no graphs: no decode step
])  # fmt: skip
def test_the_dry_run_asks_for_exactly_what_the_warm_up_launches(tiny_checkpoint, preset, kv_dtype, use_graphs, plan):
    path = tiny_checkpoint(preset)
    dry = _dry_run(path, kv_dtype, use_graphs, plan)
    real = _real_launches(path, dry, plan)
    kernels = {name.rsplit(".", 1)[-1] for name, _ in real.keys}
    assert {"_rope_qkv_kernel", "_race_kernel", "_copy_prefix_kernel"} <= kernels
    assert ("_rope_attention_kernel" in kernels) == use_graphs  # the decode step runs in the graphs' capture
    assert ("_skinny_kernel" in kernels) == (plan is not None)
    if plan == "timed":  # the candidate tiles of the three forms (plain, gated, SwiGLU-down), not one plan's
        assert sum(name.endswith("_skinny_kernel") for name, _ in real.keys) >= 9
    assert _dry_launches(dry).keys == real.keys
    other_cache = torch.float8_e4m3fn if kv_dtype == torch.bfloat16 else torch.bfloat16
    assert _dry_launches(_dry_run(path, other_cache, use_graphs, plan)).keys != real.keys  # the record tells


def test_the_background_precompile_reports_what_it_did_and_never_raises(tiny_checkpoint, caplog):
    dry = _dry_run(tiny_checkpoint("tiny"), torch.bfloat16, True, None)
    recorder = LaunchRecorder()
    report = KernelPrecompile(dry, CPU, sink=recorder).wait()
    assert report.error == "" and report.wait_s >= 0 and report.wall_s > 0 and recorder.launches
    assert recorder.keys == _dry_launches(dry).keys  # the thread's launches, meta standing for the engine's device
    broken = DryRun(*[getattr(dry, f) for f in ("spec", "model_class", "ops", "dtype", "kv_dtype", "slots")],
                    max_seq_len=0, max_prefill_tokens=PREFILL_TOKENS, max_stop_ids=8, share_prompts=True,
                    use_graphs=True, gemm_plan=None)  # no positions: the dry run fails early
    with caplog.at_level(logging.WARNING):
        report = KernelPrecompile(broken, CPU, sink=LaunchRecorder()).wait()
    assert report.error and "the warm-up compiles the rest" in caplog.text


def test_launches_are_diverted_in_the_diverting_thread_only(tiny_checkpoint):
    from inferlab.engine.kernels.triton_norm import silu_mul

    x = torch.zeros(2, 64, dtype=torch.bfloat16)
    recorder, elsewhere = LaunchRecorder(), []

    def other_thread():
        try:
            silu_mul(x)  # a real launch: without a GPU the JIT itself fails, and nothing is recorded
        except Exception as e:
            elsewhere.append(e)

    with divert_launches(recorder):
        silu_mul(x)
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert len(recorder.launches) == 1 and len(elsewhere) == 1
    with pytest.raises(Exception):
        silu_mul(x)  # the divert ended with its block


def test_meta_tensors_size_grids_for_the_device_they_stand_for():
    meta = torch.device("meta")
    assert sm_count(meta, cpu_value=8) == 8  # nothing said: the CPU's value
    with meta_stands_for(CPU):
        assert sm_count(meta, cpu_value=1) == 1
    if torch.cuda.is_available():
        cuda = torch.device("cuda", torch.cuda.current_device())
        with meta_stands_for(cuda):
            assert sm_count(meta, 8) == torch.cuda.get_device_properties(cuda).multi_processor_count


def test_jit_compiles_are_counted_through_the_jits_hooks_and_earlier_hooks_kept():
    from triton import knobs

    calls = []
    knobs.runtime.jit_cache_hook = lambda **kw: calls.append("pre") or False
    knobs.runtime.jit_post_compile_hook = None
    try:
        with jit_compiles_counted() as counted:
            for _ in range(2):  # what JITFunction._do_compile does around each compile
                assert not knobs.runtime.jit_cache_hook(key="k")
                knobs.runtime.jit_post_compile_hook(key="k")
        assert counted.count == 2 and counted.seconds >= 0 and calls == ["pre", "pre"]
        assert knobs.runtime.jit_post_compile_hook is None and knobs.runtime.jit_cache_hook(key="k") is False
    finally:
        knobs.runtime.jit_cache_hook = None


def test_the_compile_pool_counts_compiles_and_failures():
    from inferlab.engine.kernel_precompile import _CompilePool

    def failing():
        raise RuntimeError("ptxas fatal")

    pool = _CompilePool(2, CPU)  # on the CPU nothing is loaded after a compile
    done = [pool.submit(lambda: "kernel") for _ in range(3)] + [pool.submit(failing)]
    pool.shutdown(wait=True)
    assert [f.result() for f in done[:3]] == ["kernel"] * 3 and isinstance(done[3].exception(), RuntimeError)
    assert pool.count == 4 and pool.busy_s >= 0 and pool.failures == ["RuntimeError: ptxas fatal"]
