"""Does Triton's compile of our kernels run in parallel in threads, or is it held by the GIL?

    python benchmarks/checks/2026-12-04-compile-threads/compile_threads.py [--kernels 16 --workers 4]

The start-up's precompile (engine/kernel_precompile.py) compiles the warm-up's kernels in a thread pool, on the
premise that Triton's MLIR passes and ptxas release the GIL. On an H200 with Triton 3.6 its 32 kernels took
13.5 s of wall over 41.1 s of thread time, against 12.1 s compiled one after another by the warm-up
(checks/2026-12-03-h200-startup/startup.txt): no faster in threads. This compiles the same distinct kernel
cases (tests/gpu/triton_aot_kernels.py, sm_90, ahead of time: no GPU needed) three ways, each in a fresh
Triton cache: serially, in --workers threads, in --workers spawned processes (their import before the clock),
and prints the wall times and one JSON line. Threads near serial: the compile holds the GIL on this Triton,
and processes are the precompile's lever.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

AOT = Path(__file__).resolve().parents[3] / "tests" / "gpu"


def _cases(count: int) -> list[str]:
    sys.path.insert(0, str(AOT))
    from triton_aot_kernels import kernel_cases

    names = [case[0] for case in kernel_cases(True)]
    step = max(1, len(names) // count)
    return names[::step][:count]


def _ready() -> None:
    """A process's imports (torch, triton, the kernels), before any compile is timed."""
    sys.path.insert(0, str(AOT))
    import triton_aot_kernels  # noqa: F401


def compile_cases(names: list[str], cache: str) -> float:
    """Compile the named cases for sm_90 into `cache`; seconds it took."""
    os.environ["TRITON_CACHE_DIR"] = cache
    sys.path.insert(0, str(AOT))
    from triton_aot_kernels import compile_case, kernel_cases

    cases = {case[0]: case for case in kernel_cases(True)}
    started = time.perf_counter()
    for name in names:
        compile_case(cases[name], 90)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=16)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    import triton

    names = _cases(args.kernels)
    shares = [names[i :: args.workers] for i in range(args.workers)]
    _ready()
    figures: dict[str, float] = {}
    started = time.perf_counter()
    compile_cases(names, tempfile.mkdtemp())
    figures["serial_s"] = time.perf_counter() - started
    cache = tempfile.mkdtemp()
    with cf.ThreadPoolExecutor(args.workers) as pool:
        started = time.perf_counter()
        list(pool.map(compile_cases, shares, [cache] * args.workers))
        figures["threads_s"] = time.perf_counter() - started
    cache = tempfile.mkdtemp()
    with cf.ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn"), initializer=_ready) as pool:
        list(pool.map(_ready_probe, range(args.workers)))  # every process imported before the clock
        started = time.perf_counter()
        list(pool.map(compile_cases, shares, [cache] * args.workers))
        figures["processes_s"] = time.perf_counter() - started
    print(f"{len(names)} kernels, sm_90, Triton {triton.__version__}, {args.workers} workers, "
          f"{os.cpu_count()} CPUs: serial {figures['serial_s']:.2f} s, threads {figures['threads_s']:.2f} s, "
          f"processes {figures['processes_s']:.2f} s")
    print(json.dumps({"kernels": len(names), "workers": args.workers, "triton": triton.__version__,
                      **{k: round(v, 3) for k, v in figures.items()}}))


def _ready_probe(_: int) -> int:
    return os.getpid()


if __name__ == "__main__":
    main()
