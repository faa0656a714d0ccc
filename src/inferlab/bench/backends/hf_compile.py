"""How the HF backend asks transformers to compile the decode step (child process only).

transformers >= 4.48 compiles the decode step of a static cache by itself ("auto-compile", on CUDA, with
its CompileConfig default: inductor, mode reduce-overhead, i.e. CUDA graphs). `compile_backend=inductor`
on CUDA leaves that default alone, so what is measured is what users get. Another backend (aot_eager,
eager: dynamo tracing without inductor) or a CPU run passes an explicit CompileConfig; on CPU that needs
CompileConfig._compile_all_devices (transformers 5.x), which is how the lab checks on CPU that a short
warm-up compiles the same graph as the timed calls. Older transformers get torch.compile(model.forward)
by hand, the documented recipe of their time.
"""

from __future__ import annotations

from typing import Any

from inferlab.errors import UnsupportedError

COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")


def compile_config_for(backend: str, device: Any) -> Any:
    """The CompileConfig to pass to generate, or None to keep transformers' own default."""
    if backend == "inductor" and device.type == "cuda":
        return None
    try:
        from transformers import CompileConfig
    except ImportError:
        raise UnsupportedError("this transformers has no CompileConfig; use compile_backend=inductor on CUDA") from None
    config = CompileConfig(backend=backend, mode="reduce-overhead" if backend == "inductor" else None)
    if device.type != "cuda":
        if not hasattr(CompileConfig, "_compile_all_devices"):
            raise UnsupportedError("compile=true: this transformers compiles generation only on accelerators; "
                                   "on CPU set compile=false")
        config._compile_all_devices = True
    return config


def compile_forward_by_hand(model: Any, backend: str) -> None:
    """transformers < 4.48 (no auto-compile): wrap forward as their documentation did for static caches."""
    import torch

    mode = "reduce-overhead" if backend == "inductor" else None
    model.forward = torch.compile(model.forward, backend=backend, mode=mode, fullgraph=True)
