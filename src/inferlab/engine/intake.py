"""Requests in, results out: validation and tokenisation before a request reaches a row, and the Result
built from a finished row.

A bad request never raises: `prepare` returns either a Prepared request or a Result with finish_reason
"error" and a message naming the numbers and the fix (empty prompt, prompt + max_new_tokens over
max_seq_len, token ids outside the vocabulary, too many stop ids, a constraint the engine cannot run,
steering entries or a collection the engine cannot run: engine/tap_support.py checks those).

A constrained request (Request.constraint = a ConstraintProgram) is sized by its program: the program's
max_new_tokens replaces SamplingParams.max_new_tokens (it is the exact bound of the output, EOS
included), min_new_tokens is 0 (the program forces its own length) and the stop table holds only the
program's EOS, which ends the row (ignore_eos does not apply; stop_token_ids are refused: a stop inside
the template would cut it). Temperature, top-k, top-p, min-p and the seed apply as usual.

`RequestSource` is the lazy side of intake: it pulls requests from the caller's iterable only when the
engine asks (engine/loop.py), numbering them in the order they came.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from inferlab.engine.sampler import filter_level
from inferlab.engine.tap_support import wants_taps
from inferlab.models.output_text import output_text
from inferlab.types import Request, Result, SamplingParams, Timings

SEED_MASK = (1 << 63) - 1


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


def derive_seed(engine_seed: int, request_id: str) -> int:
    """A request's default seed: a stable function of the engine seed and the request id."""
    return ((engine_seed & 0xFFFFFFFF) << 32 | zlib.crc32(request_id.encode("utf-8"))) & SEED_MASK


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


def prepare(
    index: int,
    request: Request,
    tokenizer,
    vocab_size: int,
    max_seq_len: int,
    eos_ids: tuple[int, ...],
    max_stop_ids: int,
    engine_seed: int,
    now: float,
    check_constraint: Callable[[Any], str | None] = lambda program: "this engine runs no constraints",
    check_taps: Callable[[Request, SamplingParams], Any] = lambda request, s: "this engine runs no steering",
) -> Prepared | Result:
    """`check_constraint(program)` returns None when the engine can run the program, else why not;
    `check_taps(request, sampling)` returns (steering entries, collect plan) or why they cannot run."""
    timings = Timings(submitted_s=now)
    s = request.sampling
    if request.constraint is not None:
        problem = check_constraint(request.constraint)
        if problem is not None:
            return error_result(request, f"constraint refused: {problem}", 0, timings)
        if s.stop_token_ids:
            return error_result(
                request,
                f"stop_token_ids {list(s.stop_token_ids)} do not apply to a constrained request (its program "
                "ends it with EOS, and a stop inside the template would cut it); drop them",
                0,
                timings,
            )
        s = dataclasses.replace(s, max_new_tokens=request.constraint.max_new_tokens, min_new_tokens=0, ignore_eos=False)
        eos_ids = (request.constraint.eos_token_id,)  # the stop table: the program's EOS, nothing else
    if request.prompt_ids is not None:
        prompt_ids = [int(t) for t in request.prompt_ids]
    elif tokenizer is None:
        return error_result(
            request,
            "a text prompt needs a tokenizer, but this engine has none (the model folder has no tokenizer "
            "files, or EngineConfig.load_tokenizer=False); send prompt_ids or add the tokenizer files",
            0,
            timings,
        )
    elif not request.prompt.strip():
        return error_result(request, "the prompt is empty; give at least one token of text", 0, timings)
    else:
        prompt_ids = list(tokenizer(request.prompt).input_ids)
    n = len(prompt_ids)
    if n == 0:
        return error_result(request, "the prompt is empty (0 tokens); give at least one token", 0, timings)
    bad = [t for t in prompt_ids if not 0 <= t < vocab_size]
    if bad:
        return error_result(
            request, f"prompt token ids {bad[:5]} are outside the vocabulary [0, {vocab_size})", n, timings
        )
    if request.constraint is not None and n + s.max_new_tokens > max_seq_len:
        return error_result(
            request,
            f"prompt of {n} tokens + the constraint's longest output of {s.max_new_tokens} tokens = "
            f"{n + s.max_new_tokens} exceeds max_seq_len={max_seq_len}; start the engine with max_seq_len >= "
            f"{n + s.max_new_tokens} (the program bounds the output exactly)",
            n,
            timings,
        )
    if n + s.max_new_tokens > max_seq_len:
        room = max_seq_len - n  # new tokens a row still holds beside this prompt
        lower = f"lower max_new_tokens to {room}, " if room >= 1 else ""
        return error_result(
            request,
            f"prompt of {n} tokens + max_new_tokens={s.max_new_tokens} = {n + s.max_new_tokens} exceeds "
            f"max_seq_len={max_seq_len}; shorten the prompt, {lower}or start the engine with a larger max_seq_len",
            n,
            timings,
        )
    stops = [] if s.ignore_eos else list(eos_ids)
    stops += [t for t in s.stop_token_ids if t not in stops]
    bad_stops = [t for t in stops if not 0 <= t < vocab_size]
    if bad_stops:
        return error_result(
            request, f"stop token ids {bad_stops} are outside the vocabulary [0, {vocab_size})", n, timings
        )
    if len(stops) > max_stop_ids:
        return error_result(
            request,
            f"{len(stops)} EOS + stop token ids exceed max_stop_ids={max_stop_ids}; pass fewer stop ids "
            "or raise EngineConfig.max_stop_ids",
            n,
            timings,
        )
    steering, collect = [], None
    if wants_taps(request):
        checked = check_taps(request, s)
        if isinstance(checked, str):
            return error_result(request, checked, n, timings)
        steering, collect = checked
    seed = (s.seed & SEED_MASK) if s.seed is not None else derive_seed(engine_seed, request.id)
    n_eos = 0 if s.ignore_eos else len(eos_ids)
    return Prepared(index, request, prompt_ids, s, seed, stops, n_eos, timings, request.constraint, steering, collect)


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
