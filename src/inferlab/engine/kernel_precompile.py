"""Triton compiles off the start-up's critical path: the warm-up's kernels compiled while the weights load.

With an empty Triton cache the warm-up (ModelRunner.warm_up) would compile every specialisation it launches,
one after another. KernelPrecompile starts before the weights load: a thread runs that same warm-up on a dry
runner, the engine's model built over "meta" tensors with the engine's ops, GEMM plan, slots and lengths
(plus the GEMM timing's candidates where the engine will time its plan), where every Triton launch only
compiles. The compiles are handed to a thread pool (Triton's AsyncCompileMode); with compile processes
(compile_processes.py, the default on machines of >= 4 CPUs) each thread has a worker process compile the
kernel into Triton's disk cache, since Triton's compile holds the GIL for much of its time, then the JIT's
own compile reads it back. Each kernel is also loaded as its first launch would load it, into the JIT's
in-memory cache, where the real warm-up finds it. The dry run is the warm-up's own code, so the two cannot drift apart
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

from inferlab.engine.compile_jobs import job_for
from inferlab.engine.compile_processes import CompileProcesses
from inferlab.engine.kernels.device_props import meta_stands_for
from inferlab.engine.precompile_record import kernel_files, triton_cache_dir
from inferlab.engine.runner import ModelRunner
from inferlab.engine.thread_scoped import scoped

log = logging.getLogger(__name__)

# sink(kernel, launch, args, kwargs): what a diverted launch does instead (launch: JITFunction.run unpatched)
LaunchSink = Callable[[Any, Callable, tuple, dict], Any]

_diverted = threading.local()  # .sink: where this thread's Triton launches go (absent/None: launched)
_compile_thread = threading.local()  # .processes: the CompileProcesses a compile thread hands its compiles to
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


def compile_routed(kernel, launch: Callable, args: tuple, kwargs: dict) -> Any:
    """compile_only, with the kernel's compiles routed to its compile thread's processes (if it has any)."""
    route_compiles(kernel)
    return compile_only(kernel, launch, args, kwargs)


def route_compiles(kernel) -> None:
    """Wrap this JITFunction's compile (an attribute of each JITFunction, called by its JIT with the
    ASTSource, target, options and cache-invalidating environment) once: in a compile thread with processes,
    a worker compiles first into Triton's disk cache, and the JIT's compile then reads the kernel from it.
    The JIT sets that attribute when it builds its binder for a device: built first, so it stays wrapped."""
    from triton.runtime.driver import driver

    kernel.device_caches[driver.active.get_current_device()]  # noqa: B018  (builds the binder: sets .compile)
    original = kernel.compile
    if getattr(original, "inferlab_routed", False):
        return

    @functools.wraps(original)
    def compile(src, target=None, options=None, _env_vars=None):
        processes = getattr(_compile_thread, "processes", None)
        if processes is not None and target is not None and hasattr(src, "fn"):
            processes.compile(job_for(src, target, options or {}, _env_vars, triton_cache_dir()))
        return original(src, target=target, options=options, _env_vars=_env_vars)

    compile.inferlab_routed = True
    kernel.compile = compile


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
    processes: int = 0  # compile worker processes (0: the threads compiled)
    in_processes: int = 0  # kernels a worker compiled (the rest: in their threads)
    declined: list[str] = field(default_factory=list)  # why some were compiled in their threads
    # where the wall went, in seconds: the dry run's walk (until its last launch was handed on); of the
    # threads' compile_s, loading kernels, waiting for a free worker, the workers' own compiles; the slowest
    # worker's imports (its start to its first job)
    phases: dict[str, float] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)  # the compiled kernels' files in Triton's disk cache

    @property
    def clean(self) -> bool:
        """It ran to the end and every compile succeeded: its kernels are all on disk."""
        return not self.error and not self.failures


class _CompilePool(ThreadPoolExecutor):
    """The compile threads, counting what they compile and for how long. On CUDA each thread's current device
    is the engine's and each compiled kernel is also loaded as its first launch would load it (its module,
    and in Triton 3.6 the launcher it builds per signature with the host's C compiler; 3.8 has one launcher)."""

    def __init__(self, workers: int, device: torch.device, processes: CompileProcesses | None = None) -> None:
        cuda = device.type == "cuda"

        def initializer() -> None:
            if cuda:
                torch.cuda.set_device(device)
            _compile_thread.processes = processes

        super().__init__(workers, thread_name_prefix="inferlab-compile", initializer=initializer)
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


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)


def compile_workers() -> int:
    """Compile threads: the CPUs this process may use, one left for the weights' loading."""
    return max(1, min(16, _cpus() - 1))


def compile_processes() -> int:
    """Compile worker processes: up to 8, two CPUs left for the weights' loading and the dry run; none on a
    machine of < 4 CPUs, where a worker's start (importing torch and Triton) costs more than it saves."""
    cpus = _cpus()
    return min(8, cpus - 2) if cpus >= 4 else 0


def can_precompile() -> bool:
    """Triton with AsyncCompileMode (3.4 onwards): compiles handed to a thread pool."""
    return importlib.util.find_spec("triton") is not None and \
        importlib.util.find_spec("triton.runtime._async_compile") is not None


class KernelPrecompile:
    """The dry run of the warm-up in a background thread, its launches compiled by a thread pool (or handed
    to `sink`, for tests). `wait()` joins it and says what it did; it never raises."""

    def __init__(self, dry: DryRun, device: torch.device, sink: LaunchSink | None = None,
                 workers: int | None = None, processes: int | None = None) -> None:
        self._dry, self._device, self._sink = dry, device, sink
        processes = compile_processes() if processes is None else processes
        # started first: their imports overlap the dry run's start and the weights' load
        self._processes = CompileProcesses(processes, triton_cache_dir()) if processes and sink is None else None
        self._workers = processes or workers or compile_workers()
        self._pool: _CompilePool | None = None
        self._report = PrecompileReport()
        self._started = self._finished = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="inferlab-precompile", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            if self._device.type == "cuda":
                torch.cuda.set_device(self._device)  # the JIT compiles for this thread's current device
            with meta_stands_for(self._device), torch.inference_mode(), self._compiling() as sink, \
                    divert_launches(sink):
                self._dry.warm_up()
                self._report.phases["walk_s"] = time.perf_counter() - self._started
        except Exception as e:  # the warm-up compiles what the dry run did not reach
            self._report.error = f"{type(e).__name__}: {str(e)[:500]}"
            log.warning("start-up precompile stopped early (%s); the warm-up compiles the rest as it launches",
                        self._report.error)
        finally:
            if self._processes is not None:
                self._processes.close()
        self._finished = time.perf_counter()

    @contextmanager
    def _compiling(self) -> Iterator[LaunchSink]:
        """The sink for this thread's launches; on exit, every compile it started has finished."""
        if self._sink is not None:
            yield self._sink
            return
        from triton.runtime._async_compile import AsyncCompileMode

        self._pool = _CompilePool(self._workers, self._device, self._processes)
        try:
            with AsyncCompileMode(self._pool, ignore_errors=True):  # a failed compile fails again at its launch
                yield compile_routed
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
        if self._processes is not None:
            report.processes, report.in_processes = self._processes.count, self._processes.compiled
            report.declined = list(self._processes.declined)
            report.phases.update(self._processes.phases())
        report.phases = {name: round(seconds, 3) for name, seconds in report.phases.items()}
        log.info("start-up precompile: %d kernels in %.1f s (%.1f s of compile threads; %d of them in %d "
                 "processes), waited %.1f s; %s", report.kernels, report.wall_s, report.compile_s, report.in_processes,
                 report.processes, report.wait_s, report.phases)
        if report.declined:
            log.info("start-up precompile: compiled in their threads instead of a process: %s", report.declined)
        return report
