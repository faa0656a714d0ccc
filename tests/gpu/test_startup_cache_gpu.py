"""The engine's cold start, each start-up in a fresh process (engine_startup_child.py):
1. a fresh machine: empty start-up and Triton caches (TRITON_CACHE_DIR in a new folder). The GEMM plan comes
   from the package's shipped plans where this GPU and software are covered (else it is timed and stored);
   the background precompile compiles every Triton kernel the warm-up launches while the weights load, so
   the warm-up compiles none on the critical path;
2. the same job's next run, both caches kept: the GEMM plan from the start-up cache (or shipped again: a
   shipped plan is not copied into the cache), the precompile skipped (its record's kernel files are all in
   Triton's cache: engine/precompile_record.py), the warm-up reading its kernels from Triton's disk cache;
3. Triton's cache emptied, the start-up cache (and the precompile's record) kept: the precompile runs again
   and the warm-up compiles nothing;
4. (full size) a fresh machine with the precompile off, for comparison: its warm-up compiles every kernel.
Each start-up's phases are printed (pytest -s): CUDA context, weights, tokenizer, allocation, the precompile
and what start-up waited for it, GEMM plan and its source, warm-up and its compiles, graphs; and the time
before the engine (interpreter and imports). Quick: tiny-qwen3 at 256 positions; full: qwen3-0.6b at the
conformer job's 1,704, where Engine() must take <= 8 s on a fresh machine and <= 5 s on the rerun.
The precompile on the real compiler without a GPU: test_precompile_aot_gpu.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gpu_testkit import CUDA_ONLY

pytestmark = CUDA_ONLY
CHILD = Path(__file__).with_name("engine_startup_child.py")
FRESH_TARGET_S, RERUN_TARGET_S = 8.0, 5.0


def start_engine(label: str, model: Path, caches: Path, max_seq_len: int, precompile: bool = True) -> dict:
    """One child's stats, with its start-up phases printed."""
    env = dict(os.environ, TRITON_CACHE_DIR=str(caches / "triton"))
    command = [sys.executable, str(CHILD), str(model), str(caches / "inferlab"), str(max_seq_len)]
    done = subprocess.run(command + ([] if precompile else ["--no-precompile"]), capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    s = out["stats"]
    print(f"{label}: imports {out['before_engine_s']:.1f} s, Engine() {s['startup_s']:.2f} s: CUDA "
          f"{s['device_init_s']:.1f} / weights {s['load_s']:.1f} / tokenizer {s['tokenizer_s']:.1f} / alloc "
          f"{s['allocate_s']:.1f} / GEMM {s['gemm_tune_s']:.1f} ({s['gemm_plan_source']}) / warm-up "
          f"{s['warmup_s']:.1f} ({s['warmup_compiles']} compiles, {s['warmup_compile_s']:.1f} s) / capture "
          f"{s['capture_s']:.1f}; precompile {s['precompile_kernels']} kernels in {s['precompile_s']:.1f} s "
          f"(threads {s['precompile_compile_s']:.1f} s, waited {s['precompile_wait_s']:.1f} s)"
          f"{' phases ' + str(s['precompile_phases']) if s['precompile_phases'] else ''}"
          f"{' ' + s['precompile_error'] if s['precompile_error'] else ''}"
          f"{'; skipped: ' + s['precompile_skipped'] if s['precompile_skipped'] else ''}")
    return s


def test_a_fresh_machine_compiles_the_warm_up_beside_the_weights_and_the_rerun_reads_the_caches(size, checkpoint,
                                                                                                tmp_path):
    model, max_seq_len = checkpoint(size.pick("tiny-qwen3", "qwen3-0.6b")), size.pick(256, 1704)
    fresh = start_engine("fresh machine", model, tmp_path / "machine", max_seq_len)
    rerun = start_engine("rerun", model, tmp_path / "machine", max_seq_len)
    assert fresh["precompile_error"] == "" and fresh["precompile_kernels"] >= 10
    assert fresh["warmup_compiles"] == 0, "the warm-up compiled kernels the precompile missed"
    assert fresh["gemm_plan_source"] in ("shipped", "timed") and not fresh["precompile_skipped"]
    assert rerun["gemm_plan_source"] in ("cache", "shipped")
    assert rerun["precompile_skipped"] and rerun["precompile_kernels"] == 0, "the rerun ran the precompile again"
    # its warm-up read the kernels from Triton's disk cache (a JIT miss each, no compile)
    assert 0 < rerun["warmup_compiles"] <= fresh["precompile_kernels"]
    shutil.rmtree(tmp_path / "machine" / "triton")
    emptied = start_engine("Triton's cache emptied", model, tmp_path / "machine", max_seq_len)
    assert not emptied["precompile_skipped"] and emptied["precompile_kernels"] >= 10
    assert emptied["warmup_compiles"] == 0
    if size.full:
        start_engine("fresh machine, no precompile", model, tmp_path / "bare", max_seq_len, precompile=False)
        assert fresh["startup_s"] <= FRESH_TARGET_S and rerun["startup_s"] <= RERUN_TARGET_S, (
            f"Engine() fresh {fresh['startup_s']:.2f} s (target {FRESH_TARGET_S}), rerun {rerun['startup_s']:.2f} s "
            f"(target {RERUN_TARGET_S}; tokenizer {rerun['tokenizer_s']:.2f} s)")
