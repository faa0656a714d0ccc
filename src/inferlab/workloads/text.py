"""Text generation as a batch job: prompts JSONL in, completions JSONL out, resumable, never dying on a row.

Input lines: {"id", "prompt"} or {"id", "prompt_ids"}, optionally with per-line sampling overrides (any
field of SamplingParams: max_new_tokens, min_new_tokens, temperature, top_k, top_p, min_p, seed,
stop_token_ids, ignore_eos); other keys are ignored. Output lines: {"id", "status" ("ok" | "error"), "text",
"token_ids", "finish_reason", "prompt_tokens", "output_tokens", "backend" ("inferlab" | "hf"; null for a
line that never reached one), "error"}, in input order, each appended and flushed once the rows before it
are. A rerun on the same output skips the ids already written (with retry_errors, the error rows are
taken out and run again). Bad JSON, a missing or duplicated id, bad overrides, empty and over-long prompts
become error rows; the run goes on; defaults that no line can run with are refused before any work.

The generation itself is a backend (workloads/backend.py: `generate` gives Results as they finish, `close`
gives the model's memory back). BACKENDS maps names to factories of loaded backends; "inferlab" is our
engine (engine_backend.py), "hf" is transformers' generate for any causal LM (hf_text_backend.py); "auto"
picks the engine and falls back to "hf" (logged) for an architecture the engine's registry does not list or
any UnsupportedError at engine start-up. run_text_generation closes the backend it opened when the run ends
(`borrowed(backend)` keeps one open across runs: its owner closes it).

Steering (`--steer FILE` and per-line "steer_layer" / "steer_scale" / "steer_vector") and hidden states
collected while generating (`--collect-layers ... --collect-output acts.safetensors`, resumable alongside
the JSONL) are text_steering_collection.py's; both backends run them.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Container, Iterable, Iterator

from inferlab.engine import EngineConfig
from inferlab.errors import ConfigError, InputError, UnsupportedError
from inferlab.input_order import InputOrder
from inferlab.inputs.lines import DEFAULT_MAX_LINE_CHARS
from inferlab.inputs.record_ids import IdClaims, RecordIds
from inferlab.jsonl_io import InputRecord, ResumableJsonlWriter, read_jsonl_records
from inferlab.types import Collect, Request, Result, SamplingParams
from inferlab.workloads.backend import Backend
from inferlab.workloads.engine_backend import EngineBackend
from inferlab.workloads.error_groups import ErrorGroups
from inferlab.workloads.text_steering_collection import ActivationSink, CollectSettings, SteerSettings, line_steering

if TYPE_CHECKING:
    from inferlab.engine import SteeringVectors

log = logging.getLogger(__name__)

# (the engine's configuration: its model and knobs, named steering vectors or None) -> a loaded backend
BackendFactory = Callable[[EngineConfig, "SteeringVectors | None"], Backend]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# Per-line sampling overrides and the JSON types they accept.
OVERRIDE_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_new_tokens": (_is_int, "an integer"),
    "min_new_tokens": (_is_int, "an integer"),
    "top_k": (_is_int, "an integer"),
    "seed": (lambda v: v is None or _is_int(v), "an integer or null"),
    "temperature": (lambda v: _is_int(v) or isinstance(v, float), "a number"),
    "top_p": (lambda v: _is_int(v) or isinstance(v, float), "a number"),
    "min_p": (lambda v: _is_int(v) or isinstance(v, float), "a number"),
    "ignore_eos": (lambda v: isinstance(v, bool), "true or false"),
    "stop_token_ids": (lambda v: isinstance(v, list) and all(_is_int(t) for t in v), "a list of integers"),
}


def engine_backend(config: EngineConfig, steering: SteeringVectors | None = None) -> Backend:
    """Our engine, started with `config`."""
    backend = EngineBackend(config)
    backend.load(config.model)
    if steering is not None:
        backend.add_steering_vectors(steering)
    return backend


class _Borrowed(Backend):
    """A backend run without being closed, under its own name."""

    def __init__(self, backend: Backend) -> None:
        self._backend, self.name = backend, backend.name

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        return self._backend.generate(requests, stop_after_steps)


def borrowed(backend: Backend) -> Backend:
    """`backend` without its close(): for run_text_generation runs that share one backend its owner closes."""
    return _Borrowed(backend)


def hf_backend(config: EngineConfig, steering: SteeringVectors | None = None) -> Backend:
    """transformers' generate for any causal LM (workloads/hf_text_backend.py), sized by the engine's knobs."""
    from inferlab.workloads.hf_text_backend import hf_backend as build

    if config.kv_dtype not in ("auto", "model"):
        raise ConfigError(
            f"kv_dtype={config.kv_dtype!r} (--kv-dtype) is a setting of the inferlab engine's KV cache; the hf "
            "backend keeps transformers' own cache: use --backend inferlab, or --kv-dtype auto"
        )

    return build(config, steering)


BACKENDS: dict[str, BackendFactory] = {"inferlab": engine_backend, "hf": hf_backend}


def engine_architecture_problem(model_dir: str) -> str | None:
    """Why the engine cannot serve `model_dir`'s architecture (config.json, read cheaply), or None."""
    from inferlab.models.config_file import read_config
    from inferlab.models.registry import family_for

    architectures = read_config(model_dir).get("architectures") or []  # InputError for a damaged config.json
    try:
        if isinstance(architectures, list) and architectures:
            family_for(str(architectures[0]))
    except UnsupportedError as e:
        return str(e)
    return None


def open_backend(name: str, config: EngineConfig, steering: SteeringVectors | None = None) -> Backend:
    """Build the named backend for `config.model`; "auto" = inferlab, or "hf" when the engine does not support
    the model (its architecture, or any other UnsupportedError the engine raises at start-up). An fp8 KV cache
    (kv_dtype="fp8") exists only in the engine: then the engine's refusal stands, with no fallback."""
    from inferlab.workloads.hf_loading import hf_fallback_fix, transformers_problem  # transformers: only here

    if name == "auto":
        problem = engine_architecture_problem(str(config.model))
        engine_only = config.kv_dtype not in ("auto", "model")
        if problem is not None and engine_only:
            raise UnsupportedError(f"{problem}; kv_dtype={config.kv_dtype!r} needs the inferlab engine: use "
                                   "--kv-dtype auto to run this model on the hf backend")
        if problem is None:
            try:
                return BACKENDS["inferlab"](config, steering)
            except UnsupportedError as e:
                if engine_only:
                    raise
                problem = str(e)
        if transformers_problem(config.model) is not None:
            raise UnsupportedError(f"{problem}; {hf_fallback_fix(config.model)}")
        log.warning("%s; falling back to the transformers backend (--backend hf)", problem)
        return BACKENDS["hf"](config, steering)
    if name not in BACKENDS:
        raise ConfigError(f"backend {name!r} is not available; choose one of auto, {', '.join(BACKENDS)}")
    try:
        return BACKENDS[name](config, steering)
    except UnsupportedError as e:
        if name != "inferlab":
            raise
        raise UnsupportedError(f"{e}; {hf_fallback_fix(config.model)}") from None


def result_settings(model: str | Path, backend: str, sampling: SamplingParams, engine: EngineConfig | None,
                    hf_dtype: str = "auto") -> dict[str, Any]:
    """The settings that change a run's rows (a rerun that changes one is refused; the output manifest's):
    the model, the backend, the sampling defaults, the dtype (the engine's, else transformers'), the engine's KV
    cache dtype as asked (an FP8 cache changes what the model writes) and the seed of rows without their own."""
    return {
        "model": str(Path(model).resolve()),
        "backend": backend,
        "sampling": dataclasses.asdict(sampling),
        "dtype": engine.dtype if engine is not None else hf_dtype,
        "kv_dtype": engine.kv_dtype if engine is not None else None,
        "seed": engine.seed if engine is not None else None,
    }


def build_request(record: InputRecord, defaults: SamplingParams, steer: SteerSettings | None = None,
                  collect: Collect | None = None) -> Request | str:
    """A Request from one input line, or the message of why the line is unusable."""
    if record.error is not None:
        return record.error
    data = record.data
    has_text, has_ids = "prompt" in data, "prompt_ids" in data
    if has_text == has_ids:
        return f"line {record.line_no}: give exactly one of 'prompt' (text) or 'prompt_ids' (token ids)"
    overrides = {k: v for k, v in data.items() if k in OVERRIDE_CHECKS}
    for key, value in overrides.items():
        check, expected = OVERRIDE_CHECKS[key]
        if not check(value):
            return f"line {record.line_no}: {key}={value!r} must be {expected}"
    if "stop_token_ids" in overrides:
        overrides["stop_token_ids"] = tuple(overrides["stop_token_ids"])
    try:
        sampling = dataclasses.replace(defaults, **overrides) if overrides else defaults  # shared, when the same
    except ConfigError as e:
        return f"line {record.line_no}: {e}"
    steering = line_steering(data, record.line_no, steer)
    if isinstance(steering, str):
        return steering
    steering_and_collection = dict(steering=steering, collect=collect)
    if has_text:
        if not isinstance(data["prompt"], str):
            return f"line {record.line_no}: 'prompt' must be a string"
        return Request(id=record.id, prompt=data["prompt"], sampling=sampling, **steering_and_collection)
    ids = data["prompt_ids"]
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        return f"line {record.line_no}: 'prompt_ids' must be a list of integers"
    return Request(id=record.id, prompt_ids=tuple(ids), sampling=sampling, **steering_and_collection)


def result_row(result: Result, backend: str | None = None) -> dict[str, Any]:
    return {
        "id": result.id,
        "status": "ok" if result.error is None else "error",
        "text": result.text,
        "token_ids": result.token_ids,
        "finish_reason": result.finish_reason,
        "prompt_tokens": result.prompt_tokens,
        "output_tokens": len(result.token_ids),
        "backend": backend,
        "error": result.error,
    }


def error_row(row_id: str, message: str) -> dict[str, Any]:
    """The row of an input line that never reached a backend."""
    return {
        "id": row_id,
        "status": "error",
        "text": None,
        "token_ids": [],
        "finish_reason": "error",
        "prompt_tokens": 0,
        "output_tokens": 0,
        "backend": None,
        "error": message,
    }


@dataclass
class TextJobSummary:
    written: int = 0  # rows written by this run (results and errors)
    errors: int = 0
    skipped: int = 0  # ids already in the output from an earlier run
    output_tokens: int = 0
    activation_rows: int = 0  # rows in the assembled activations file (with collection)
    retried: int = 0  # error rows of earlier runs taken out to run again (retry_errors)
    inputs: int = 0  # input lines (done ones included)
    error_groups: ErrorGroups = field(default_factory=ErrorGroups, repr=False)  # this run's error rows by reason


def model_positions(model_dir: str | Path) -> int | None:
    """The checkpoint's max_position_embeddings (its text config's, for a multimodal one), read from
    config.json; None when it is not there (the backend then reports the checkpoint's problem itself)."""
    from inferlab.models.config_file import read_config

    try:
        config = read_config(model_dir)
    except InputError:
        return None
    value = config.get("max_position_embeddings") or (config.get("text_config") or {}).get("max_position_embeddings")
    return value if _is_int(value) and value > 0 else None


@dataclass
class RowFit:
    """Whether some request of a job fits in a row of `row_positions` (prompt + new tokens), seen one
    request at a time; `check()` refuses, before any work, a job none of whose requests fits (a text prompt
    counts as at least one token)."""

    row_positions: int | None
    any_fits: bool = False
    asked: int | None = None  # the fewest new tokens a request asks for
    shortest: int | None = None  # the shortest prompt

    def add(self, request: Request) -> None:
        floor = max(1, len(request.prompt_ids)) if request.prompt_ids is not None else 1
        asked = request.sampling.max_new_tokens
        self.any_fits |= self.row_positions is None or floor + asked <= self.row_positions
        self.asked = asked if self.asked is None else min(self.asked, asked)
        self.shortest = floor if self.shortest is None else min(self.shortest, floor)

    def check(self) -> None:
        if self.any_fits or self.asked is None or self.row_positions is None:
            return
        if self.row_positions - self.shortest < 1:
            raise ConfigError(f"rows of max_seq_len={self.row_positions} positions cannot hold the shortest prompt "
                              f"({self.shortest} tokens) and one new token; raise max_seq_len")
        raise ConfigError(
            f"max_new_tokens={self.asked} leaves no room in any row: a row holds {self.row_positions} positions, "
            f"prompt and output together (the model's max_position_embeddings, or max_seq_len when given), and the "
            f"shortest prompt takes at least {self.shortest}; the largest max_new_tokens that works is "
            f"{self.row_positions - self.shortest}")


@dataclass
class TextJobPlan:
    """One pass over the input before any work: what there is to do. The run then reads the input again,
    lazily, so no list of the job's lines or requests is ever held."""

    requests: int = 0
    errors: int = 0
    skipped: int = 0
    out_of_order: bool = False  # a row of an earlier run follows one still to run: reordered at the end


def plan_text_job(records: Iterable[InputRecord], done: Container[str], defaults: SamplingParams, fit: RowFit,
                  steer: SteerSettings | None = None, collect: Collect | None = None) -> TextJobPlan:
    plan = TextJobPlan()
    waiting = False  # an id still to run was seen
    for record in records:
        if record.id in done:
            plan.skipped += 1
            plan.out_of_order |= waiting
            continue
        waiting = True
        built = build_request(record, defaults, steer, collect)
        if isinstance(built, str):
            plan.errors += 1
        else:
            plan.requests += 1
            fit.add(built)
    return plan


def run_text_generation(
    input_path: str | Path,
    output_path: str | Path,
    open_backend: Callable[[], Backend],  # called only when there is something to generate; closed at the end
    defaults: SamplingParams,
    on_start: Callable[[int], None] | None = None,  # called with the number of requests to run
    on_row: Callable[[dict[str, Any]], None] | None = None,  # called as each row finishes
    steer: SteerSettings | None = None,
    collect: CollectSettings | None = None,
    run_settings: dict[str, Any] | None = None,  # what the activations depend on (model, sampling): checked on resume
    retry_errors: bool = False,  # error rows of earlier runs are taken out and run again
    row_positions: int | None = None,  # prompt + output positions of a row (checked before any work), if known
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,  # an input line over it is an error row
) -> TextJobSummary:
    """Rows are written in input order (input_order.py) as they finish; on any exit, interrupts included,
    every finished row is written before the output closes. The input is read in passes, never held whole:
    the plan (which claims the ids: inputs/record_ids.py), the requests as the backend pulls them, and the
    order rows are written in, which lags behind at the oldest row not written and writes the rows of
    lines that cannot run itself when it reaches them, so such a row costs nothing while it waits. What
    stays is the rows in flight or waiting for an earlier one, and fingerprints of the ids of earlier
    runs and of the input (while the plan reads it). A run that completes an output an interrupted run
    left with rows after a gap rewrites it in input order."""
    summary = TextJobSummary()
    keep_row = (lambda row: row.get("error") is None) if retry_errors else None

    def records(claims: IdClaims) -> Iterator[InputRecord]:
        return read_jsonl_records(input_path, max_line_chars=max_line_chars, ids=claims)

    with ResumableJsonlWriter(output_path, kind_fields=("finish_reason",), keep_row=keep_row) as writer:
        summary.retried = writer.dropped
        order: InputOrder | None = None  # made once the rows to write are known

        def in_order(row: dict[str, Any]) -> None:
            order.put(row["id"], row)

        sink = None
        done: Container[str] = writer.done  # the ids of earlier runs
        if collect is not None:
            settings = {**(run_settings or {}), "steering": steer.describe() if steer is not None else None}
            sink = ActivationSink.open(collect, settings, in_order)
            done = _InBoth(writer.done, sink.done_ids)  # both files must have the row; others are recomputed
        request_collect = collect.request_collect() if collect is not None else None
        fit = RowFit(row_positions)
        ids = RecordIds()  # the plan's pass claims the ids; the later passes replay its claims (`known`)
        plan = plan_text_job(records(ids), done, defaults, fit, steer, request_collect)
        known = ids.known()
        del ids  # the fingerprints of every id go now
        fit.check()
        summary.skipped = plan.skipped
        summary.inputs = plan.skipped + plan.requests + plan.errors
        if on_start is not None:
            on_start(plan.requests + plan.errors)

        def counted(row: dict[str, Any]) -> None:
            summary.written += 1
            summary.errors += row["error"] is not None
            if row["error"] is not None:
                summary.error_groups.add(row["id"], row["error"])
            summary.output_tokens += row["output_tokens"]

        def emit(row: dict[str, Any], result: Result) -> None:
            counted(row)
            if on_row is not None:
                on_row(row)
            if sink is not None:
                sink.add(result, row)  # activations first, then the JSONL row
            else:
                in_order(row)

        def lines_to_run() -> Iterator[tuple[InputRecord, Request | str]]:
            """The lines no earlier run wrote, each with its request or why it cannot run (one pass)."""
            for record in records(known.replay()):
                if record.id not in done:
                    yield record, build_request(record, defaults, steer, request_collect)

        def row_order() -> Iterator[str]:
            """The ids of the rows to wait for, in input order; the row of a line that cannot run is written
            here, when every row before it is (InputOrder asks for the next id only then)."""
            for record, built in lines_to_run():
                if not isinstance(built, str):
                    yield record.id
                    continue
                row = error_row(record.id, built)
                counted(row)
                if sink is not None:
                    sink.error(row)
                writer.write(row)

        def requests() -> Iterator[Request]:
            """The requests, pulled by the backend as it goes; `on_row` hears of a line that cannot run here,
            as it is read (its row is the order's to write)."""
            for record, built in lines_to_run():
                if not isinstance(built, str):
                    yield built
                elif on_row is not None:
                    on_row(error_row(record.id, built))

        order = InputOrder(row_order(), writer.write)
        completed = False
        try:
            if plan.requests:
                backend = open_backend()
                try:
                    for result in backend.generate(requests()):
                        emit(result_row(result, backend.name or None), result)
                finally:
                    backend.close()
            else:
                for _ in requests():  # error rows only: told of, then written by the order below
                    pass
            completed = True
        finally:
            try:
                if sink is not None:
                    summary.activation_rows = sink.close(r.id for r in records(known.replay()))
            finally:
                order.flush(to_end=completed)  # an interrupted run leaves the lines after its last row to the rerun
    if plan.out_of_order or writer.damaged or writer.dropped:
        from inferlab.workloads.batching import reorder_jsonl  # torch's module (batches): imported after the work

        reorder_jsonl(output_path, (r.id for r in records(known.replay())))
    return summary


class _InBoth:
    """Membership in two collections at once."""

    def __init__(self, first: Container[str], second: Container[str]) -> None:
        self._first, self._second = first, second

    def __contains__(self, key: object) -> bool:
        return key in self._first and key in self._second
