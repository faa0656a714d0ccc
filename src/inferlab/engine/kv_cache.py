"""The static KV cache and the memory plan that sizes it.

KVCache holds K and V as [layers, slots, kv_heads, max_len, head_dim], allocated once: a row writes into
its own slot at its own position, so nothing is allocated after start-up. The element type is the model
dtype, or float8_e4m3fn (`EngineConfig.kv_dtype="fp8"`) with an fp32 scale per (layer, slot, kv head,
position) for K and for V (`k_scale`, `v_scale`; kv_quant.py). Every per-position tensor is a field here,
so `copy_prefix` (rows sharing a prompt get its K/V by one device copy) copies them all.

MemoryModel prices a configuration (slots x max_len) in bytes: weights, the KV cache, the output buffers,
the decode and prefill workspaces, the largest prefill batch's activations and a fixed reserve.
`plan_memory` fills in whatever the user left open and refuses a configuration that cannot fit with a
CapacityError naming the largest feasible values; it is pure arithmetic on a byte budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inferlab.engine.attention import EAGER_SCORE_ELEMENTS
from inferlab.engine.kv_quant import SCALE_DTYPE, is_fp8
from inferlab.errors import CapacityError
from inferlab.models.config import ModelSpec

GIB = 1024**3


COPY_CHUNK = 16  # slot pairs per torch copy (bounds its [layers, pairs, kv_heads, length, head_dim] temporary)


@dataclass
class KVCache:
    k: torch.Tensor  # [layers, slots, kv_heads, max_len, head_dim], model dtype or float8_e4m3fn
    v: torch.Tensor  # [layers, slots, kv_heads, max_len, head_dim]
    merge_counters: torch.Tensor  # [slots * kv_heads] int32 zeros: the fused decode attention's split merge
    k_scale: torch.Tensor | None = None  # [layers, slots, kv_heads, max_len] fp32 when k is fp8, else None
    v_scale: torch.Tensor | None = None
    kernels: str = "torch"  # "triton": copy_prefix in one Triton launch per tensor pair (kernels/triton_kv_copy.py)

    @classmethod
    def allocate(cls, spec: ModelSpec, slots: int, max_len: int, dtype: torch.dtype, device: torch.device,
                 kernels: str = "torch") -> "KVCache":
        """`dtype`: the cache's element type (the model dtype, or float8_e4m3fn: then with scales)."""
        shape = (spec.num_layers, slots, spec.num_kv_heads, max_len, spec.head_dim)
        # zeros, not empty: a row reads only positions it wrote, but NaN garbage must never meet a 0 weight
        scales = dict(
            k_scale=torch.zeros(shape[:-1], dtype=SCALE_DTYPE, device=device),
            v_scale=torch.zeros(shape[:-1], dtype=SCALE_DTYPE, device=device),
        ) if is_fp8(dtype) else {}  # fmt: skip
        def zeros() -> torch.Tensor:  # fp8 as zero bytes viewed as e4m3 (0x00 is +0.0): no fp8 fill kernel needed
            if is_fp8(dtype):
                return torch.zeros(shape, dtype=torch.uint8, device=device).view(dtype)
            return torch.zeros(shape, dtype=dtype, device=device)

        return cls(
            k=zeros(),
            v=zeros(),
            merge_counters=torch.zeros(slots * spec.num_kv_heads, dtype=torch.int32, device=device),
            kernels=kernels,
            **scales,
        )

    def copy_prefix(self, src_slots: torch.Tensor, dst_slots: torch.Tensor, length: int) -> None:
        """K and V (and their fp8 scales) of positions [0, length) of slot src_slots[i] into slot dst_slots[i],
        every layer. src_slots, dst_slots: [pairs] int64 device tensors (destinations distinct and never a
        source); length: a host int. Positions a destination holds beyond its own prompt may receive the
        source's garbage: harmless, a row writes every position past its prompt before it reads it."""
        if src_slots.shape[0] == 0:
            return
        pairs = [(self.k, self.v)]
        if self.k_scale is not None:  # [layers, slots, kv_heads, max_len]: copied as runs of one element
            pairs.append((self.k_scale.unsqueeze(-1), self.v_scale.unsqueeze(-1)))
        if self.kernels == "triton":
            from inferlab.engine.kernels.triton_kv_copy import copy_prefix

            for k, v in pairs:
                copy_prefix(k, v, src_slots, dst_slots, length)
            return
        bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32}  # a bit copy: no fp8 indexing kernels needed
        tensors = [t.view(bits[t.element_size()]) for pair in pairs for t in pair]
        for start in range(0, src_slots.shape[0], COPY_CHUNK):
            src, dst = src_slots[start : start + COPY_CHUNK], dst_slots[start : start + COPY_CHUNK]
            for cache in tensors:
                cache[:, dst, :, :length] = cache[:, src, :, :length]

    def scales(self, layer: int) -> dict[str, torch.Tensor | None]:
        """The keyword arguments the attention ops take for `layer`'s scales (None with a model-dtype cache)."""
        if self.k_scale is None:
            return dict(k_scale=None, v_scale=None)
        return dict(k_scale=self.k_scale[layer], v_scale=self.v_scale[layer])

    @property
    def nbytes(self) -> int:
        """K, V and their scales (the merge counters apart)."""
        tensors = [self.k, self.v] + [t for t in (self.k_scale, self.v_scale) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)

    @property
    def slots(self) -> int:
        return self.k.shape[1]

    @property
    def max_len(self) -> int:
        return self.k.shape[3]


def kv_bytes_per_token(spec: ModelSpec, dtype: torch.dtype) -> int:
    """K and V of one position across all layers, in the cache's element type `dtype` (fp8: + the scales)."""
    per_head = spec.head_dim * torch.empty((), dtype=dtype).element_size()
    if is_fp8(dtype):
        per_head += torch.empty((), dtype=SCALE_DTYPE).element_size()
    return 2 * spec.num_layers * spec.num_kv_heads * per_head


@dataclass(frozen=True)
class MemoryModel:
    """Bytes needed by a configuration; every term is an upper bound of what the engine allocates."""

    spec: ModelSpec
    dtype: torch.dtype
    weight_bytes: int
    max_prefill_tokens: int  # the padded-token bound of one prefill batch (raised to max_len when smaller)
    reserve_bytes: int  # fixed slack: library workspaces, allocator fragmentation
    kv_dtype: torch.dtype | None = None  # the cache's element type; None: the model dtype
    scratch_slots: int = 0  # KV slots beyond the rows' (the packed decode steps' scratch: forced_runs.py)

    @property
    def kv_per_token(self) -> int:
        return kv_bytes_per_token(self.spec, self.kv_dtype or self.dtype)

    def per_row_workspace(self) -> int:
        """Decode step + sampler buffers of one row, counted twice: decode graph pool and eager prefill."""
        s = self.spec
        elem = torch.empty((), dtype=self.dtype).element_size()
        # logits fp32 + model-dtype copy, sort values and int64 indices, softmax, cumsum, masks (stop and
        # constraint), temporaries
        sampler = s.vocab_size * (4 + elem + 4 + 8 + 4 + 4 + 1 + 1 + 8)
        activations = elem * (8 * s.hidden_size + 3 * (s.q_size + 2 * s.kv_size) + 4 * s.intermediate_size)
        attention_partials = 4 * s.num_heads * 64 * (s.head_dim + 2)  # split-K partial outputs (<= 64 splits)
        return 2 * (sampler + activations + attention_partials)

    def prefill_activation_bytes(self, max_len: int) -> int:
        s = self.spec
        elem = torch.empty((), dtype=self.dtype).element_size()
        tokens = max(self.max_prefill_tokens, max_len)
        per_token = elem * (6 * s.hidden_size + 4 * (s.q_size + 2 * s.kv_size) + 2 * s.q_size + 6 * s.intermediate_size)
        eager = 0
        if any(s.layer_windows) or s.attn_logit_softcap is not None:  # attention.windowed_attention's blocks:
            # fp32 scores, their soft-cap and softmax temporaries (<= EAGER_SCORE_ELEMENTS each), fp32 K/V/q copies
            eager = 4 * 4 * EAGER_SCORE_ELEMENTS + 4 * 3 * tokens * s.num_heads * s.head_dim
        return int(1.25 * tokens * per_token) + eager

    def total(self, slots: int, max_len: int) -> int:
        # + the int64 output row and a constraint program's ops ([2, max_len] int64) per slot
        per_slot = max_len * (self.kv_per_token + 8 + 16) + self.per_row_workspace()
        scratch = self.scratch_slots * max_len * self.kv_per_token
        return (self.weight_bytes + self.reserve_bytes + self.prefill_activation_bytes(max_len) + slots * per_slot
                + scratch)

    def largest_slots(self, max_len: int, budget: int, cap: int) -> int:
        return _largest(lambda n: self.total(n, max_len) <= budget, cap)

    def largest_len(self, slots: int, budget: int, cap: int) -> int:
        return _largest(lambda n: self.total(slots, n) <= budget, cap)


def _largest(fits, cap: int) -> int:
    """The largest n in [0, cap] with fits(n) (fits is monotone decreasing in n); 0 if none."""
    lo, hi = 0, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class MemoryPlan:
    slots: int
    max_seq_len: int
    budget_bytes: int
    total_bytes: int  # what the plan is expected to use, by MemoryModel


def plan_memory(
    model: MemoryModel,
    budget_bytes: int,
    max_slots: int | None,
    max_seq_len: int | None,
    slot_cap: int,
    default_len_cap: int,
) -> MemoryPlan:
    """Fill in the open values and check the result fits `budget_bytes`; raise CapacityError otherwise."""
    model_max = model.spec.max_position_embeddings
    length = max_seq_len if max_seq_len is not None else min(model_max, default_len_cap)
    if max_slots is None:
        slots = model.largest_slots(length, budget_bytes, slot_cap)
        if slots < 1:
            raise CapacityError(_refusal(model, budget_bytes, 1, length, slot_cap, model_max))
    elif max_seq_len is None:
        slots = max_slots
        length = model.largest_len(slots, budget_bytes, length)
        if length < 2:
            raise CapacityError(_refusal(model, budget_bytes, slots, max(length, 2), slot_cap, model_max))
    else:
        slots = max_slots
    if model.total(slots, length) > budget_bytes:
        raise CapacityError(_refusal(model, budget_bytes, slots, length, slot_cap, model_max))
    return MemoryPlan(
        slots=slots, max_seq_len=length, budget_bytes=budget_bytes, total_bytes=model.total(slots, length)
    )


def _refusal(model: MemoryModel, budget: int, slots: int, length: int, slot_cap: int, model_max: int) -> str:
    """Why (slots, length) does not fit, and only alternatives that do (at least 1 slot of 2 positions)."""
    need = model.total(slots, length)
    fit_slots = model.largest_slots(length, budget, max(slot_cap, slots))
    fit_len = model.largest_len(slots, budget, max(model_max, length))
    feasible = [f"max_slots={fit_slots} at max_seq_len={length}"] if fit_slots >= 1 else []
    if fit_len >= 2:
        feasible.append(f"max_seq_len={fit_len} at max_slots={slots}")
    elif slots > 1 and (one_row := model.largest_len(1, budget, max(model_max, length))) >= 2:
        feasible.append(f"max_seq_len={one_row} at max_slots=1")
    fix = (f"Largest feasible: {', or '.join(feasible)}; or raise gpu_memory_fraction / memory_budget_bytes"
           if feasible else "Not even one row of 2 positions fits: raise gpu_memory_fraction / memory_budget_bytes, "
           "or use a smaller dtype or model")
    return (
        f"max_slots={slots} x max_seq_len={length} does not fit: it needs {need / GIB:.2f} GiB (weights "
        f"{model.weight_bytes / GIB:.2f} GiB, KV cache {slots * length * model.kv_per_token / GIB:.2f} GiB, "
        f"workspace and reserve the rest) but the budget is {budget / GIB:.2f} GiB. {fix}"
    )
