"""What a CPU engine's decode step costs, by the quantities that made it slow, not by the clock: the
torch threads it runs on (one, its callers' setting put back), the tensors it allocates (no copy of the
K/V it reads, no int64 [rows, vocab] hash temporaries) and the noise it hashes (only for tokens still in
the race)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import inferlab.engine.cpu_attention as cpu_attention
import inferlab.engine.cpu_sampling as cpu_sampling
from inferlab.engine import DecodeStepProbe, Engine, EngineConfig
from inferlab.engine.cpu_sampling import race_argmax_cpu
from inferlab.types import Request, SamplingParams

ROWS, CONTEXT = 8, 300


class _NewTensors(TorchDispatchMode):
    """(op, shape, dtype, bytes) of every tensor an op returns in storage none of its inputs had."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[tuple[str, tuple, torch.dtype, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        inputs = {t.untyped_storage().data_ptr() for t in tensors}
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.made.append((str(func), tuple(t.shape), t.dtype, t.untyped_storage().nbytes()))
        return out


def _engine(path) -> Engine:
    return Engine(EngineConfig(model=str(path), device="cpu", max_slots=ROWS, max_seq_len=512, load_tokenizer=False))


def test_a_decode_step_reads_the_kv_cache_in_place_and_hashes_no_int64_rows(tiny_checkpoint):
    with _engine(tiny_checkpoint()) as engine:
        spec = engine.spec
        with DecodeStepProbe(engine, rows=ROWS, context=CONTEXT, sampling=SamplingParams(temperature=1.0)) as probe:
            probe.eager_step()
            with torch.inference_mode(), _NewTensors() as mode:
                probe.eager_step()
    kv_span = ROWS * spec.num_kv_heads * CONTEXT * spec.head_dim * 4  # one layer's K of the rows, fp32
    largest = max(mode.made, key=lambda m: m[3])
    assert largest[3] < kv_span, f"{largest}: a copy of the K/V the step reads?"
    hashes = [m for m in mode.made if m[2] == torch.int64 and m[3] >= ROWS * spec.vocab_size * 8]
    assert not hashes, f"{hashes[:3]}: the race's hash in torch int64 over [rows, vocab]?"


def test_steps_run_on_the_engines_threads_and_give_the_callers_back(tiny_checkpoint, monkeypatch):
    seen: list[int] = []
    attention = cpu_attention.decode_attention_cpu

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return attention(*args, **kwargs)

    monkeypatch.setattr(cpu_attention, "decode_attention_cpu", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with _engine(tiny_checkpoint()) as engine:
            assert engine.config.cpu_threads == 1
            sampling = SamplingParams(temperature=1.0, max_new_tokens=6, min_new_tokens=6)
            results = engine.generate([Request(id=str(i), prompt_ids=(5, 6, 7), sampling=sampling) for i in range(3)])
            assert all(r.ok for r in results)
            with DecodeStepProbe(engine, rows=2, context=9, sampling=sampling) as probe:
                probe.step()
            assert seen and set(seen) == {1}
            assert torch.get_num_threads() == 2  # the caller's setting, back between calls
    finally:
        torch.set_num_threads(before)


def test_noise_is_hashed_only_for_the_tokens_still_in_the_race(monkeypatch):
    hashed: list[int] = []
    noise = cpu_sampling.noise_cpu

    def spy(keys, token_ids):
        out = noise(keys, token_ids)
        hashed.append(out.numel())
        return out

    monkeypatch.setattr(cpu_sampling, "noise_cpu", spy)
    rows, vocab = 6, 5000
    logits = torch.full((rows, vocab), float("-inf"))
    logits[:, 100:140] = torch.randn(rows, 40)  # a constraint's hole: 40 tokens open per row
    temperature = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.7])  # row 1 greedy
    skip = torch.tensor([False, False, True, False, False, False])  # row 2 forced (a copy op)
    race_argmax_cpu(logits, temperature, None, torch.arange(rows), torch.zeros(rows, dtype=torch.int64), skip=skip)
    assert hashed == [4 * 40]  # the four drawing rows' open tokens, nothing else
    hashed.clear()
    race_argmax_cpu(torch.randn(rows, vocab), temperature, None, torch.arange(rows),
                    torch.zeros(rows, dtype=torch.int64), skip=skip)  # fmt: skip
    assert hashed == [4 * vocab]  # unmasked: the drawing rows only


@pytest.mark.parametrize("slots, view", [([0, 1, 2, 3], True), ([0, 1, 6, 3], False)])
def test_rows_in_slot_order_read_their_kv_as_a_view(slots, view):
    cache = torch.randn(8, 2, 32, 4)
    kv = cpu_attention._row_kv(cache, torch.tensor(slots), 20)
    assert (kv.untyped_storage().data_ptr() == cache.untyped_storage().data_ptr()) is view
    assert torch.equal(kv, cache[torch.tensor(slots), :, :20])
