"""Which attention kernel actually ran, read from profiler event names (aten op names on every device,
CUDA kernel names on GPUs). A requested backend that silently falls back shows up here.

Kinds: flash (PyTorch's built-in flash), efficient (cutlass memory-efficient), cudnn, math (SDPA's
composite fallback), flash-attn (the Dao-AILab library), unfused (no fused attention op seen but softmax
ran: eager attention). On CPU kinds are prefixed `cpu:`. Owns the name patterns only.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

# (kind, pattern) in order; the first match names an event. PyTorch's own flash kernels live in the
# `pytorch_flash::` namespace, the flash-attn library's in `flash::`, hence the look-behind.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        ("flash-attn", r"flash_attn::|flash_attn_2_cuda|flash_attn_3|(?<!pytorch_)\bflash::|FlashAttnFwd"),
        ("cudnn", r"_scaled_dot_product_cudnn_attention|cudnn"),
        ("flash", r"_scaled_dot_product_flash_attention|_flash_attention_forward|pytorch_flash::"),
        ("efficient", r"_scaled_dot_product_efficient_attention|_efficient_attention_forward|fmha_cutlass|mem_eff"),
        ("math", r"_scaled_dot_product_attention_math"),
    )
)
_SOFTMAX = re.compile(r"^aten::(_safe_)?_?softmax$|softmax_warp|SoftMaxForward", re.IGNORECASE)
# Dispatcher-level names that say nothing about the kernel chosen.
_NEUTRAL = {"aten::scaled_dot_product_attention"}


def kind_of(name: str) -> str | None:
    if name in _NEUTRAL:
        return None
    for kind, pattern in _RULES:
        if pattern.search(name):
            return kind
    return None


@dataclass(frozen=True)
class KernelReport:
    observed: str  # e.g. "efficient", "flash+efficient" (most frequent first), "cpu:flash", "none seen"
    counts: dict[str, int] = field(default_factory=dict)  # kind -> number of events
    attention_names: list[str] = field(default_factory=list)  # the raw names that matched, for audits

    def to_json(self) -> dict[str, object]:
        return {"observed": self.observed, "counts": self.counts, "names": self.attention_names}


def classify(names: Counter[str] | dict[str, int], on_cpu: bool) -> KernelReport:
    """Summarise event names (name -> count) into the attention kinds that ran."""
    counts: Counter[str] = Counter()
    matched: set[str] = set()
    softmax = 0
    for name, n in names.items():
        kind = kind_of(name)
        if kind is not None:
            counts[kind] += n
            matched.add(name)
        elif _SOFTMAX.search(name):
            softmax += n
    if not counts and softmax:
        counts["unfused"] = softmax
    prefix = "cpu:" if on_cpu else ""
    ordered = [f"{prefix}{k}" for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return KernelReport(
        observed="+".join(ordered) if ordered else "none seen",
        counts={f"{prefix}{k}": v for k, v in counts.items()},
        attention_names=sorted(matched)[:20],
    )
