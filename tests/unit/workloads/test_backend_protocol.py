"""The backend protocol (workloads/backend.py): what a backend does not support is an error Result, a batch
backend's rows are cut at their first EOS, the engine backend shortens warm-up calls and ends its engine, and a
borrowed backend is never closed by the run that borrows it."""

from __future__ import annotations

import pytest

from inferlab.engine import EngineConfig
from inferlab.errors import UnsupportedError
from inferlab.types import Collect, Request, SamplingParams, Steer
from inferlab.workloads.backend import Backend, Supports, finished_result
from inferlab.workloads.engine_backend import EngineBackend, shortened
from inferlab.workloads.text import borrowed

PLAIN = Request("plain", prompt_ids=(1, 2, 3))
CONSTRAINED = Request("constrained", prompt_ids=(1, 2), constraint=object())
STEERED = Request("steered", prompt_ids=(1,), steering=(Steer(0, "v", 1.0),))
COLLECTING = Request("collecting", prompt_ids=(1,), collect=Collect((0,)))


class Echo(Backend):
    """Generates its prompt back, for what `supports` allows."""

    name = "echo"

    def __init__(self, supports: Supports = Supports()) -> None:
        self.supports = supports
        self.closed = False

    def generate(self, requests, stop_after_steps=None):
        served, refused = self.split_supported(requests)
        return iter(refused + [finished_result(r, list(r.prompt_ids), frozenset()) for r in served])

    def close(self) -> None:
        self.closed = True


def test_a_request_asking_for_what_the_backend_does_not_serve_is_an_error_result():
    requests = [PLAIN, CONSTRAINED, STEERED, COLLECTING]
    results = {r.id: r for r in Echo().generate(requests)}
    assert results["plain"].ok and results["plain"].token_ids == [1, 2, 3] and results["plain"].prompt_tokens == 3
    assert "constrained requests do not run on backend echo" in results["constrained"].error
    assert "steered requests" in results["steered"].error and "collect hidden states" in results["collecting"].error
    assert all(not results[r.id].ok and results[r.id].finish_reason == "error" for r in requests[1:])
    everything = Echo(Supports(constraint=True, steering=True, collect=True))
    assert all(r.ok for r in everything.generate(requests))


def test_the_defaults_generate_nothing_and_refuse_to_encode_or_steer():
    backend = Backend()
    assert [r.finish_reason for r in backend.generate([PLAIN])] == ["error"]
    with pytest.raises(UnsupportedError, match="does not encode"):
        backend.encode([[1, 2]])
    with pytest.raises(UnsupportedError, match="does not steer"):
        backend.add_steering_vectors(object())


def test_a_batch_row_is_cut_after_its_first_eos():
    cut = finished_result(PLAIN, [5, 9, 7, 9], frozenset({9}))
    assert cut.token_ids == [5, 9] and cut.finish_reason == "eos"
    whole = finished_result(PLAIN, [5, 6], frozenset({9}))
    assert whole.token_ids == [5, 6] and whole.finish_reason == "length"


def test_a_warm_up_call_shortens_requests_but_not_a_constraints_length():
    exact = Request("r", prompt_ids=(1,), sampling=SamplingParams(max_new_tokens=10, min_new_tokens=10))
    short = shortened(exact, 4).sampling
    assert (short.max_new_tokens, short.min_new_tokens) == (4, 4)
    assert shortened(exact, 20) is exact and shortened(CONSTRAINED, 1) is CONSTRAINED


def test_the_engine_backend_loads_generates_and_closes(tiny_checkpoint):
    model = tiny_checkpoint("tiny")
    backend = EngineBackend(EngineConfig(model=model, device="cpu", max_slots=2, max_seq_len=32, decode_text=False))
    backend.load(model)
    assert backend.eos_token_ids
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6, min_new_tokens=6)
    requests = [Request(str(i), prompt_ids=(3 + i, 4, 5), sampling=greedy) for i in range(3)]
    assert sorted(len(r.token_ids) for r in backend.generate(requests, stop_after_steps=2)) == [2, 2, 2]
    assert {r.id: len(r.token_ids) for r in backend.generate(requests)} == {"0": 6, "1": 6, "2": 6}
    assert "engine" in backend.extra_metrics()
    backend.close()
    assert backend.engine.closed


def test_a_borrowed_backend_keeps_its_name_and_is_not_closed_by_the_borrower():
    owner = Echo()
    lent = borrowed(owner)
    assert lent.name == "echo" and [r.id for r in lent.generate([PLAIN])] == ["plain"]
    lent.close()
    assert not owner.closed
