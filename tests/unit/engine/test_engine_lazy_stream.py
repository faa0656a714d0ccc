"""Lazy intake: Engine.stream pulls its iterable at sync points, only as free rows and a short queue need it;
a generator may yield more requests after results came back; generate keeps request order; intake errors
still come back as error Results; the engine's state survives an abandoned stream. And the guard that lets
a decode graph be captured while rows are live: steps run inside `preserved_rows` change nothing."""

from __future__ import annotations

import itertools

import pytest

from inferlab.engine import Engine, EngineConfig
from inferlab.types import Request, SamplingParams
from tests.unit.engine.eager_capturer import EagerCapturer

SLOTS, AHEAD = 4, 2


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=SLOTS, max_seq_len=48,
                               decode_steps_per_sync=2, queue_ahead=AHEAD, min_admission=1))


def _req(i, new=6, **extra):
    return Request(id=f"r{i}", prompt_ids=(3 + i % 50, 7, 1 + i % 3),
                   sampling=SamplingParams(temperature=1.0, seed=i, max_new_tokens=new, **extra))


def test_an_endless_generator_is_pulled_only_as_rows_and_the_queue_need_it(engine):
    pulled = []

    def endless():
        for i in itertools.count():
            pulled.append(i)
            yield _req(i, new=4 + i % 5)

    seen = []
    for result in engine.stream(endless()):
        assert result.ok
        seen.append(result.id)
        # never more than the rows, the queue ahead, and what one sync point may take before it launches
        assert len(pulled) - len(seen) <= SLOTS + AHEAD + SLOTS
        if len(seen) == 25:
            break
    assert len(pulled) < 25 + 2 * SLOTS + AHEAD
    after = engine.generate([_req(999)])  # the abandoned stream left nothing behind
    assert after[0].ok and after[0].token_ids == engine.generate([_req(999)])[0].token_ids


def test_a_generator_may_yield_more_after_results_came_back(engine):
    """Retries fed back by the consumer (as the conformer pipeline's stereo retries are): the generator
    yields what the consumer queued before its next request; lazily pulled, the retries run in this call."""
    retries: list[Request] = []
    pulled = []

    def feed():
        for i in range(16):
            while retries:
                pulled.append(retries[0].id)
                yield retries.pop(0)
            pulled.append(f"r{i}")
            yield _req(i, new=3 + i % 4)

    done = []
    for result in engine.stream(feed()):
        assert result.ok
        done.append(result.id)
        if result.id in ("r0", "r1", "r2"):
            retries.append(Request(id=result.id + "-again", prompt_ids=(9, 9),
                                   sampling=SamplingParams(temperature=0, max_new_tokens=3)))
    assert sorted(done) == sorted([f"r{i}" for i in range(16)] + ["r0-again", "r1-again", "r2-again"])
    for rid in ("r0", "r1", "r2"):
        assert done.index(rid + "-again") > done.index(rid)
    assert pulled.index("r0-again") < pulled.index("r15")  # pulled lazily, not after the whole list


def test_generate_keeps_request_order_and_errors_with_a_generator(engine):
    def requests():
        for i in range(10):
            if i == 4:
                yield Request(id="bad", prompt_ids=(), sampling=SamplingParams(max_new_tokens=3))
            elif i == 7:
                yield _req(i, new=100)  # prompt + 100 > max_seq_len
            else:
                yield _req(i, new=2 + (9 - i))

    results = engine.generate(requests())
    assert [r.id for r in results] == [f"r{i}" if i not in (4,) else "bad" for i in range(10)]
    assert results[4].finish_reason == "error" and "empty" in results[4].error
    assert results[7].finish_reason == "error" and "max_seq_len" in results[7].error
    assert all(r.ok for i, r in enumerate(results) if i not in (4, 7))
    again = engine.generate(list(requests()))  # a list and a generator: the same call
    assert [(r.token_ids, r.error) for r in results] == [(r.token_ids, r.error) for r in again]


def test_intake_errors_come_back_while_the_rest_runs(engine):
    requests = [Request(id="bad0", prompt_ids=(10**9,), sampling=SamplingParams())] + [_req(i) for i in range(5)]
    streamed = list(engine.stream(iter(requests)))
    assert streamed[0].id == "bad0" and "outside the vocabulary" in streamed[0].error
    assert sorted(r.id for r in streamed[1:]) == [f"r{i}" for i in range(5)]


def test_steps_inside_preserved_rows_change_nothing(engine, monkeypatch):
    """What a lazy graph capture does mid-run (one eager warm-up step over the bucket inside
    runner.preserved_rows), done before every chunk: the tokens stay those of a plain run."""
    requests = [_req(i, new=5 + i) for i in range(7)]
    plain = [r.token_ids for r in engine.generate(requests)]
    runner = engine.runner
    real_decode = runner.decode

    def decode_after_a_preserved_step(plan):
        with runner.preserved_rows():
            runner.decode_step(plan.bucket, plan.variant, None)
            runner.decode_step(plan.bucket, plan.variant, None)
        real_decode(plan)

    monkeypatch.setattr(runner, "decode", decode_after_a_preserved_step)
    assert [r.token_ids for r in engine.generate(requests)] == plain


def test_graphs_captured_lazily_under_live_rows_give_the_eager_tokens(tiny_checkpoint, engine):
    """The runner's graph path on CPU (decode graphs per bucket and variant captured at first need, while
    rows are live, with the warm-up inside preserved_rows; prefill graphs per bucket), with a capturer that
    replays eagerly: the tokens of the plain eager engine, every (bucket, variant) captured once."""
    from inferlab.engine.graphs import DecodeGraphs
    from inferlab.engine.prefill_graphs import PrefillGraphs

    graphed = Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=SLOTS, max_seq_len=48,
                                  decode_steps_per_sync=2, queue_ahead=AHEAD, min_admission=1))
    runner, capturer = graphed.runner, EagerCapturer()
    runner.graphs = DecodeGraphs(runner.sizes, capturer)
    runner.prefill_graphs = PrefillGraphs(runner.model, runner.cache, runner.slots, SLOTS, runner.cache.max_len,
                                          graphed.max_prefill_tokens, capturer, runner.hook_tables)
    requests = [_req(i, new=3 + (5 * i) % 11, top_p=0.9 if i % 3 else 1.0) for i in range(11)]
    requests += [Request(id="greedy", prompt_ids=(4, 4), sampling=SamplingParams(temperature=0, max_new_tokens=9))]
    assert [r.token_ids for r in graphed.generate(requests)] == [r.token_ids for r in engine.generate(requests)]
    keys = list(runner.graphs.graphs)
    assert len(keys) == len(set(keys)) >= 2 and runner.prefill_graphs.graphs  # buckets 4 and 2 at least
    assert capturer.count == len(keys) + len(runner.prefill_graphs.graphs)


def test_on_tokens_reports_tokens_from_the_first_chunk_before_any_result(engine):
    """Progress from the engine's own counts: tokens of rows still running reach `on_tokens` at each sync
    point, before the first Result, and over the call they add up to the Results' tokens."""
    told, at_first_result = [], None
    results = []
    requests = (_req(i, new=6 if i == 0 else 20, ignore_eos=True) for i in range(SLOTS))
    for result in engine.stream(requests, on_tokens=told.append):
        if at_first_result is None:
            at_first_result = sum(told)
        results.append(result)
    # the first Result (6 tokens) came while the other rows ran: their tokens so far were told already
    assert len(results[0].token_ids) < at_first_result < sum(len(r.token_ids) for r in results)
    assert sum(told) == sum(len(r.token_ids) for r in results)
    assert all(n > 0 for n in told)
    before = len(told)
    generated = engine.generate([_req(9, new=5, ignore_eos=True)], on_tokens=told.append)
    assert sum(told[before:]) == len(generated[0].token_ids) == 5


def test_with_on_tokens_the_first_count_comes_after_one_decode_step(engine):
    """The first chunk of a call that reports progress is one step; on a CPU its snapshot is read at once
    (nothing overlaps it), so the caller hears of tokens after one decode step, not after two chunks."""
    before, steps_at_first = engine.stats.decode_steps, []

    def told(n):
        if not steps_at_first:
            steps_at_first.append((engine.stats.decode_steps - before, n))

    results = list(engine.stream((_req(i, new=12, ignore_eos=True) for i in range(SLOTS)), on_tokens=told))
    assert steps_at_first == [(1, 2 * SLOTS)]  # the prefill's token and the first step's, of every row
    assert all(len(r.token_ids) == 12 for r in results)
