"""The engine started twice, each in a fresh process, sharing one start-up cache folder: the first times
the GEMM plan and stores it, the second (the same job's next run) reads it back. Each child prints
Engine()'s phases (CUDA context, weights, tokenizer, allocation, GEMM plan and its source, warm-up, graphs)
and its time before the engine; the test prints them (pytest -s). Quick: tiny-qwen3 at 256 positions;
full: qwen3-0.6b at the conformer job's 1,704. Start-up speed on the real job: the lab's
conformer-pipeline preset (`rerun_engine_start_s`, docs/lab.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpu_testkit import CUDA_ONLY

pytestmark = CUDA_ONLY
CHILD = Path(__file__).with_name("engine_startup_child.py")


def test_second_process_reads_the_gemm_plan_from_the_startup_cache(size, checkpoint, tmp_path):
    model = checkpoint(size.pick("tiny-qwen3", "qwen3-0.6b"))
    runs = []
    for label in ("first", "second"):
        done = subprocess.run([sys.executable, str(CHILD), str(model), str(tmp_path / "cache"),
                               str(size.pick(256, 1704))], capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        s = runs[-1]["stats"]
        print(f"{label} process: imports {runs[-1]['before_engine_s']:.1f} s, Engine() {s['startup_s']:.2f} s: CUDA "
              f"{s['device_init_s']:.1f} / weights {s['load_s']:.1f} / tokenizer {s['tokenizer_s']:.1f} / alloc "
              f"{s['allocate_s']:.1f} / GEMM {s['gemm_tune_s']:.1f} ({s['gemm_plan_source']}) / warm-up "
              f"{s['warmup_s']:.1f} / capture {s['capture_s']:.1f}")
    assert runs[0]["stats"]["gemm_plan_source"] == "timed"
    assert runs[1]["stats"]["gemm_plan_source"] == "cache"
