"""Batch planning, chunking, dynamic padding, chunked tokenisation and order restoring (workloads/batching.py)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferlab.errors import ConfigError
from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
from inferlab.workloads.batching import (
    BatchLimits,
    iter_chunks,
    pad_batch,
    padded_tokens,
    plan_batches,
    reorder_jsonl,
    tokenize_chunk,
)


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=0, max_size=80),
    max_rows=st.integers(1, 16),
    max_tokens=st.one_of(st.none(), st.integers(1, 2000)),
)
def test_plan_batches_covers_every_row_once_within_limits(lengths, max_rows, max_tokens):
    limits = BatchLimits(max_rows, max_tokens)
    batches = plan_batches(lengths, limits)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))  # every row exactly once
    for b in batches:
        assert 1 <= len(b) <= max_rows
        if max_tokens is not None and len(b) > 1:
            assert padded_tokens([lengths[i] for i in b]) <= max_tokens
    # longest first across the whole plan: neighbours in length are batched together
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)


def test_plan_batches_pads_each_batch_to_its_own_longest_not_the_global_longest():
    lengths = [2000] + [100] * 63  # one long outlier, as in the seeds' 560 GB story
    batches = plan_batches(lengths, BatchLimits(max_rows=64, max_tokens=3999))
    assert batches[0] == [0]  # the outlier runs alone
    cost = sum(padded_tokens([lengths[i] for i in b]) for b in batches)
    assert cost == 2000 + 63 * 100  # no padding to 2000 for the short rows
    assert 64 * 2000 > cost * 15  # what padding everything to the longest would have cost


def test_batch_limits_validate():
    with pytest.raises(ConfigError, match="batch_size=0"):
        BatchLimits(0)
    with pytest.raises(ConfigError, match="max batch tokens"):
        BatchLimits(4, 0)


def test_iter_chunks_is_lazy_and_complete():
    consumed = []

    def source():
        for i in range(10):
            consumed.append(i)
            yield i

    chunks = iter_chunks(source(), 4)
    assert next(chunks) == [0, 1, 2, 3]
    assert consumed == [0, 1, 2, 3]  # nothing read beyond the first chunk
    assert list(chunks) == [[4, 5, 6, 7], [8, 9]]


def test_tokenize_chunk_matches_one_text_at_a_time():
    tok = build_builtin_tokenizer()
    texts = ["hello world", "x", "numbers 12345 and [SMILES]CCO[/SMILES]", "  spaced  "]
    one_by_one = [tok(t)["input_ids"] for t in texts]
    assert tokenize_chunk(tok, texts) == one_by_one
    assert tokenize_chunk(tok, texts, add_special_tokens=False) == [ids[1:] for ids in one_by_one]  # no BOS
    assert tokenize_chunk(tok, []) == []


def test_pad_batch_right_and_left():
    ids, mask = pad_batch([[5, 6, 7], [8]], pad_id=0, side="right")
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    ids, mask = pad_batch([[5, 6, 7], [8]], pad_id=0, side="left")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    with pytest.raises(ConfigError):
        pad_batch([[1]], 0, side="middle")


def test_reorder_jsonl_restores_input_order_and_keeps_everything(tmp_path):
    ids = [f"r{i}" for i in range(50)]
    shuffled = ids[:]
    random.Random(0).shuffle(shuffled)
    path = tmp_path / "out.jsonl"
    rows = [{"id": i, "v": i.upper(), "text": "ünïcode"} for i in shuffled] + [{"id": "stale", "v": 0}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    reorder_jsonl(path, ids)
    back = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in back] == ids + ["stale"]  # input order; unknown ids kept at the end
    assert all(r["v"] == r["id"].upper() for r in back[:-1])
    reorder_jsonl(tmp_path / "missing.jsonl", ids)  # nothing to do, no error
