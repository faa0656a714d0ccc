"""The sampling and stop state of each row (rows.RowState: parameters, stop table, progress, generated
tokens) as a row feature, and its intake check: the stop table (EOS ids first, then the request's stop ids)
within the vocabulary and max_stop_ids, and the request's seed. Its bit of the graph Variant is the sampler's
filter level, the highest its requests need."""

from __future__ import annotations

import zlib
from typing import Any, Sequence

import torch

from inferlab.engine.batch.feature import RowFeature, RowMoves, RowSet
from inferlab.engine.batch.setup import BatchSetup
from inferlab.engine.rows import RowState
from inferlab.engine.transfer import tensor_on

SEED_MASK = (1 << 63) - 1


def derive_seed(engine_seed: int, request_id: str) -> int:
    """A request's default seed: a stable function of the engine seed and the request id."""
    return ((engine_seed & 0xFFFFFFFF) << 32 | zlib.crc32(request_id.encode("utf-8"))) & SEED_MASK


class SamplingRows(RowFeature):
    bit = "level"

    def __init__(self, setup: BatchSetup) -> None:
        self.rows = RowState.allocate(setup.rows, setup.max_stop_ids, setup.max_len, setup.device)
        self.vocab_size = setup.spec.vocab_size
        self.eos_ids = setup.spec.eos_token_ids
        self.max_stop_ids = setup.max_stop_ids
        self.seed = setup.seed

    def check(self, item, tokenizer: Any) -> str | None:
        s = item.sampling
        eos_ids = item.eos_ids if item.eos_ids is not None else self.eos_ids
        stops = [] if s.ignore_eos else list(eos_ids)
        stops += [t for t in s.stop_token_ids if t not in stops]
        bad_stops = [t for t in stops if not 0 <= t < self.vocab_size]
        if bad_stops:
            return f"stop token ids {bad_stops} are outside the vocabulary [0, {self.vocab_size})"
        if len(stops) > self.max_stop_ids:
            return (f"{len(stops)} EOS + stop token ids exceed max_stop_ids={self.max_stop_ids}; pass fewer stop "
                    "ids or raise EngineConfig.max_stop_ids")
        item.stop_ids, item.n_eos = stops, 0 if s.ignore_eos else len(eos_ids)
        item.seed = (s.seed & SEED_MASK) if s.seed is not None else derive_seed(self.seed, item.request.id)
        return None

    def wanted_by(self, items) -> int:
        return max(item.filter_level for item in items)

    def admit(self, rows: Sequence[int], items) -> None:
        n, width = len(items), self.rows.stop_ids.shape[1]
        padded_stops = []
        for item in items:
            ids = list(item.stop_ids) or [0]
            padded_stops.append((ids + [ids[0]] * width)[:width])  # pad by repeating entry 0
        stop_table = torch.tensor(padded_stops, dtype=torch.int64).reshape(n, width)

        def col(values, dtype):
            return torch.tensor(values, dtype=dtype)

        i64, f32 = torch.int64, torch.float32
        s = [item.sampling for item in items]
        self.rows.write_(
            tensor_on(list(rows), i64, self.rows.tokens.device),
            {
                "tokens": col([item.prompt_ids[-1] for item in items], i64),
                "positions": col([item.prompt_len - 1 for item in items], i64),  # where the prompt's last K/V is
                "active": col([True] * n, torch.bool),
                "finished": col([False] * n, torch.bool),
                "reason": col([0] * n, i64),
                "n_out": col([0] * n, i64),
                "copied": col([0] * n, i64),
                "max_new": col([p.max_new_tokens for p in s], i64),
                "min_new": col([p.min_new_tokens for p in s], i64),
                "temperature": col([p.temperature for p in s], f32),
                "top_k": col([p.top_k for p in s], i64),
                "top_p": col([p.top_p for p in s], f32),
                "min_p": col([p.min_p for p in s], f32),
                "seeds": col([item.seed for item in items], i64),
                "stop_ids": stop_table,
                "n_eos": col([item.n_eos for item in items], i64),
                "n_stop": col([len(item.stop_ids) for item in items], i64),
            },
        )

    def release(self, rows: RowSet) -> None:
        # index_fill_, not `t[idx] = False`: a Python scalar assigned by index is copied to the device from
        # pageable memory, which synchronises with the stream: the host would wait out the running chunk
        self.rows.active.index_fill_(0, rows.index, False)
        self.rows.finished.index_fill_(0, rows.index, False)
        self.rows.positions.index_fill_(0, rows.index, 0)

    def move(self, moves: RowMoves) -> None:
        self.rows.move_(moves.src, moves.dst)

    def saved(self) -> list[torch.Tensor]:
        return self.rows.tensors()

    def close(self) -> None:
        self.rows = None
