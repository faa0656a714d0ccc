"""Batched text generation with transformers' `generate`, for any HF causal LM: the fallback of
`inferlab generate` for architectures the engine does not support.

Owns: prompts (a "prompt" string, or "messages" rendered through the tokenizer's chat template),
SamplingParams -> generate arguments (every knob set explicitly, so the model's generation_config
defaults, such as a top_k of 50, do not leak in), left-padded length-bucketed batches under a token budget
(rows x (prompt + new tokens)), OOM back-off, batch decoding, finish reasons, and rows written as each batch
finishes. Does not own: the engine path or the `generate` command (workloads/text.py, cli/generate_cmd.py).

Seeds: generate samples from torch's global generator, so `SamplingParams.seed` seeds each batch; a
row's sample depends on its batch-mates (greedy output does not).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from inferlab.errors import ConfigError, InputError
from inferlab.jsonl_io import InputRecord, ResumableJsonlWriter
from inferlab.types import SamplingParams
from inferlab.workloads.batching import BatchLimits, pad_batch
from inferlab.workloads.hf_loading import LoadedModel, ModelLoadConfig, load_hf_model, model_max_positions
from inferlab.workloads.oom import BackoffPolicy, BackoffRunner, BackoffStats
from inferlab.workloads.rows import (
    LengthPolicy,
    RowPreparer,
    RowText,
    TextRow,
    error_record,
    plan_row_batches,
    text_field_getter,
)
from inferlab.workloads.stats import latency_summary_ms

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HFTextOptions:
    batch_size: int = 32
    max_batch_tokens: int | None = 262144  # rows x (longest prompt + max_new_tokens) of one batch
    prompt_field: str = "prompt"
    messages_field: str = "messages"
    chunk_rows: int = 4096  # input lines tokenised in one call and length-sorted together
    max_context: int | None = None  # prompt + new tokens; None: the model's maximum positions
    include_token_ids: bool = False
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)

    def __post_init__(self) -> None:
        BatchLimits(self.batch_size, self.max_batch_tokens)
        if self.chunk_rows < 1:
            raise ConfigError(f"chunk_rows={self.chunk_rows} must be >= 1")


@dataclass
class HFTextSummary:
    rows_ok: int = 0
    rows_error: int = 0
    rows_skipped: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0  # tokens really produced (up to and including EOS/stop), never padding
    batch_seconds: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    backoff: BackoffStats = field(default_factory=BackoffStats)
    ids_in_order: list[str] = field(default_factory=list, repr=False)  # for batching.reorder_jsonl

    def summary(self) -> dict[str, Any]:
        busy = sum(self.batch_seconds)
        return {
            "rows_ok": self.rows_ok,
            "rows_error": self.rows_error,
            "rows_skipped": self.rows_skipped,
            "output_tokens": self.output_tokens,
            "output_tokens_per_s": self.output_tokens / busy if busy > 0 else None,
            "wall_s": round(self.wall_s, 3),
            "batch_latency_ms": latency_summary_ms(self.batch_seconds),
            "oom_events": self.backoff.oom_events,
            "largest_ok_batch_rows": self.backoff.largest_ok_rows,
        }


@dataclass(frozen=True)
class Generated:
    token_ids: list[int]  # produced tokens, up to and including the EOS/stop token
    finish_reason: str  # "eos", "stop" or "length"


def prompt_getter(tokenizer, prompt_field: str, messages_field: str) -> Callable[[dict[str, Any]], str | RowText]:
    """text_of for generation: chat messages through the tokenizer's template, else the prompt field."""
    plain = text_field_getter(prompt_field)

    def text_of(data: dict[str, Any]) -> str | RowText:
        if messages_field not in data:
            return plain(data)
        messages = data[messages_field]
        if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages
        ):
            raise InputError(f"field {messages_field!r} must be a non-empty list of {{'role', 'content'}} strings")
        if not getattr(tokenizer, "chat_template", None):
            raise InputError(f"the tokenizer has no chat template; give {prompt_field!r} text instead of messages")
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return RowText(text, add_special_tokens=False)  # the template already holds BOS and role markers

    return text_of


def generate_kwargs(sampling: SamplingParams, eos_ids: list[int], pad_id: int) -> dict[str, Any]:
    """SamplingParams -> `generate` keyword arguments, each knob explicit."""
    kwargs: dict[str, Any] = {
        "max_new_tokens": sampling.max_new_tokens,
        "min_new_tokens": sampling.min_new_tokens,
        "do_sample": not sampling.greedy,
        "num_beams": 1,
        "repetition_penalty": 1.0,
        "pad_token_id": pad_id,
        "use_cache": True,
    }
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p, min_p=sampling.min_p)
    stops = list(sampling.stop_token_ids) + ([] if sampling.ignore_eos else eos_ids)
    if stops:
        kwargs["eos_token_id"] = stops
    else:  # ignore_eos and no stop tokens: run to max_new_tokens (eos_token_id=None would take the model's)
        kwargs["min_new_tokens"] = sampling.max_new_tokens
        kwargs["eos_token_id"] = eos_ids or None
    return kwargs


class HFTextGenerator:
    """One loaded causal LM and one SamplingParams: token id lists in, Generated out."""

    def __init__(self, loaded: LoadedModel, sampling: SamplingParams) -> None:
        self.loaded = loaded
        self.sampling = sampling
        eos = loaded.model.generation_config.eos_token_id
        if eos is None:
            eos = loaded.tokenizer.eos_token_id
        self.eos_ids = [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])]
        self._finishers = {t: "stop" for t in sampling.stop_token_ids}
        if not sampling.ignore_eos:
            self._finishers.update({t: "eos" for t in self.eos_ids})
        self._kwargs = generate_kwargs(sampling, self.eos_ids, loaded.pad_id)

    def generate(self, prompts: list[list[int]]) -> list[Generated]:
        input_ids, attention_mask = pad_batch(prompts, self.loaded.pad_id, side="left")  # [rows, P]
        device = self.loaded.device
        if self.sampling.seed is not None:
            torch.manual_seed(self.sampling.seed)
        with torch.inference_mode():
            out = self.loaded.model.generate(
                input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), **self._kwargs
            )  # [rows, P + produced]
        new_tokens = out[:, input_ids.shape[1]:].cpu().tolist()
        return [self._finish(row) for row in new_tokens]

    def _finish(self, tokens: list[int]) -> Generated:
        """Cut a row at its first EOS/stop token (later positions are padding, never counted)."""
        for i, token in enumerate(tokens):  # generate masks EOS/stop before min_new_tokens itself
            reason = self._finishers.get(token)
            if reason is not None:
                return Generated(tokens[: i + 1], reason)
        return Generated(tokens, "length")

    def decode(self, generated: list[Generated]) -> list[str]:
        """Batch-decode the rows' texts (one tokenizer call; the final EOS/stop token is not in the text)."""
        bodies = [g.token_ids[:-1] if g.finish_reason != "length" else g.token_ids for g in generated]
        return self.loaded.tokenizer.batch_decode(bodies, skip_special_tokens=True)


def _as_record(item: InputRecord | dict[str, Any], n: int) -> InputRecord:
    if isinstance(item, InputRecord):
        return item
    return InputRecord(n, str(item.get("id", f"row-{n}")), item)


def run_hf_generation(
    loaded: LoadedModel,
    records: Iterable[InputRecord | dict[str, Any]],
    sampling: SamplingParams,
    writer: ResumableJsonlWriter,
    options: HFTextOptions = HFTextOptions(),
    progress: Callable[[int], None] | None = None,
) -> HFTextSummary:
    """Generate for every record not already in `writer.done`, writing each row as its batch finishes."""
    start = time.perf_counter()
    summary = HFTextSummary()
    generator = HFTextGenerator(loaded, sampling)
    context = options.max_context or model_max_positions(loaded.model)
    if context is None:
        raise ConfigError("the model config has no max_position_embeddings; set max_context")
    max_prompt = context - sampling.max_new_tokens
    if max_prompt < 1:
        raise ConfigError(f"max_new_tokens={sampling.max_new_tokens} leaves no room for a prompt in {context} positions")
    preparer = RowPreparer(
        loaded.tokenizer,
        prompt_getter(loaded.tokenizer, options.prompt_field, options.messages_field),
        LengthPolicy(max_prompt, truncate=False, limit_hint=f"shorten the prompt or lower max_new_tokens ({context} positions)"),
        skip_ids=writer.done,
        on_skip=progress,
    )

    def write_error(record: dict) -> None:
        writer.write(record)
        summary.rows_error += 1
        if progress:
            progress(1)

    def on_done(rows: list[TextRow], results: list[Generated], seconds: float) -> None:
        for row, gen, text in zip(rows, results, generator.decode(results)):
            record = {
                "id": row.id, "status": "ok", "text": text, "finish_reason": gen.finish_reason,
                "prompt_tokens": len(row.token_ids), "output_tokens": len(gen.token_ids), "backend": "hf",
            }
            if options.include_token_ids:
                record["token_ids"] = gen.token_ids
            writer.write(record)
            summary.prompt_tokens += len(row.token_ids)
            summary.output_tokens += len(gen.token_ids)
        summary.rows_ok += len(rows)
        summary.batch_seconds.append(seconds)
        if progress:
            progress(len(rows))

    new = sampling.max_new_tokens
    runner: BackoffRunner[TextRow, Generated] = BackoffRunner(
        run_batch=lambda rows: generator.generate([r.token_ids for r in rows]),
        cost=lambda rows: len(rows) * (max(len(r.token_ids) for r in rows) + new),
        on_done=on_done,
        on_oom_row=lambda row, message: write_error(error_record(row.id, message, prompt_tokens=len(row.token_ids))),
        policy=options.backoff,
    )
    limits = BatchLimits(options.batch_size, options.max_batch_tokens)
    records = (_as_record(item, n) for n, item in enumerate(records, start=1))
    for rows, errors in preparer.chunks(records, options.chunk_rows):
        for record in errors:
            write_error(record)
        runner.run(plan_row_batches(rows, limits, extra_tokens=new))
    summary.rows_skipped = preparer.skipped
    summary.backoff = runner.stats
    summary.ids_in_order = preparer.ids_in_order
    summary.wall_s = time.perf_counter() - start
    return summary


def generate_with_hf(
    model_dir: str | Path,
    records: Iterable[InputRecord | dict[str, Any]],
    sampling: SamplingParams,
    writer: ResumableJsonlWriter,
    *,
    dtype: str = "auto",
    attn: str = "sdpa",
    device: str = "auto",
    quantization: str = "none",
    options: HFTextOptions = HFTextOptions(),
    progress: Callable[[int], None] | None = None,
) -> HFTextSummary:
    """Load `model_dir` with AutoModelForCausalLM and generate for `records` (see run_hf_generation).
    Rows are written in the order batches finish; `batching.reorder_jsonl(path, summary.ids_in_order)`
    restores input order once the run is over."""
    from transformers import AutoModelForCausalLM

    loaded = load_hf_model(ModelLoadConfig(str(model_dir), dtype, attn, quantization, device), AutoModelForCausalLM)
    return run_hf_generation(loaded, records, sampling, writer, options, progress)
