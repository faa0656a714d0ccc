"""A launch sink (engine/kernel_precompile.py divert_launches) that records instead of launching: each Triton
launch as (kernel, the JIT's cache key of its arguments for an sm_90 target), computed with Triton's own
argument binder and a CUDA backend object, so no GPU is needed. Nothing runs: outputs stay uninitialised."""

from __future__ import annotations

from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import make_backend
from triton.runtime.jit import compute_cache_key, create_function_from_signature

SM90 = GPUTarget("cuda", 90, 32)


class LaunchRecorder:
    def __init__(self) -> None:
        self.backend = make_backend(SM90)
        self.binders: dict[int, object] = {}
        self.launches: list[tuple[str, str]] = []  # (kernel, JIT cache key), in launch order

    def __call__(self, kernel, launch, args: tuple, kwargs: dict) -> None:
        binder = self.binders.get(id(kernel))
        if binder is None:
            binder = self.binders[id(kernel)] = create_function_from_signature(kernel.signature, kernel.params,
                                                                               self.backend)
        _, specialization, options = binder(*args, **kwargs)
        name = f"{kernel.fn.__module__}.{kernel.fn.__qualname__}"
        self.launches.append((name, compute_cache_key({}, specialization, options)))

    @property
    def keys(self) -> set[tuple[str, str]]:
        return set(self.launches)
