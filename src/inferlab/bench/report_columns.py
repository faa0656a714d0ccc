"""The columns of a report table, per scenario: each a header and a function (row, table context) ->
cell text. Every number comes from the row's metrics; a scenario without an entry gets DEFAULT_COLUMNS."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from inferlab.bench.markdown import num, pct, ratio, short, sig
from inferlab.bench.results import config_label, headline, row_spread, speedup


@dataclass(frozen=True)
class TableContext:
    label_knobs: list[str]
    baselines: dict[int, dict[str, Any] | None]  # id(row) -> its baseline row
    winners: set[int]  # id(row) of each workload's best row


Cell = Callable[[dict[str, Any], TableContext], str]


def _label(row: dict[str, Any], ctx: TableContext) -> str:
    text = config_label(row, ctx.label_knobs)
    return f"**{text}** (best)" if id(row) in ctx.winners else text


def _status(row: dict[str, Any], ctx: TableContext) -> str:
    status = row.get("status", "?")
    return status if status == "ok" and not row.get("warnings") else f"{status}: {short(row.get('message') or '; '.join(row.get('warnings', [])))}"


def _metric(name: str, fmt: Callable[[Any], str]) -> Cell:
    return lambda row, ctx: fmt(row.get("metrics", {}).get(name)) if row.get("status") == "ok" else "-"


def _spread(row: dict[str, Any], ctx: TableContext) -> str:
    """The headline's spread over the row's timed calls: the figure `inferlab recommend` judges by."""
    spread = row_spread(row)[0] if row.get("status") == "ok" else None
    return "-" if spread is None else f"{spread * 100:.1f}%"


def _batch(row: dict[str, Any], ctx: TableContext) -> str:
    return str(row.get("batch_size", "-"))


def _latency(percentile: str) -> Cell:
    def cell(row: dict[str, Any], ctx: TableContext) -> str:
        latency = row.get("metrics", {}).get("latency_ms") or {}
        return sig(latency.get(percentile)) if row.get("status") == "ok" else "-"
    return cell


def _speedup(row: dict[str, Any], ctx: TableContext) -> str:
    return ratio(speedup(row, ctx.baselines.get(id(row))))


def _gbps(row: dict[str, Any], ctx: TableContext) -> str:
    m = row.get("metrics", {})
    if row.get("status") != "ok" or m.get("achieved_gb_per_s") is None:
        return "-"
    frac = m.get("bandwidth_fraction")
    return num(m["achieved_gb_per_s"]) + (f" ({pct(frac)})" if frac is not None else "")


def _step_gbps(row: dict[str, Any], ctx: TableContext) -> str:
    """decode-profile: the step's weights + K/V over its time, and its fraction of the measured copy bandwidth."""
    m = row.get("metrics", {})
    if row.get("status") != "ok" or m.get("step_gb_per_s") is None:
        return "-"
    return num(m["step_gb_per_s"]) + f" ({pct(m.get('step_bandwidth_fraction'))})"


def _percent(value: Any) -> str:
    """A share with one decimal (99.5% and 99% must read apart): 0.9953 -> 99.5%."""
    return "-" if value is None else f"{value * 100:.1f}%"


def _decidable_agreement(row: dict[str, Any], ctx: TableContext) -> str:
    """classify: labels equal to transformers' on the rows the precision decides, and how many those are."""
    m = row.get("metrics", {})
    if row.get("status") != "ok" or m.get("labels_decidable") is None:
        return "-"
    return f"{_percent(m.get('labels_agree_with_hf_decidable'))} of {m['labels_decidable']}"


def _accuracy(row: dict[str, Any], ctx: TableContext) -> str:
    """classify on a labelled set: the backend's accuracy (transformers')."""
    m = row.get("metrics", {})
    if row.get("status") != "ok" or m.get("accuracy") is None:
        return "-"
    return f"{_percent(m['accuracy'])} ({_percent(m.get('hf_accuracy'))})"


def _share(value: Any) -> str:
    """A cost as a signed share of the plain step, one decimal: +1.3%."""
    return "-" if value is None else f"{value * 100:+.1f}%"


def _mode(row: dict[str, Any], mode: str, name: str) -> Any:
    """A figure of one mode of a steering row (None when the row has no such mode)."""
    return ((row.get("metrics", {}).get("modes") or {}).get(mode) or {}).get(name)


# Columns per scenario; a scenario without an entry gets DEFAULT_COLUMNS.
COLUMNS: dict[str, list[tuple[str, Cell]]] = {
    "generate": [
        ("configuration", _label),
        ("batch", _batch),
        ("tok/s", _metric("output_tokens_per_s", num)),
        ("spread", _spread),
        ("speedup", _speedup),
        ("first call s", _metric("first_call_s", sig)),
        ("steady s", _metric("steady_s", sig)),
        ("peak GB", _metric("peak_memory_gb", sig)),
        ("GB/s (of device)", _gbps),
        ("attention kernel seen", _metric("attention_kernel_observed", str)),
        ("status", _status),
    ],
    "attention-kernels": [
        ("configuration", _label),
        ("shape", lambda r, c: str(r.get("metrics", {}).get("shape") or "-")),
        ("ms/iter", _metric("ms_per_iter", sig)),
        ("spread", _spread),
        ("TFLOP/s", _metric("tflops_per_s", sig)),
        ("speedup", _speedup),
        ("max abs err vs math fp32", _metric("max_abs_error", sig)),
        ("kernel seen", _metric("attention_kernel_observed", str)),
        ("status", _status),
    ],
    "classify": [
        ("configuration", _label),
        ("batch", _batch),
        ("samples/s", _metric("requests_per_s", num)),
        ("speedup", _speedup),
        ("p50 ms", _latency("p50")),
        ("p95 ms", _latency("p95")),
        ("p99 ms", _latency("p99")),
        ("tokens/s", _metric("input_tokens_per_s", num)),
        ("TFLOP/s", _metric("tflops_per_s", sig)),
        ("% of matmul peak", _metric("pct_of_matmul_peak", sig)),
        ("labels = hf", _metric("labels_agree_with_hf", _percent)),
        ("= hf where decidable", _decidable_agreement),
        ("accuracy (hf)", _accuracy),
        ("padding", _metric("padding_fraction", pct)),
        ("first call s", _metric("first_call_s", sig)),
        ("peak GB", _metric("peak_memory_gb", sig)),
        ("status", _status),
    ],
    "hidden-states": [
        ("configuration", _label),
        ("batch", _batch),
        ("tokens/s", _metric("input_tokens_per_s", num)),
        ("prompts/s", _metric("requests_per_s", num)),
        ("speedup", _speedup),
        ("p95 ms", _latency("p95")),
        ("TFLOP/s", _metric("tflops_per_s", sig)),
        ("% of matmul peak", _metric("pct_of_matmul_peak", sig)),
        ("cosine vs hf (min)", _metric("states_min_cosine_vs_hf", sig)),
        ("padding", _metric("padding_fraction", pct)),
        ("first call s", _metric("first_call_s", sig)),
        ("peak GB", _metric("peak_memory_gb", sig)),
        ("status", _status),
    ],
    "constrained": [
        ("configuration", _label),
        ("batch", _batch),
        ("tok/s", _metric("output_tokens_per_s", num)),
        ("molecules/s", _metric("molecules_per_s", sig)),
        ("speedup", _speedup),
        ("valid", _metric("valid_fraction", pct)),
        ("graph match", _metric("graph_match_fraction", pct)),
        ("stereo", _metric("stereo_agreement", pct)),
        ("measured on", _metric("measured_on", str)),
        ("first call s", _metric("first_call_s", sig)),
        ("prepare s", _metric("prepare_s", sig)),
        ("peak GB", _metric("peak_memory_gb", sig)),
        ("status", _status),
    ],
    "steering": [
        ("configuration", _label),
        ("batch", _batch),
        ("tok/s (headline mode)", _metric("output_tokens_per_s", num)),
        ("speedup", _speedup),
        ("plain tok/s", lambda r, c: num(_mode(r, "plain", "output_tokens_per_s"))),
        ("step ms plain", lambda r, c: sig(_mode(r, "plain", "step_ms"))),
        ("steering cost", _metric("steering_cost", _share)),
        ("collection cost", _metric("collection_cost", _share)),
        ("both", _metric("steer_collect_cost", _share)),
        ("activations vs HF (max rel err)", lambda r, c: sig((r.get("metrics", {}).get("activation_check") or {})
                                                                 .get("max_rel_error"))),
        ("peak GB", _metric("peak_memory_gb", sig)),
        ("status", _status),
    ],
    "decode-profile": [
        ("configuration", _label),
        ("batch", _batch),
        ("step us", _metric("step_us", lambda v: num(v, 0))),
        ("step GB/s (of copy)", _step_gbps),
        ("speedup", _speedup),
        ("gaps us", _metric("gaps_us", lambda v: num(v, 0))),
        ("below their bound", _metric("below_bound", lambda v: ", ".join(v) if v else "none")),
        ("profile", _metric("profile_source", str)),
        ("status", _status),
    ],
    "conformer-pipeline": [
        ("configuration", _label),
        ("end-to-end tok/s", _metric("output_tokens_per_s", num)),
        ("rerun tok/s", _metric("rerun_output_tokens_per_s", num)),
        ("molecules/s", _metric("molecules_per_s", sig)),
        ("generation tok/s", _metric("generation_output_tokens_per_s", num)),
        ("start s", _metric("engine_start_s", sig)),
        ("rerun start s", _metric("rerun_engine_start_s", sig)),
        ("prefill", _metric("prefill_share", lambda v: "-" if v is None else f"{v * 100:.1f}%")),
        ("engine waited s", _metric("consumer_s", sig)),
        ("valid", _metric("valid_fraction", pct)),
        ("graph match", _metric("graph_match_fraction", pct)),
        ("stereo", _metric("stereo_agreement", pct)),
        ("invalid (read back)", _metric("invalid_total", str)),
        ("status", _status),
    ],
    "conformer-quality": [  # the full table, with the spread over seeds: the report's "Conformer quality"
        ("configuration", _label),
        ("COV-R (first threshold, mean of seeds)", _metric("coverage_recall", pct)),
        ("valid", lambda r, c: pct(((r.get("metrics", {}).get("quality") or {}).get("validity") or {}).get("mean"))
         if r.get("status") == "ok" else "-"),
        ("tok/s", _metric("output_tokens_per_s", num)),
        ("run on", _metric("run_on", str)),
        ("scoring s", _metric("scoring_s", sig)),
        ("status", _status),
    ],
}
DEFAULT_COLUMNS: list[tuple[str, Cell]] = [
    ("configuration", _label),
    ("batch", lambda r, c: str(r.get("batch_size", "-"))),
    ("headline", lambda r, c: f"{r.get('headline_metric')}={sig(headline(r))}" if headline(r) is not None else "-"),
    ("speedup", _speedup),
    ("status", _status),
]
