"""The prefill forward replayed from CUDA graphs, one per (lanes, length) bucket, captured when first used.

An eager prefill launches hundreds of kernels from Python, several times its GPU work in host time; between
decode chunks the device idles meanwhile. Replayed from a graph the forward is one launch. Shapes are
bucketed so that few graphs serve a job: lanes (distinct prompts) round up to a power of two, the padded
length to a power of two from 16 (the last bucket is max_seq_len); a bucket is used only while lanes x
length <= max_prefill_tokens and its padding stays small (GRAPH_PAD_TOKENS, GRAPH_PAD_SHARE); anything
else runs eagerly.

Padding is harmless: extra lanes repeat lane 0 (same tokens, length and slot: the same K/V to the same
places), and pad positions write K/V past a prompt, which its row overwrites before reading. The graph reads
one static int64 block `[lengths | lane rows | tokens]`, filled by one host->device copy, and writes the
lanes' last-position logits into a static [lanes, V] buffer; sampling stays eager (runner.py). A new
bucket's first use runs the forward eagerly on the real inputs (its outputs stand), then captures it.

Graphs are keyed by (lanes, length, steered, collecting): a steered or collecting batch replays a graph whose
forward carries residual hooks over the static steering table and collection buffers (a padded lane steers
and collects as lane 0's row; collection at a row's first token overwrites). Collecting graphs are dropped
when the collection buffers grow, like the decode graphs.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, NamedTuple, Sequence

import torch

from inferlab.engine.graphs import Capturer
from inferlab.engine.kv_cache import KVCache
from inferlab.engine.residual_hooks import HookTables

MIN_LENGTH = 16
# A bucket pads lanes x length up to powers of two (5 prompts of 600 tokens run as 8 x 1024: 2.7x the work).
# A small prefill is launch-bound, so its padding is nearly free and the graph wins; a large one is
# compute-bound, so its padding is real device time while its eager launches hide behind the device's work.
# A bucket is used while its extra tokens stay within the larger of these two bounds; beyond them the batch
# runs eagerly, unpadded past its longest prompt.
GRAPH_PAD_TOKENS = 1024
GRAPH_PAD_SHARE = 0.25


def right_padded(prompts: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """[len(prompts) * width] int64 host tensor: prompt j at [j * width, j * width + len(prompt j)), zeros
    after it. One scatter of the concatenated prompts: a handful of host ops whatever the number of prompts."""
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.int64)  # [n]
    flat = torch.tensor(list(itertools.chain.from_iterable(prompts)), dtype=torch.int64)  # [sum of lengths]
    shift = torch.arange(len(prompts)) * width - (lengths.cumsum(0) - lengths)  # lane start - offset in flat
    out = torch.zeros(len(prompts) * width, dtype=torch.int64)
    out[torch.arange(flat.numel()) + shift.repeat_interleave(lengths)] = flat
    return out


class PrefillKey(NamedTuple):
    lanes: int  # the lanes bucket (a power of two)
    length: int  # the padded length bucket
    steered: bool = False  # the forward adds the rows' steering vectors (residual hooks)
    collecting: bool = False  # the forward folds each lane's last position into its row's collection buffers


def _powers_up_to(lo: int, cap: int) -> list[int]:
    sizes, n = [], lo
    while n < cap:
        sizes.append(n)
        n *= 2
    return sizes + [cap]


class PrefillGraphs:
    def __init__(self, model: Any, cache: KVCache, row_slots: torch.Tensor, max_lanes: int, max_len: int,
                 max_tokens: int, capturer: Capturer, hook_tables: HookTables) -> None:
        self.model = model  # forwards/decoder.py: prefill(tokens, lengths, slots, cache, residual_hooks, out)
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
        self.hook_tables = hook_tables  # the runner's (not the runner: no reference cycle)
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
        self.inputs = self.logits = self.model = self.cache = self.row_slots = self.hook_tables = None

    def _forward(self, key: PrefillKey) -> None:
        lb, tb = key.lanes, key.length
        m = self.max_lanes
        lengths, rows = self.inputs[:lb], self.inputs[m : m + lb]
        tokens = self.inputs[2 * m : 2 * m + lb * tb].view(lb, tb)
        hooks = self.hook_tables.for_prefill(rows, lengths, tb, key.steered, key.collecting)  # None: neither
        self.model.prefill(tokens, lengths, self.row_slots[rows], self.cache, residual_hooks=hooks, out=self.logits[:lb])
