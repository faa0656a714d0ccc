"""Engine.generate / Engine.stream on a tiny random checkpoint (CPU): errors, order, seeds, batching modes."""

from __future__ import annotations

import os

import pytest

from inferlab.engine import Engine, EngineConfig
from inferlab.errors import ConfigError, UnsupportedError
from inferlab.types import Request, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=10)


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=3, max_seq_len=48, decode_steps_per_sync=3))


def _req(rid, prompt_ids, **sampling):
    return Request(id=rid, prompt_ids=tuple(prompt_ids), sampling=SamplingParams(**sampling))


def test_bad_requests_become_error_results_and_the_batch_goes_on(engine):
    requests = [
        _req("ok1", [5, 6, 7], temperature=0, max_new_tokens=4),
        Request(id="empty-text", prompt="", sampling=GREEDY),
        _req("empty-ids", [], temperature=0),
        _req("too-long", list(range(40)), temperature=0, max_new_tokens=20),
        _req("full-prompt", list(range(48)), temperature=0, max_new_tokens=1),
        _req("bad-id", [5, 99999], temperature=0),
        _req("bad-stop", [5], temperature=0, stop_token_ids=(123456,)),
        _req("many-stops", [5], temperature=0, stop_token_ids=tuple(range(20))),
        Request(id="constrained", prompt_ids=(5,), constraint=object()),
        _req("ok2", [9], temperature=0, max_new_tokens=4),
    ]
    results = engine.generate(requests)
    assert [r.id for r in results] == [r.id for r in requests]  # input order
    by_id = {r.id: r for r in results}
    assert by_id["ok1"].ok and len(by_id["ok1"].token_ids) == 4 and by_id["ok2"].ok
    for rid in ("empty-text", "empty-ids", "too-long", "full-prompt", "bad-id", "bad-stop", "many-stops", "constrained"):
        assert by_id[rid].finish_reason == "error" and by_id[rid].error and not by_id[rid].token_ids, rid
    assert "40 tokens + max_new_tokens=20 = 60 exceeds max_seq_len=48" in by_id["too-long"].error
    assert "lower max_new_tokens to 8" in by_id["too-long"].error
    assert "lower max_new_tokens" not in by_id["full-prompt"].error  # no value would do: the prompt fills the row
    assert "empty" in by_id["empty-text"].error and "99999" in by_id["bad-id"].error


def test_stream_yields_every_result_once(engine):
    requests = [_req(f"r{i}", [i + 1] * (i + 1), temperature=0, max_new_tokens=2 + 3 * i) for i in range(7)]
    streamed = list(engine.stream(requests))
    assert sorted(r.id for r in streamed) == sorted(r.id for r in requests)
    assert streamed[0].id == "r0"  # the shortest finishes first
    assert all(len(r.token_ids) == 2 + 3 * int(r.id[1:]) and r.finish_reason == "length" for r in streamed)


def test_the_stats_count_the_rows_a_chunk_computed_and_those_live_in_it(engine):
    before = engine.stats.as_dict()
    requests = [_req(f"l{i}", [i + 3], temperature=0, max_new_tokens=n) for i, n in enumerate((4, 8, 11))]
    results = engine.generate(requests)
    after = engine.stats.as_dict()
    row_steps, live = (after[k] - before[k] for k in ("row_steps", "live_row_steps"))
    decoded = sum(len(r.token_ids) - 1 for r in results)  # each request's first token comes from its prefill
    # chunks of 3 steps: a row that ends inside one stays live to its end, and the buckets hold idle rows too
    assert decoded < live <= row_steps and live <= decoded + 2 * len(requests)


def test_a_seed_gives_the_same_tokens_whatever_the_batch(engine):
    target = dict(temperature=1.0, top_p=0.9, top_k=50, max_new_tokens=12, seed=1234)
    alone = engine.generate([_req("x", [17, 4, 99], **target)])[0].token_ids
    neighbours = [_req(f"n{i}", [i + 3] * (2 * i + 1), temperature=0.7, max_new_tokens=5 + i, seed=i) for i in range(4)]
    crowded = engine.generate(neighbours[:2] + [_req("x", [17, 4, 99], **target)] + neighbours[2:])
    assert crowded[2].token_ids == alone
    other_seed = engine.generate([_req("x", [17, 4, 99], **dict(target, seed=99))])[0].token_ids
    assert other_seed != alone


def test_requests_without_seed_are_reproducible_by_engine_seed_and_id(engine, tiny_checkpoint):
    request = _req("no-seed", [7, 7, 7], temperature=1.0, max_new_tokens=10)
    first = engine.generate([request])[0].token_ids
    assert engine.generate([_req("other", [1]), request])[1].token_ids == first
    reseeded = Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=3, max_seq_len=48, seed=1))
    assert reseeded.generate([request])[0].token_ids != first


def test_static_and_continuous_batching_give_the_same_greedy_tokens(tiny_checkpoint, engine):
    requests = [_req(f"r{i}", [3 + i] * (1 + i % 4), temperature=0, max_new_tokens=3 + (7 * i) % 13) for i in range(8)]
    static = Engine(
        EngineConfig(
            model=tiny_checkpoint("tiny"), max_slots=3, max_seq_len=48, batching="static", decode_steps_per_sync=3
        )
    )
    continuous = engine.generate(requests)
    assert [r.token_ids for r in static.generate(requests)] == [r.token_ids for r in continuous]
    moves_before = engine.stats.row_moves
    sampled = [
        _req(f"s{i}", [5 + i] * (7 - i), temperature=1.0, top_p=0.8, max_new_tokens=2 + 5 * i, seed=i) for i in range(6)
    ]  # the longest outputs have the shortest prompts: prefill batches by length put them in the top rows
    together = engine.generate(sampled)
    assert engine.stats.row_moves > moves_before  # the drained tail moved down to smaller buckets
    alone = [engine.generate([r])[0].token_ids for r in requests + sampled]
    assert alone == [r.token_ids for r in continuous + together]  # refills and compaction change nothing


def test_an_abandoned_stream_does_not_disturb_the_next_call(engine):
    requests = [_req(f"r{i}", [4 + i, 9], temperature=0, max_new_tokens=3 + 4 * i) for i in range(5)]
    expected = [r.token_ids for r in engine.generate(requests)]
    stream = engine.stream(requests)
    next(stream)  # take one result and walk away with rows still running
    del stream
    assert [r.token_ids for r in engine.generate(requests)] == expected


def test_text_in_text_out(engine):
    [result] = engine.generate([Request(id="t", prompt="Hello world", sampling=GREEDY)])
    assert result.prompt_tokens == len(engine.tokenizer("Hello world").input_ids)
    assert result.text == engine.tokenizer.decode(result.token_ids, skip_special_tokens=False)


def test_eos_is_left_out_of_the_text(engine):
    free = engine.generate([_req("a", [5, 6], temperature=0, max_new_tokens=6)])[0].token_ids
    stop = free[2]
    [result] = engine.generate([_req("a", [5, 6], temperature=0, max_new_tokens=6, stop_token_ids=(stop,))])
    assert result.finish_reason == "stop" and result.token_ids[-1] == stop
    assert result.text == engine.tokenizer.decode(result.token_ids[:-1], skip_special_tokens=False)


def test_stats_count_what_was_returned(engine):
    before = engine.stats.generated_tokens
    results = engine.generate([_req(f"s{i}", [2, 3], temperature=0, max_new_tokens=5) for i in range(4)])
    assert engine.stats.generated_tokens - before == sum(len(r.token_ids) for r in results) == 20
    assert engine.stats.load_s > 0 and engine.stats.prefill_s > 0 and engine.stats.decode_s > 0


def test_configuration_errors_name_the_problem(tiny_checkpoint):
    with pytest.raises(ConfigError, match="max_position_embeddings=512"):
        Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=1, max_seq_len=1000))
    with pytest.raises(ConfigError, match="cuda_graphs=True needs a CUDA device"):
        Engine(EngineConfig(model=tiny_checkpoint("tiny"), device="cpu", cuda_graphs=True))
    with pytest.raises(ConfigError, match="batching="):
        EngineConfig(model="x", batching="dynamic")
    if os.environ.get("TRITON_INTERPRET") != "1":
        with pytest.raises(UnsupportedError, match="kernels='triton' needs a CUDA device"):
            Engine(
                EngineConfig(model=tiny_checkpoint("tiny"), device="cpu", kernels="triton", max_slots=1, max_seq_len=8)
            )


def test_unsupported_architecture_is_refused_before_loading(tiny_checkpoint):
    with pytest.raises(UnsupportedError, match="Qwen2ForSequenceClassification.*is not supported by the inferlab engine"):
        Engine(EngineConfig(model=tiny_checkpoint("tiny-qwen2-cls")))


def test_sliding_window_is_exact_within_the_window_and_refused_beyond(tiny_checkpoint, tmp_path):
    import json
    import shutil

    path = shutil.copytree(tiny_checkpoint("tiny-mistral"), tmp_path / "windowed")
    config = json.loads((path / "config.json").read_text())
    config["sliding_window"] = 32
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedError, match="window 32.*max_seq_len <= 32"):
        Engine(EngineConfig(model=path, max_slots=1, max_seq_len=64))
    assert Engine(EngineConfig(model=path, max_slots=1)).plan.max_seq_len == 32  # the default fits the window
