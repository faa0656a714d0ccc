"""The prefill forward replayed from CUDA graphs, one per (lanes, length) bucket, captured when first used.

An eager prefill launches ~400 kernels (28 layers of qwen3-0.6b) from Python: ~11-14 ms of host time on an
H100 for ~1-5 ms of GPU work (FINDINGS of the 9978fcd profile). Between decode chunks the device then
idles while the host launches, and a job with a refill every few chunks loses ~10% of its wall time so.
Replayed from a graph the forward costs one launch. Shapes are bucketed so that few graphs serve a job:
lanes (distinct prompts) round up to a power of two, the padded length to a power of two from 16 (the
last bucket is max_seq_len), and a bucket is used only while lanes x length <= max_prefill_tokens (the
activation bound of the memory plan) and its padding stays small (GRAPH_PAD_TOKENS, GRAPH_PAD_SHARE);
anything else runs eagerly.

Padding is harmless by construction: extra lanes repeat lane 0 (same tokens, length and slot, so they
write the same K/V values to the same places), and a lane's pad positions write K/V past its prompt, which
its row overwrites before it reads them (as in the eager prefill). The graph reads one static int64 input
block, `[lengths | lane rows | tokens]` at fixed offsets, filled by one host->device copy per prefill, and
writes the lanes' last-position logits into a static [lanes, V] buffer; sampling stays eager (runner.py).
A new bucket's first use waits for the device, runs the forward once eagerly on the real inputs (its
outputs stand: the same computation), then captures it without running it.

A graph is keyed by (lanes, length, steered, collecting): a batch with a steered or collecting row replays
a graph whose forward carries the taps (taps.RowTaps.for_prefill over the static lane rows and lengths:
the steering table and collection buffers are static too), so steering and collection cost no eager
prefill. A padded lane repeats lane 0, so it steers and collects as lane 0's row with the same values
(collection at a row's first token overwrites, it never adds). Collecting graphs are dropped when the
collection buffers grow (tap_support.py), like the decode graphs. The forward is whichever the model
runs: for Gemma 2/3 the windowed / soft-capped attention of the layers that need it (attention.py: chosen
by shapes, no host sync), so the same graphs serve every model the registry names.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, NamedTuple, Sequence

import torch

from inferlab.engine.graphs import Capturer
from inferlab.engine.kv_cache import KVCache
from inferlab.engine.taps import RowTaps

MIN_LENGTH = 16
# A bucket pads lanes x length up to powers of two (e.g. 5 prompts of 600 tokens run as 8 x 1024: 2.7x the
# work). A small prefill is launch-bound, so its padding is nearly free and the graph wins; a large one is
# compute-bound (gemma-2b: ~4 GFLOP per token, ~7 ms per 1,024 tokens on an H100 against ~10 ms of eager
# launches that a busy device hides anyway), so its padding is real device time. A bucket is used while its
# extra tokens stay within the larger of these two bounds; beyond them the batch runs eagerly, unpadded
# past its longest prompt.
GRAPH_PAD_TOKENS = 1024
GRAPH_PAD_SHARE = 0.25


def right_padded(prompts: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """[len(prompts) * width] int64 host tensor: prompt j at [j * width, j * width + len(prompt j)), zeros
    after it. One scatter of the concatenated prompts: a handful of ops whatever the number of prompts (a copy
    per prompt cost ~4 host ops each, ~500 per batch of 128 short prompts)."""
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.int64)  # [n]
    flat = torch.tensor(list(itertools.chain.from_iterable(prompts)), dtype=torch.int64)  # [sum of lengths]
    shift = torch.arange(len(prompts)) * width - (lengths.cumsum(0) - lengths)  # lane start - offset in flat
    out = torch.zeros(len(prompts) * width, dtype=torch.int64)
    out[torch.arange(flat.numel()) + shift.repeat_interleave(lengths)] = flat
    return out


class PrefillKey(NamedTuple):
    lanes: int  # the lanes bucket (a power of two)
    length: int  # the padded length bucket
    steered: bool = False  # the forward adds the rows' steering vectors (taps)
    collecting: bool = False  # the forward folds each lane's last position into its row's collection buffers


def _powers_up_to(lo: int, cap: int) -> list[int]:
    sizes, n = [], lo
    while n < cap:
        sizes.append(n)
        n *= 2
    return sizes + [cap]


class PrefillGraphs:
    def __init__(self, model: Any, cache: KVCache, row_slots: torch.Tensor, max_lanes: int, max_len: int,
                 max_tokens: int, capturer: Capturer, taps: RowTaps) -> None:
        self.model = model  # forwards/llama.py or gemma.py: prefill(tokens, lengths, slots, cache, taps, out)
        self.cache = cache
        self.row_slots = row_slots  # RowState.slots [R]: row -> KV slot, read inside the graph
        self.max_lanes = max_lanes
        self.max_tokens = max_tokens
        self.lane_sizes = _powers_up_to(1, max_lanes)
        self.length_sizes = _powers_up_to(min(MIN_LENGTH, max_len), max_len)
        device = row_slots.device
        self.inputs = torch.zeros(2 * max_lanes + max_tokens, dtype=torch.int64, device=device)
        self.logits = torch.empty(max_lanes, model.spec.vocab_size, dtype=model.weights.lm_head.dtype, device=device)
        self.capturer = capturer
        self.taps = taps  # the runner's RowTaps (not the runner: no reference cycle)
        self.graphs: dict[PrefillKey, torch.cuda.CUDAGraph] = {}

    def bucket(self, lanes: int, length: int) -> tuple[int, int] | None:
        """The graph shape serving `lanes` prompts of at most `length` tokens, or None (run eagerly): also None
        when the bucket's padding would cost the device more than the eager launches it saves."""
        lb = next((s for s in self.lane_sizes if s >= lanes), None)
        tb = next((s for s in self.length_sizes if s >= length), None)
        if lb is None or tb is None or lb * tb > self.max_tokens:
            return None
        if lb * tb - lanes * length > max(GRAPH_PAD_TOKENS, GRAPH_PAD_SHARE * lanes * length):
            return None
        return lb, tb

    def host_block(self, shape: tuple[int, int], prompts: list, rows: list[int]) -> torch.Tensor:
        """The static input block for `prompts` (token lists) run into the slots of `rows`, padded to `shape`."""
        lb, tb = shape
        m = self.max_lanes
        lanes = [j if j < len(prompts) else 0 for j in range(lb)]  # extra lanes repeat lane 0
        block = torch.zeros(2 * m + lb * tb, dtype=torch.int64)
        block[:lb] = torch.tensor([len(prompts[i]) for i in lanes], dtype=torch.int64)
        block[m : m + lb] = torch.tensor([rows[i] for i in lanes], dtype=torch.int64)
        block[2 * m :] = right_padded([prompts[i] for i in lanes], tb)
        return block

    def run(self, shape: tuple[int, int], block: torch.Tensor, steered: bool = False,
            collecting: bool = False) -> torch.Tensor:
        """Logits [lanes bucket, V] of the prompts in `block` (host_block); their K/V written into the slots;
        with steered / collecting, the lanes' rows steered and collected (their tables already assigned)."""
        staged = block.pin_memory() if self.inputs.is_cuda else block
        self.inputs[: block.numel()].copy_(staged, non_blocking=True)
        key = PrefillKey(*shape, steered, collecting)
        graph = self.graphs.get(key)
        if graph is None:
            self.graphs[key] = self.capturer.capture(lambda: self._forward(key))  # the eager run stands
        else:
            graph.replay()
        return self.logits[: shape[0]]

    def drop(self, predicate: Callable[[PrefillKey], bool]) -> None:
        """Forget the graphs whose key matches (e.g. `.collecting`: their buffers were replaced)."""
        for key in [k for k in self.graphs if predicate(k)]:
            del self.graphs[key]

    def close(self) -> None:
        """Destroy the graphs and drop the static buffers (Engine.close; the Capturer drops the pool)."""
        for graph in self.graphs.values():
            graph.reset()
        self.graphs.clear()
        self.inputs = self.logits = self.model = self.cache = self.row_slots = self.taps = None

    def _forward(self, key: PrefillKey) -> None:
        lb, tb = key.lanes, key.length
        m = self.max_lanes
        lengths, rows = self.inputs[:lb], self.inputs[m : m + lb]
        tokens = self.inputs[2 * m : 2 * m + lb * tb].view(lb, tb)
        taps = self.taps.for_prefill(rows, lengths, tb, key.steered, key.collecting)  # None: neither
        self.model.prefill(tokens, lengths, self.row_slots[rows], self.cache, taps=taps, out=self.logits[:lb])
