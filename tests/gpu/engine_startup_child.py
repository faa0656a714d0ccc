"""One engine start-up in a fresh process, for test_startup_cache_gpu.py: prints one JSON line with the
engine's start-up stats and the process's time before it (interpreter and imports). Triton's disk cache is
the caller's TRITON_CACHE_DIR.

    python tests/gpu/engine_startup_child.py MODEL_DIR CACHE_DIR MAX_SEQ_LEN [--no-precompile] [--no-shipped]
"""

import time

PROCESS_START = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402

from inferlab.engine import Engine, EngineConfig  # noqa: E402

model, cache_dir, max_seq_len = sys.argv[1], sys.argv[2], int(sys.argv[3])
precompile = "--no-precompile" not in sys.argv[4:]
shipped_kernels = "--no-shipped" not in sys.argv[4:]
before_engine_s = time.perf_counter() - PROCESS_START
with Engine(EngineConfig(model=model, device="cuda", max_seq_len=max_seq_len, cache_dir=cache_dir,
                         precompile=precompile, shipped_kernels=shipped_kernels)) as engine:
    stats = engine.stats.as_dict()
stats.pop("gemm_choices")
print(json.dumps({"before_engine_s": before_engine_s, "stats": stats}))
