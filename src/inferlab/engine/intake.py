"""Requests in, results out: a request made a Prepared item before it reaches a row, and the Result built
from a finished row.

A bad request never raises: `prepare` returns a Prepared item or an error Result naming the numbers and
the fix. The checks are the row features' (batch/features.py, in their order: the constraint sizes the
request, the KV slot checks and tokenizes the prompt, the sampling state its stop table and seed, then
steering and collection), each filling its fields of the item. `RequestSource` pulls requests from the
caller's iterable only when the loop asks, numbering them in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from inferlab.engine.sampler import filter_level
from inferlab.models.output_text import output_text
from inferlab.types import Request, Result, SamplingParams, Timings


@dataclass
class Prepared:
    index: int  # position in the caller's list (generate returns results in this order)
    request: Request
    prompt_ids: list[int]
    sampling: SamplingParams
    seed: int  # in [0, 2^63)
    stop_ids: list[int]  # EOS ids first (unless ignore_eos), then the request's stop ids
    n_eos: int
    timings: Timings
    constraint: Any = None  # the ConstraintProgram of a constrained request, checked against the engine
    steering: list = field(default_factory=list)  # steering.SteerEntry per steered layer (checked)
    collect: Any = None  # collection.CollectPlan, or None
    eos_ids: tuple[int, ...] | None = None  # the EOS ids its stop table starts with; None: the model's
    # host bookkeeping while it runs: the row it occupies, its tokens as snapshots deliver them
    row: int | None = None
    tokens: list[int] = field(default_factory=list)
    retired: bool = False

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def prompt_key(self) -> tuple[int, ...] | None:
        """Requests admitted together with equal keys share one prefill (their prompts are equal); None for
        a request that steers (its prompt's K/V are its own) or collects (it reads its own prompt pass)."""
        if self.steering or self.collect is not None:
            return None
        return tuple(self.prompt_ids)

    @property
    def filter_level(self) -> int:
        s = self.sampling
        return filter_level(s.temperature, s.top_k, s.top_p, s.min_p)


def error_result(request: Request, message: str, prompt_tokens: int, timings: Timings) -> Result:
    return Result(
        id=request.id,
        token_ids=[],
        text=None,
        finish_reason="error",
        prompt_tokens=prompt_tokens,
        timings=timings,
        error=message,
        metadata=request.metadata,
    )


def prepare(index: int, request: Request, check: Callable[[Prepared], str | None], now: float) -> Prepared | Result:
    """The request as a Prepared item, `check` (the runner's: every row feature's check in turn) filling it,
    or the error Result of the first problem it finds."""
    item = Prepared(index, request, [], request.sampling, 0, [], 0, Timings(submitted_s=now), request.constraint)
    problem = check(item)
    if problem is not None:
        return error_result(request, problem, item.prompt_len, item.timings)
    return item


def finished_result(item: Prepared, token_ids: list[int], reason: str, tokenizer, decode_text: bool) -> Result:
    """The Result of a finished row; the text leaves out a final EOS/stop token (token_ids keep it)."""
    text = output_text(tokenizer, token_ids, reason) if decode_text and tokenizer is not None else None
    return Result(
        id=item.request.id,
        token_ids=token_ids,
        text=text,
        finish_reason=reason,
        prompt_tokens=item.prompt_len,
        timings=item.timings,
        metadata=item.request.metadata,
    )


_END = object()


class RequestSource:
    """The caller's requests, pulled lazily: `pull(n)` takes up to n more from the iterable and returns them
    as (index in the iterable, Prepared or error Result). The iterable may be a generator that blocks or
    yields more requests after results came back; the engine pulls only at sync points (engine/loop.py)."""

    def __init__(self, requests: Iterable[Request], prepare_one: Callable[[int, Request], "Prepared | Result"]) -> None:
        self._requests: Iterator[Request] = iter(requests)
        self._prepare = prepare_one
        self.pulled = 0  # requests taken so far (the next one's index)
        self.exhausted = False

    def pull(self, n: int) -> list[tuple[int, "Prepared | Result"]]:
        out: list[tuple[int, Prepared | Result]] = []
        while len(out) < n and not self.exhausted:
            request = next(self._requests, _END)
            if request is _END:
                self.exhausted = True
                break
            out.append((self.pulled, self._prepare(self.pulled, request)))
            self.pulled += 1
        return out
