"""What the `vllm` backends (generate, constrained, encode) share: the parent-side precheck, the environment
a cell sets before vLLM starts, the engine arguments they pass, the facts every vLLM row records, and the
backend's state and shutdown (VLLMBackend). vLLM is a peer in the lab, never a dependency of inferlab: it is
imported here only inside a cell (child process), and where it cannot be found the cells are `unavailable`
rows without a process.

Knobs the backends share: `gpu_memory_utilization`, `enforce_eager` (a diagnosis, never recommended),
`kv_dtype` (auto: the model dtype; fp8: `kv_cache_dtype="fp8"`, e4m3 with vLLM's per-tensor scale) and
`attention_backend` (auto: vLLM's own choice for the device; else `attention_config={"backend": NAME}`).

What a row records (`extra_metrics`): `vllm_version`, `vllm_attention_backend` and `vllm_sampler`, asked
from the worker after start-up (the attention backend class its model runner built; whether its top-p/top-k
sampler is FlashInfer's or vLLM's own, which filters with a Triton kernel at >= 8 rows, a torch sort
below), `flashinfer_present` (importable in the cell), `flashinfer_sampler` (FlashInfer's sampler is the
one vLLM runs), and the engine settings that shape a step (`vllm_engine`: max_num_seqs, max_model_len,
block size, KV cache dtype, prefix caching, CUDA-graph mode and capture sizes, async scheduling). vLLM's
engine core runs in its own process and reserves `gpu_memory_utilization` of the device: the row's
peak-memory figures are the cell process's only.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.packages import missing_package
from inferlab.errors import UnsupportedError
from inferlab.workloads.backend import Backend

INSTALL_HINT = ("pip install vllm==0.26.0 (it pins its own torch); on the device machine, carry .dev2 "
                "(scripts/gpu/device_payload.sh) in the call after .dev1's: benchmarks/README.md, "
                "\"Procedure: a device session\"")

# vLLM 0.26's attention backends for a dense decoder on NVIDIA GPUs (AttentionBackendEnum names)
ATTENTION_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")
SAMPLERS = {"forward_cuda": "FlashInfer", "forward_native": "vLLM's own"}  # TopKTopPSampler.forward -> name

COMMON_KNOBS = (
    Knob("gpu_memory_utilization", float, 0.92, "fraction of the device vLLM's engine reserves (weights, activations, "
         "KV blocks); vLLM 0.26 LLM's default", minimum=0.05),
    Knob("enforce_eager", bool, False, "run vLLM without CUDA graphs or torch.compile (diagnosis only; the default "
         "is vLLM's own: compiled, graphed)", baseline=(True,)),
    Knob("kv_dtype", str, "auto", "vLLM's KV cache: auto (the model dtype) or fp8 (kv_cache_dtype='fp8': e4m3, one "
         "scale per tensor)", choices=("auto", "fp8")),
    Knob("attention_backend", str, "auto", "vLLM's attention backend: auto (vLLM's choice for the device) or one by "
         "name", choices=("auto", *ATTENTION_BACKENDS)),
)


def precheck(cell: Cell) -> str | None:
    """Parent side, no import: the reason a vLLM cell cannot run here, or None."""
    return missing_package("vllm", f"backend vllm ({cell.scenario})", INSTALL_HINT)


def prepare_environment() -> dict[str, Any]:
    """Before vLLM is imported, in the cell: vLLM 0.26 assumes FlashInfer is installed and fails at start-up
    without it unless its FlashInfer sampler is switched off; the worker answers our question about its
    attention backend and sampler only with serialised callables allowed (our own processes, on this host)."""
    present = importlib.util.find_spec("flashinfer") is not None
    if not present:
        os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    return {"flashinfer_present": present}


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
    arguments = {"dtype": dtype_name(dtype), "seed": config["seed"], "kv_cache_dtype": config["kv_dtype"],
                 "gpu_memory_utilization": config["gpu_memory_utilization"], "enforce_eager": config["enforce_eager"]}
    if config["attention_backend"] != "auto":
        arguments["attention_config"] = {"backend": config["attention_backend"]}
    return arguments


def _runner_choices(worker: Any) -> dict[str, Any]:
    """Runs in vLLM's worker (collective_rpc): the attention backends its model runner built and the
    method its top-p/top-k sampler runs (a key of SAMPLERS)."""
    runner = worker.model_runner
    groups = getattr(runner, "attn_groups", None) or []
    sampler = getattr(getattr(getattr(runner, "sampler", None), "topk_topp_sampler", None), "forward", None)
    return {"attention": sorted({group.backend.get_name() for per_cache in groups for group in per_cache}),
            "sampler": getattr(sampler, "__name__", None)}


def runner_facts(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """One row's facts from every worker's _runner_choices answer."""
    attention = sorted({name for answer in answers for name in answer["attention"]})
    samplers = sorted({SAMPLERS.get(answer["sampler"], f"unknown ({answer['sampler']})") for answer in answers})
    return {"vllm_attention_backend": ",".join(attention) or "none", "vllm_sampler": ",".join(samplers),
            "flashinfer_sampler": samplers == ["FlashInfer"]}


def engine_facts(llm: Any, environment: dict[str, Any]) -> dict[str, Any]:
    """What a vLLM row must say beside its figure (see the module docstring). Never raises: a fact vLLM
    does not give becomes 'unknown (reason)'."""
    import vllm

    facts: dict[str, Any] = {"vllm_version": vllm.__version__, **environment}
    try:
        facts.update(runner_facts(llm.collective_rpc(_runner_choices, timeout=60)))
    except Exception as e:  # noqa: BLE001 - a diagnosis, not a figure
        facts["vllm_attention_backend"] = facts["vllm_sampler"] = f"unknown ({type(e).__name__}: {str(e)[:120]})"
    try:
        vc = llm.llm_engine.vllm_config
        cc = vc.compilation_config
        facts["vllm_engine"] = {
            "max_num_seqs": vc.scheduler_config.max_num_seqs,
            "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens,
            "max_model_len": vc.model_config.max_model_len,
            "block_size": vc.cache_config.block_size,
            "kv_cache_dtype": str(vc.cache_config.cache_dtype),
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


class VLLMBackend(Backend):
    """A lab backend around one vLLM `LLM`: the cell's backend knobs, the scenario's spec, the LLM once load
    has run and the environment it was started in."""

    kernels_visible = False  # vLLM's kernels run in its engine-core process, not in the profiled cell

    def __init__(self, config: dict[str, Any], spec: Any) -> None:
        self.config = config
        self.spec = spec
        self.llm: Any = None
        self.environment: dict[str, Any] = {}

    def close(self) -> None:
        shutdown(self.llm)
        self.llm = None
