"""How many Triton kernels a stretch of code compiled as it launched them, and for how long.

The start-up counts them over its warm-up (engine.py): with the precompile (kernel_precompile.py) having
compiled the warm-up's kernels, none should be left, and any that are show in `engine.stats` as time on
the critical path. Counted through the JIT's compile hooks (Triton's knobs.runtime.jit_cache_hook, called
before a compile, and jit_post_compile_hook, after): a miss of the JIT's in-memory cache, whether it then
compiles or reads Triton's disk cache. Hooks set by someone else are kept and called.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator


@dataclass
class JitCompiles:
    count: int = 0  # -1: not counted (a Triton without the compile hooks, before 3.4)
    seconds: float = 0.0


@contextmanager
def jit_compiles_counted() -> Iterator[JitCompiles]:
    """Inside, every Triton JIT compile of this process is counted and timed into the yielded JitCompiles."""
    counted = JitCompiles()
    try:
        from triton import knobs

        runtime = knobs.runtime
        before, after = runtime.jit_cache_hook, runtime.jit_post_compile_hook
    except (ImportError, AttributeError):
        counted.count = -1
        yield counted
        return
    started = threading.local()  # a compile's start, per compiling thread
    lock = threading.Lock()

    def pre(**kwargs):
        started.at = time.perf_counter()
        return before(**kwargs) if before is not None else None  # truthy: the compile is skipped

    def post(**kwargs):
        with lock:
            counted.count += 1
            counted.seconds += time.perf_counter() - getattr(started, "at", time.perf_counter())
        return after(**kwargs) if after is not None else None

    runtime.jit_cache_hook, runtime.jit_post_compile_hook = pre, post
    try:
        yield counted
    finally:
        runtime.jit_cache_hook, runtime.jit_post_compile_hook = before, after
