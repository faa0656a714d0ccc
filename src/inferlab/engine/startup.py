"""Start-up decisions taken before anything is allocated: device, dtype, memory budget, the memory plan.

Everything that can refuse a configuration runs here, before the weights are read: an unsupported
architecture or rope type, a sliding window shorter than max_seq_len in a forward that does not implement
windows (the Llama family; Gemma 2/3 implement theirs per layer), max_seq_len beyond the model's
positions, an FP8 KV cache on a GPU without FP8, and a slots x length plan that does not fit the budget
(CapacityError with the largest feasible values).
"""

from __future__ import annotations

import logging
import math
import os

import torch

from inferlab.engine.config import EngineConfig
from inferlab.engine.kv_cache import MemoryModel, MemoryPlan, plan_memory
from inferlab.engine.kv_quant import FP8_KV_DTYPE
from inferlab.errors import ConfigError, UnsupportedError
from inferlab.models.config import ModelSpec, read_model_spec
from inferlab.models.loader import expected_shapes

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """The engine's device, with an index on CUDA ("cuda" and "auto" mean the current device): set_device,
    Triton launches and graph capture need one."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device={name!r} is not a torch device; use 'auto', 'cpu', 'cuda' or 'cuda:N'") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name!r} but CUDA is not available here; use device='cpu' or 'auto'")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def graphs_wanted(cuda_graphs: bool | None, device: torch.device) -> bool:
    """Decode steps and prefills replayed from CUDA graphs: by default on CUDA; refused elsewhere."""
    if cuda_graphs and device.type != "cuda":
        raise ConfigError("cuda_graphs=True needs a CUDA device; set cuda_graphs=None or False on CPU")
    return device.type == "cuda" if cuda_graphs is None else cuda_graphs


def resolve_dtype(name: str, spec: ModelSpec, device: torch.device) -> torch.dtype:
    """auto: float32 on CPU (exact and fast there); on CUDA the checkpoint's half type, else bfloat16."""
    if name != "auto":
        return DTYPES[name]
    if device.type == "cpu":
        return torch.float32
    if spec.checkpoint_dtype in ("bfloat16", "float16"):
        return DTYPES[spec.checkpoint_dtype]
    return torch.bfloat16


FP8_MIN_CAPABILITY = (8, 9)  # Ada and Hopper onwards have e4m3 conversions (Triton's fp8e4nv)


def resolve_kv_dtype(name: str, dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The KV cache's element type: "auto" and "model" = the model dtype; "fp8" = float8_e4m3fn (with
    per-position scales), refused on a CUDA device without FP8. On CPU fp8 runs the torch reference path."""
    if name in ("auto", "model"):
        return dtype
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if tuple(capability) < FP8_MIN_CAPABILITY:
            raise UnsupportedError(
                f"kv_dtype='fp8' needs a GPU with FP8 (CUDA compute capability >= 8.9: Ada, Hopper or newer); "
                f"{torch.cuda.get_device_name(device)} has compute capability {capability[0]}.{capability[1]}. "
                "Use --kv-dtype auto (kv_dtype='auto': the cache in the model dtype)"
            )
    else:
        log.warning("kv_dtype='fp8' on the %s: the K/V are stored as e4m3 with a scale per position (half the cache's "
                    "bytes) through the engine's torch reference path, a correctness check slower than the model "
                    "dtype's cache; the FP8 cache is a speed option on GPUs of CUDA capability >= 8.9", device.type)
    return FP8_KV_DTYPE


def fp8_kv_supported(device: torch.device) -> bool:
    """Whether an FP8 KV cache runs on `device` as a GPU cache (CUDA compute capability >= 8.9); on CPU the
    engine runs fp8 through its torch reference, a correctness path, never a speed option."""
    return device.type == "cuda" and tuple(torch.cuda.get_device_capability(device)) >= FP8_MIN_CAPABILITY


def memory_budget(config: EngineConfig, device: torch.device) -> int:
    """Bytes the engine may use: the override, else a fraction of the free device (or host) memory."""
    if config.memory_budget_bytes is not None:
        return config.memory_budget_bytes
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
    else:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return int(config.gpu_memory_fraction * free)


def weight_bytes(spec: ModelSpec, dtype: torch.dtype) -> int:
    shapes, optional = expected_shapes(spec)
    element = torch.empty((), dtype=dtype).element_size()
    return element * sum(math.prod(shape) for key, shape in shapes.items() if key not in optional)


def check_length_limits(spec: ModelSpec, max_seq_len: int) -> None:
    if max_seq_len > spec.max_position_embeddings:
        raise ConfigError(
            f"max_seq_len={max_seq_len} exceeds the model's max_position_embeddings={spec.max_position_embeddings}; "
            f"use max_seq_len <= {spec.max_position_embeddings}"
        )
    if spec.sliding_window is not None and not spec.layer_windows and max_seq_len > spec.sliding_window:
        raise UnsupportedError(
            f"this {spec.architecture} uses sliding-window attention (window {spec.sliding_window}) which the "
            f"inferlab engine does not implement; use max_seq_len <= {spec.sliding_window} (exact then)"
        )


def make_plan(
    config: EngineConfig, spec: ModelSpec, dtype: torch.dtype, device: torch.device, kv_dtype: torch.dtype | None = None
) -> MemoryPlan:
    """`kv_dtype`: the cache's element type (resolve_kv_dtype); None: the model dtype."""
    if config.max_seq_len is not None:
        check_length_limits(spec, config.max_seq_len)
    model = MemoryModel(
        spec=spec,
        dtype=dtype,
        weight_bytes=weight_bytes(spec, dtype),
        max_prefill_tokens=config.max_prefill_tokens,
        reserve_bytes=config.reserve_bytes,
        kv_dtype=kv_dtype,
        scratch_slots=1 if config.forced_run_tokens else 0,
    )
    default_len = config.default_max_seq_len
    if spec.sliding_window is not None and not spec.layer_windows:  # a window the forward does not implement
        default_len = min(default_len, spec.sliding_window)
    plan = plan_memory(
        model, memory_budget(config, device), config.max_slots, config.max_seq_len, config.slot_cap, default_len
    )
    check_length_limits(spec, plan.max_seq_len)
    log.info(
        "memory plan: %d slots x %d tokens (KV %s), %.2f GiB of %.2f GiB budget",
        plan.slots,
        plan.max_seq_len,
        str(model.kv_dtype or dtype).removeprefix("torch."),
        plan.total_bytes / 1024**3,
        plan.budget_bytes / 1024**3,
    )
    return plan


def plan_without_loading(config: EngineConfig) -> MemoryPlan:
    """The memory plan an Engine started now with `config` would make (device, dtypes, budget and refusals
    as at start-up), without reading weights or allocating anything: e.g. the largest feasible max_slots
    for a max_seq_len (max_slots=None, slot_cap as high as wanted)."""
    device = resolve_device(config.device)
    spec = read_model_spec(config.model)
    dtype = resolve_dtype(config.dtype, spec, device)
    return make_plan(config, spec, dtype, device, resolve_kv_dtype(config.kv_dtype, dtype, device))
