"""What the two `vllm` backends (generate, constrained) share: the parent-side precheck, the environment a
cell sets before vLLM starts, the engine arguments both pass, the facts every vLLM row records, and the
shutdown. vLLM is a peer in the lab, never a dependency of inferlab: it is imported here only inside a
cell (child process), and where it cannot be found the cells are `unavailable` rows without a process.

What a row records (`extra_metrics`): `vllm_version`, `vllm_attention_backend` (asked from the worker
after start-up), `flashinfer_present` (importable in the cell) and `flashinfer_sampler` (vLLM's FlashInfer
top-p/top-k sampler on; without it vLLM 0.26 filters with its Triton kernel at >= 8 rows, a torch sort
below), and the engine settings that shape a step (`vllm_engine`: max_num_seqs, max_model_len, block size,
prefix caching, CUDA-graph mode and capture sizes, async scheduling). vLLM's engine core runs in its own
process and reserves `gpu_memory_utilization` of the device: the row's peak-memory figures are the
cell process's only.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.packages import missing_package
from inferlab.errors import UnsupportedError

INSTALL_HINT = ("pip install vllm==0.26.0 (it pins its own torch); on the device machine, carry .dev2 "
                "(scripts/gpu/device_payload.sh) in the call after .dev1's: benchmarks/README.md, "
                "\"Procedure: a device session\"")

COMMON_KNOBS = (
    Knob("gpu_memory_utilization", float, 0.92, "fraction of the device vLLM's engine reserves (weights, activations, "
         "KV blocks); vLLM 0.26 LLM's default", minimum=0.05),
    Knob("enforce_eager", bool, False, "run vLLM without CUDA graphs or torch.compile (diagnosis only; the default "
         "is vLLM's own: compiled, graphed)"),
)


def precheck(cell: Cell) -> str | None:
    """Parent side, no import: the reason a vLLM cell cannot run here, or None."""
    return missing_package("vllm", f"backend vllm ({cell.scenario})", INSTALL_HINT)


def prepare_environment() -> dict[str, Any]:
    """Before vLLM is imported, in the cell: vLLM 0.26 assumes FlashInfer is installed and fails at start-up
    without it unless its FlashInfer sampler is switched off; the worker answers our question about its
    attention backend only with serialised callables allowed (our own processes, on this host)."""
    present = importlib.util.find_spec("flashinfer") is not None
    if not present:
        os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    sampler = present and os.environ.get("VLLM_USE_FLASHINFER_SAMPLER", "1") != "0"
    return {"flashinfer_present": present, "flashinfer_sampler": sampler}


def import_vllm() -> Any:
    """The vllm module, or UnsupportedError with its own reason (e.g. built for another torch or CUDA)."""
    try:
        import vllm
    except Exception as e:
        raise UnsupportedError(f"vllm cannot be imported here: {type(e).__name__}: {e}") from None
    return vllm


def dtype_name(dtype: Any) -> str:
    import torch

    return {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[dtype]


def engine_arguments(config: dict[str, Any], device: Any, dtype: Any) -> dict[str, Any]:
    """The LLM(...) arguments both backends pass; vLLM's defaults for everything else."""
    if device.type != "cuda":
        raise UnsupportedError(f"the vllm backend runs on CUDA devices only (device={device}); set device=cuda")
    return {"dtype": dtype_name(dtype), "seed": config["seed"],
            "gpu_memory_utilization": config["gpu_memory_utilization"], "enforce_eager": config["enforce_eager"]}


def _attention_backend_names(worker: Any) -> list[str]:
    """Runs in vLLM's worker (collective_rpc): the attention backends its model runner built."""
    groups = getattr(worker.model_runner, "attn_groups", None) or []
    return sorted({group.backend.get_name() for per_cache in groups for group in per_cache})


def engine_facts(llm: Any, environment: dict[str, Any]) -> dict[str, Any]:
    """What a vLLM row must say beside its figure (see the module docstring). Never raises: a fact vLLM
    does not give becomes 'unknown (reason)'."""
    import vllm

    facts: dict[str, Any] = {"vllm_version": vllm.__version__, **environment}
    try:
        names = llm.collective_rpc(_attention_backend_names, timeout=60)
        facts["vllm_attention_backend"] = ",".join(sorted({n for per_worker in names for n in per_worker})) or "none"
    except Exception as e:  # noqa: BLE001 - a diagnosis, not a figure
        facts["vllm_attention_backend"] = f"unknown ({type(e).__name__}: {str(e)[:120]})"
    try:
        vc = llm.llm_engine.vllm_config
        cc = vc.compilation_config
        facts["vllm_engine"] = {
            "max_num_seqs": vc.scheduler_config.max_num_seqs,
            "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens,
            "max_model_len": vc.model_config.max_model_len,
            "block_size": vc.cache_config.block_size,
            "prefix_caching": vc.cache_config.enable_prefix_caching,
            "async_scheduling": getattr(vc.scheduler_config, "async_scheduling", None),
            "cudagraph_mode": str(getattr(cc, "cudagraph_mode", None)),
            "cudagraph_capture_sizes": list(getattr(cc, "cudagraph_capture_sizes", None) or []),
            "compilation_mode": str(getattr(cc, "mode", getattr(cc, "level", None))),
        }
    except Exception as e:  # noqa: BLE001
        facts["vllm_engine"] = f"unknown ({type(e).__name__}: {str(e)[:120]})"
    return facts


def shutdown(llm: Any) -> None:
    """End vLLM's engine-core process now, so the cell exits at once (the launcher kills leftovers anyway)."""
    if llm is None:
        return
    try:
        llm.llm_engine.engine_core.shutdown(timeout=10)
    except Exception:  # noqa: BLE001 - best effort at the end of a finished cell
        pass
