"""The engine's cold start, each start-up in a fresh process (engine_startup_child.py):
1. a fresh machine: empty start-up and Triton caches (TRITON_CACHE_DIR in a new folder). The GEMM plan comes
   from the package's shipped plans where this GPU and software are covered (else it is timed and stored);
   the precompile thread unpacks the package's kernel bundle where it covers this GPU, software and job
   (engine/kernel_bundles/: then nothing compiles and the warm-up reads its kernels from Triton's cache), else
   it compiles every Triton kernel the warm-up launches while the weights load, so the warm-up compiles
   none on the critical path; the same without the bundle (shipped_kernels=False) for comparison;
2. the same job's next run, both caches kept: the GEMM plan from the start-up cache (or shipped again: a
   shipped plan is not copied into the cache), the precompile skipped (its record's kernel files are all in
   Triton's cache: engine/precompile_record.py), the warm-up reading its kernels from Triton's disk cache;
3. Triton's cache emptied, the start-up cache (and the precompile's record) kept: the precompile runs again
   and the warm-up compiles nothing;
4. (full size) a fresh machine starting a job the bundle has no record of (64 positions shorter): the
   bundle's files unpacked, the dry run compiling what they lack; and one with the precompile off, for
   comparison: its warm-up compiles every kernel.
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


def start_engine(label: str, model: Path, caches: Path, max_seq_len: int, precompile: bool = True,
                 shipped: bool = True) -> dict:
    """One child's stats, with its start-up phases printed."""
    env = dict(os.environ, TRITON_CACHE_DIR=str(caches / "triton"))
    command = [sys.executable, str(CHILD), str(model), str(caches / "inferlab"), str(max_seq_len)]
    flags = ([] if precompile else ["--no-precompile"]) + ([] if shipped else ["--no-shipped"])
    done = subprocess.run(command + flags, capture_output=True, text=True, env=env, timeout=300)
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
          f"{'; shipped kernels: ' + s['precompile_shipped'] if s['precompile_shipped'] else ''}"
          f"{' ' + s['precompile_error'] if s['precompile_error'] else ''}"
          f"{'; skipped: ' + s['precompile_skipped'] if s['precompile_skipped'] else ''}")
    return s


def check_fresh_start(s: dict) -> None:
    """A start-up whose precompile ran: no kernel left for the warm-up to compile. Where the package's bundle
    held every kernel, the warm-up read each from Triton's cache (a JIT miss each, no compile)."""
    assert s["precompile_error"] == "" and s["precompile_kernels"] >= 10 and not s["precompile_skipped"]
    if s["precompile_shipped"] == "all":
        assert 0 < s["warmup_compiles"] <= s["precompile_kernels"]
    else:
        assert s["warmup_compiles"] == 0, "the warm-up compiled kernels the precompile missed"


def test_a_fresh_machine_compiles_the_warm_up_beside_the_weights_and_the_rerun_reads_the_caches(size, checkpoint,
                                                                                                tmp_path):
    model, max_seq_len = checkpoint(size.pick("tiny-qwen3", "qwen3-0.6b")), size.pick(256, 1704)
    fresh = start_engine("fresh machine", model, tmp_path / "machine", max_seq_len)
    check_fresh_start(fresh)
    rerun = start_engine("rerun", model, tmp_path / "machine", max_seq_len)
    assert rerun["gemm_plan_source"] in ("cache", "shipped")
    assert rerun["precompile_skipped"] and rerun["precompile_kernels"] == 0, "the rerun ran the precompile again"
    # its warm-up read the kernels from Triton's disk cache (a JIT miss each, no compile)
    assert 0 < rerun["warmup_compiles"] <= fresh["precompile_kernels"]
    shutil.rmtree(tmp_path / "machine" / "triton")
    emptied = start_engine("Triton's cache emptied", model, tmp_path / "machine", max_seq_len)
    check_fresh_start(emptied)
    compiled = start_engine("fresh machine, no kernel bundle", model, tmp_path / "compiling", max_seq_len,
                            shipped=False)
    check_fresh_start(compiled)
    assert not compiled["precompile_shipped"]
    if size.full:
        # a job the bundle has no record of (another row length): its files in the cache, the dry run reads them
        other = start_engine("fresh machine, a job the bundle lacks", model, tmp_path / "other", max_seq_len - 64)
        check_fresh_start(other)
        start_engine("fresh machine, no precompile", model, tmp_path / "bare", max_seq_len, precompile=False)
        assert fresh["startup_s"] <= FRESH_TARGET_S and rerun["startup_s"] <= RERUN_TARGET_S, (
            f"Engine() fresh {fresh['startup_s']:.2f} s (target {FRESH_TARGET_S}), rerun {rerun['startup_s']:.2f} s "
            f"(target {RERUN_TARGET_S}; tokenizer {rerun['tokenizer_s']:.2f} s)")
