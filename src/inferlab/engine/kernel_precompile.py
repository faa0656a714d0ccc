"""Triton compiles off the start-up's critical path: the warm-up's kernels compiled while the weights load.

With an empty Triton cache the warm-up (ModelRunner.warm_up) would compile every specialisation it launches,
one after another. KernelPrecompile starts before the weights load: a thread runs that same warm-up on a dry
runner, the engine's model built over "meta" tensors with the engine's ops, GEMM plan, slots and lengths
(plus the GEMM timing's candidates where the engine will time its plan), where every Triton launch only
compiles. The compiles run in a thread pool (Triton's AsyncCompileMode: MLIR passes and ptxas release the
GIL) that also loads each kernel as its first launch would, into the JIT's in-memory cache and Triton's disk
cache, where the real warm-up finds it. The dry run is the warm-up's own code, so the two cannot drift apart
(tests/unit/engine/test_engine_kernel_precompile.py compares their launches).

The engine waits for the precompile before its GEMM plan and warm-up: nothing launches a Triton kernel or
captures a graph meanwhile. On a warm machine it does not run at all (precompile_record.py: a finished
precompile's record, whose kernel files are all still in Triton's cache). `divert_launches` is the one hook into Triton: it routes the calling thread's
launches (only) to a sink.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator

import torch

from inferlab.engine.kernels.device_props import meta_stands_for
from inferlab.engine.precompile_record import kernel_files
from inferlab.engine.runner import ModelRunner
from inferlab.engine.thread_scoped import scoped

log = logging.getLogger(__name__)

# sink(kernel, launch, args, kwargs): what a diverted launch does instead (launch: JITFunction.run unpatched)
LaunchSink = Callable[[Any, Callable, tuple, dict], Any]

_diverted = threading.local()  # .sink: where this thread's Triton launches go (absent/None: launched)
_install_lock = threading.Lock()


def _install_divert_hook() -> None:
    """Route JITFunction.run through this module once per process: a thread with a sink hands its launches to
    the sink, every other thread launches as before (one thread-local lookup per launch)."""
    from triton.runtime.jit import JITFunction

    with _install_lock:
        if getattr(JITFunction.run, "inferlab_divert_hook", False):
            return
        launch = JITFunction.run

        @functools.wraps(launch)
        def run(self, *args, grid, warmup, **kwargs):
            sink = getattr(_diverted, "sink", None)
            if sink is None:
                return launch(self, *args, grid=grid, warmup=warmup, **kwargs)
            return sink(self, launch, args, kwargs)

        run.inferlab_divert_hook = True
        JITFunction.run = run


def divert_launches(sink: LaunchSink) -> ContextManager[None]:
    """Inside, every Triton launch of the calling thread calls `sink` instead of running the kernel."""
    _install_divert_hook()
    return scoped(_diverted, "sink", sink)


def compile_only(kernel, launch: Callable, args: tuple, kwargs: dict) -> Any:
    """The sink that compiles: the JIT's own path with warmup=True (its specialisation of these arguments,
    compiled into its cache, nothing launched)."""
    return launch(kernel, *args, grid=None, warmup=True, **kwargs)


class DryCapturer:
    """graphs.Capturer for the dry run: runs the step once (as the real capture's eager warm-up run does) and
    captures nothing."""

    def capture(self, fn: Callable[[], Any], around_warmup: Callable[[], ContextManager] | None = None) -> None:
        with around_warmup() if around_warmup is not None else nullcontext():
            fn()


@dataclass(frozen=True)
class DryRun:
    """What the engine's warm-up depends on, for a dry run of it (engine.py fills it from its start-up)."""

    spec: Any  # ModelSpec
    model_class: type  # the architecture's forward class (forwards.registry.forward_class)
    ops: Any  # engine.ops.Ops (Triton)
    dtype: torch.dtype
    kv_dtype: torch.dtype
    slots: int
    max_seq_len: int
    max_prefill_tokens: int
    max_stop_ids: int
    share_prompts: bool
    use_graphs: bool
    # (weights, buckets, activation) -> the plan's JSON the engine will find (gemm_plans.known_plan), or None:
    # it will time one; gemm_plan None: the engine runs cuBLAS only (gemm="cublas")
    gemm_plan: Callable[[Any, list[int], str], dict | None] | None

    def key_fields(self) -> dict[str, Any]:
        """What decides the kernels the warm-up launches, as JSON values (precompile_record.precompile_key)."""
        return {"spec": hashlib.sha256(repr(self.spec).encode()).hexdigest()[:16], "forward": self.model_class.__name__,
                "ops": self.ops.name, "dtype": str(self.dtype), "kv_dtype": str(self.kv_dtype), "slots": self.slots,
                "max_seq_len": self.max_seq_len, "max_prefill_tokens": self.max_prefill_tokens,
                "max_stop_ids": self.max_stop_ids, "share_prompts": self.share_prompts, "graphs": self.use_graphs,
                "gemm": "auto" if self.gemm_plan is not None else "cublas"}

    def warm_up(self) -> None:
        """What the engine's start-up launches, over meta tensors: the GEMM plan's timing candidates when the
        engine will time its plan (none stored), then the warm-up with the plan the engine will run."""
        from inferlab.engine.gemm_plan import launch_candidates, plan_from_json
        from inferlab.models.loader import placeholder_weights

        meta = torch.device("meta")
        weights = placeholder_weights(self.spec, self.dtype, meta)
        runner = ModelRunner.build(self.spec, self.model_class, weights, self.ops, self.kv_dtype, self.slots,
                                   self.max_seq_len, self.max_stop_ids, self.share_prompts)  # fmt: skip
        gemm = runner.model.gemm
        if self.gemm_plan is not None:
            stored = self.gemm_plan(weights, runner.sizes, gemm.activation)
            if stored is None:
                launch_candidates(weights, runner.sizes, gemm.act_mul, meta, gemm.activation)
            else:
                runner.model.gemm, _ = plan_from_json(stored, gemm.act_mul, weights, meta, gemm.activation)
        runner.warm_up(self.max_seq_len, self.max_prefill_tokens, self.use_graphs, DryCapturer())


@dataclass
class PrecompileReport:
    kernels: int = 0  # specialisations compiled (or read from Triton's disk cache) in the background
    compile_s: float = 0.0  # their compile time summed over the compile threads
    wall_s: float = 0.0  # from the start to the last compile finished
    wait_s: float = 0.0  # what the start-up waited for it
    error: str = ""  # why the dry run stopped early ("": it ran to the end); the warm-up compiles the rest
    failures: int = 0  # compiles that raised (their launches will say why)
    # where the wall went, in seconds: the dry run's walk (until its last launch was handed on), and of the
    # threads' compile_s the loading of the compiled kernels (modules; Triton 3.6's launcher builds)
    phases: dict[str, float] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)  # the compiled kernels' files in Triton's disk cache
    # what the package's kernels gave (kernel_bundles/): "" nothing, "all" every kernel (no compile), else
    # "<n> files" unpacked into the cache before the dry run
    shipped: str = ""

    @property
    def clean(self) -> bool:
        """It ran to the end and every compile succeeded: its kernels are all on disk."""
        return not self.error and not self.failures


class _CompilePool(ThreadPoolExecutor):
    """The compile threads, counting what they compile and for how long. On CUDA each thread's current device
    is the engine's and each compiled kernel is also loaded as its first launch would load it (its module,
    and in Triton 3.6 the launcher it builds per signature with the host's C compiler; 3.8 has one launcher)."""

    def __init__(self, workers: int, device: torch.device) -> None:
        cuda = device.type == "cuda"
        super().__init__(workers, thread_name_prefix="inferlab-compile",
                         initializer=(lambda: torch.cuda.set_device(device)) if cuda else None)  # fmt: skip
        self._load = cuda
        self._lock = threading.Lock()
        self.count, self.busy_s, self.failures, self.files = 0, 0.0, [], []
        self.load_s = 0.0  # of busy_s: loading the compiled kernels (modules, Triton 3.6's launcher builds)

    def submit(self, fn, /, *args, **kwargs):
        def timed():
            t = time.perf_counter()
            try:
                kernel = fn(*args, **kwargs)
                if self._load:
                    loading = time.perf_counter()
                    _load(kernel)
                    with self._lock:
                        self.load_s += time.perf_counter() - loading
                with self._lock:
                    self.files.extend(kernel_files(kernel))
                return kernel
            except Exception as e:
                with self._lock:
                    self.failures.append(f"{type(e).__name__}: {str(e)[:300]}")
                raise
            finally:
                with self._lock:
                    self.count += 1
                    self.busy_s += time.perf_counter() - t

        return super().submit(timed)


def _load(kernel) -> None:
    """Triton's CompiledKernel loaded for launch (CompiledKernel._init_handles, what its first launch calls);
    a kernel that cannot load here (too much shared memory) raises the same error at its launch."""
    try:
        kernel._init_handles()
    except Exception as e:
        log.debug("start-up precompile: %s not loaded (%s); its launch will say why", getattr(kernel, "name", kernel), e)


def compile_workers() -> int:
    """Compile threads: the CPUs this process may use, one left for the weights' loading."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    return max(1, min(16, cpus - 1))


def can_precompile() -> bool:
    """Triton with AsyncCompileMode (3.4 onwards): compiles handed to a thread pool."""
    return importlib.util.find_spec("triton") is not None and \
        importlib.util.find_spec("triton.runtime._async_compile") is not None


class KernelPrecompile:
    """The dry run of the warm-up in a background thread, its launches compiled by a thread pool (or handed
    to `sink`, for tests). `wait()` joins it and says what it did; it never raises."""

    def __init__(self, dry: DryRun, device: torch.device, sink: LaunchSink | None = None,
                 workers: int | None = None, shipped: Callable[[], Any] | None = None) -> None:
        self._dry, self._device, self._sink = dry, device, sink
        self._shipped = shipped  # () -> kernel_bundles.Installed | None: the package's kernels, asked first
        self._workers = workers or compile_workers()
        self._pool: _CompilePool | None = None
        self._report = PrecompileReport()
        self._started = self._finished = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="inferlab-precompile", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            if self._device.type == "cuda":
                torch.cuda.set_device(self._device)  # the JIT compiles for this thread's current device
            if self._from_bundle():
                return
            with meta_stands_for(self._device), torch.inference_mode(), self._compiling() as sink, \
                    divert_launches(sink):
                self._dry.warm_up()
                self._report.phases["walk_s"] = time.perf_counter() - self._started
        except Exception as e:  # the warm-up compiles what the dry run did not reach
            self._report.error = f"{type(e).__name__}: {str(e)[:500]}"
            log.warning("start-up precompile stopped early (%s); the warm-up compiles the rest as it launches",
                        self._report.error)
        finally:
            self._finished = time.perf_counter()

    def _from_bundle(self) -> bool:
        """The package's kernels unpacked into Triton's cache where they apply (kernel_bundles/); True when
        they are every kernel the warm-up launches (nothing left to compile)."""
        installed = self._shipped() if self._shipped is not None else None
        if installed is None:
            return False
        report = self._report
        report.phases["shipped_s"] = installed.seconds
        report.shipped = "all" if installed.exact else f"{installed.written} files"
        if installed.exact:
            report.kernels, report.files = installed.kernels, list(installed.files)
        return installed.exact

    @contextmanager
    def _compiling(self) -> Iterator[LaunchSink]:
        """The sink for this thread's launches; on exit, every compile it started has finished."""
        if self._sink is not None:
            yield self._sink
            return
        from triton.runtime._async_compile import AsyncCompileMode

        self._pool = _CompilePool(self._workers, self._device)
        try:
            with AsyncCompileMode(self._pool, ignore_errors=True):  # a failed compile fails again at its launch
                yield compile_only
        finally:
            self._pool.shutdown(wait=True)

    def wait(self) -> PrecompileReport:
        t = time.perf_counter()
        self._thread.join()
        report = self._report
        report.wait_s = time.perf_counter() - t
        report.wall_s = self._finished - self._started
        if self._pool is not None:
            report.kernels, report.compile_s = self._pool.count, self._pool.busy_s
            report.failures, report.files = len(self._pool.failures), list(self._pool.files)
            report.phases["load_s"] = self._pool.load_s
            if self._pool.failures:
                log.warning("start-up precompile: %d compiles failed (%s); their launches will say why",
                            len(self._pool.failures), self._pool.failures[0])
        report.phases = {name: round(seconds, 3) for name, seconds in report.phases.items()}
        log.info("start-up precompile: %d kernels in %.1f s (%.1f s of compile threads), waited %.1f s; %s",
                 report.kernels, report.wall_s, report.compile_s, report.wait_s, report.phases)
        return report
