"""What the device tests share: their marks, error measures and request builders.

A device test module sets `pytestmark = CUDA_ONLY` (marked gpu: deselected by default, run with
`pytest -m gpu`; skipped without CUDA), a test takes `@cuda_only`, or parametrises `device` with CPU_AND_CUDA: its CPU case runs in
the default CPU suite (tiny shapes: the test's own code kept working), its CUDA case only with -m gpu.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
import torch

from inferlab.bench.graph_timing import graph_us  # noqa: F401  (the tests' kernel timing)

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA_ONLY = [pytest.mark.gpu, NEEDS_CUDA]
CPU_AND_CUDA = pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA_ONLY)])


def cuda_only(test):
    """Decorator: CUDA_ONLY's marks on one test of a module that also has CPU cases."""
    for mark in CUDA_ONLY:
        test = mark(test)
    return test


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|."""
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30)).item()


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def hf_dtype(dtype: torch.dtype) -> dict[str, Any]:
    """from_pretrained's dtype keyword: `dtype` since transformers 4.56, `torch_dtype` before."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def random_requests(n: int, new_tokens: int, vocab: int, prompt_len: int = 48, seed: int = 0, exact: bool = False,
                    **sampling: Any) -> list:
    """n requests of `prompt_len` random ids below min(vocab, 1000), seeded per request; `exact`: every row
    produces exactly `new_tokens` (EOS ignored)."""
    from inferlab.types import Request, SamplingParams

    g = torch.Generator().manual_seed(seed)
    lengths = dict(min_new_tokens=new_tokens, ignore_eos=True) if exact else {}
    return [
        Request(id=f"r{seed}-{i}", prompt_ids=tuple(torch.randint(10, min(vocab, 1000), (prompt_len,), generator=g).tolist()),
                sampling=SamplingParams(max_new_tokens=new_tokens, seed=1000 * seed + i, **lengths, **sampling))
        for i in range(n)
    ]  # fmt: skip


def free_device_memory() -> None:
    """Drop what earlier engines left to the collector and give PyTorch's cached blocks back."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def alternated_step_ms(probes: dict[Any, Any], steps: int = 10, rounds: int = 30) -> dict[Any, float]:
    """The median device ms per decode step of each DecodeStepProbe, timed in alternation (`rounds` times
    `steps` graph replays each, after a warm-up), so that clocks and neighbours weigh on all of them alike."""
    import statistics

    def timed(probe, n: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            probe.step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / n

    for probe in probes.values():
        timed(probe, 5)  # warm
    times: dict[Any, list[float]] = {key: [] for key in probes}
    for _ in range(rounds):
        for key, probe in probes.items():
            times[key].append(timed(probe, steps))
    return {key: statistics.median(values) for key, values in times.items()}
