"""How the conformer pipeline sizes the engine for a job: its rows (`--max-num-seqs auto`, the default), the
row length (`--max-seq-len` left open) and the KV cache (`--kv-dtype auto`: kv_dtype_choice.py).

Rows: as many as the memory plan admits, up to `auto_row_cap`: the rows where a decode step stops amortising
its fixed cost, and never more than the job's requests. On an H200 (qwen3-0.6b, the conformer job at ~350
tokens of context) a step takes ~a + b x rows: FP8 KV 256 / 512 / 1024 rows ran 63.5k / 79.1k / 89.1k tok/s
(a = 1.55 ms, b = 9.7 us per row: the fixed part weighs as much as ~160 rows), bf16 256 / 512 54.4k / 68.5k
(a = 1.94 ms, b = 10.8 us). 1024 rows reach 86% of that line's asymptote; 2048 would add at most 1.07x by
the same line, unmeasured, at twice the KV memory: so the cap is 1024 on a GPU (docs/decisions.md). A CPU
step is ~1,000 small ops on one thread (EngineConfig.cpu_threads), tuned at 16 rows
(benchmarks/checks/2026-12-01-cpu-speed): 16.

Length: the job's longest row, prompt + the compiled program's bound (PreparedMolecule.tokens_needed), of the
molecules with the most atoms (plan.MoleculePlan.largest), + 5%, rounded up to the attention's 64-position tiles
(plan.row_length). Those programs come from the preparing pool, which starts up beside this process (a
tokenizer and a GrammarSet per process: seconds), so the exact bound is waited for only where it buys
something: when the molecules are prepared in this process anyway, or when the memory plan at the
character bound (plan.auto_max_seq_len, ~10% above the exact one; no tokenizer needed) admits fewer rows
than wanted. Otherwise the character bound stands: the attention's work follows each row's real length,
so a longer row costs only memory that the plan showed is there. A molecule whose exact bound exceeds the
length is refused by the feed (feed.py), naming --max-seq-len.

Not here: the memory plan itself (the engine's, through plan_without_loading), running anything.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inferlab.engine import EngineConfig
from inferlab.errors import CapacityError
from inferlab.workloads.conformers.chemistry.profiles import FormatProfile
from inferlab.workloads.conformers.pipeline.kv_dtype_choice import KvChoice, choose_kv_dtype, read_kv_gate
from inferlab.workloads.conformers.pipeline.plan import (
    LENGTH_MARGIN,
    LENGTH_STEP,
    MoleculeJob,
    auto_max_seq_len,
    row_length,
)

log = logging.getLogger(__name__)

# where a decode step stops amortising its fixed cost (the module docstring's measurements)
SATURATING_ROWS = {"cuda": 1024, "cpu": 16}
# the step's fixed cost in rows' worth (a / b of the step model): ~160 on the H200 (fp8 1.55 ms / 9.7 us, bf16
# 1.94 ms / 10.8 us); on a CPU unmeasured, taken as its saturating rows (a CPU job of 64+ molecules is rare:
# smaller ones prepare inline, where the exact length is free)
FIXED_ROWS = {"cuda": 160, "cpu": 16}
WAIT_WORTH = 0.01  # the throughput a longer row length must buy before the pipeline waits for the exact one
WHY_ROWS = {"cuda": "a GPU step's fixed cost is amortised by then: 1024 rows ran 1.13x 512 on an H200, 2048 would "
                    "add <= 1.07x",
            "cpu": "a CPU step on one thread gains little past 16 rows"}


@dataclass(frozen=True)
class RowCap:
    rows: int  # the most rows the memory plan may fill
    why: str


def auto_row_cap(device_type: str, requests: int, ceiling: int | None = None) -> RowCap:
    """The rows `--max-num-seqs auto` allows for a job of `requests` requests on a `device_type` device;
    `ceiling`: a tune file's max_slots, which replaces the saturation rule (its sample ran best there; a job
    whose rows are longer than the sample's gets as many as memory holds, up to it)."""
    if ceiling is not None:
        rows, why = ceiling, "the tune's max_slots (--config)"
    else:
        kind = "cpu" if device_type == "cpu" else "cuda"
        rows, why = SATURATING_ROWS[kind], WHY_ROWS[kind]
    if requests < rows:
        return RowCap(max(1, requests), f"the job's {requests} requests (otherwise {rows}: {why})")
    return RowCap(rows, why)


def step_throughput(rows: int, device_type: str) -> float:
    """Tokens per unit time of a decode step of `rows` rows by the step model a + b x rows (module docstring),
    up to a constant: rows / (FIXED_ROWS + rows)."""
    fixed = FIXED_ROWS["cpu" if device_type == "cpu" else "cuda"]
    return rows / (fixed + rows)


def wait_for_exact_length(inline: bool, rows_at_character_bound: int, rows_wanted: int,
                          device_type: str = "cuda") -> bool:
    """Whether the pipeline waits for the sample's compiled programs before the engine starts: free when this
    process prepares them anyway (`inline`); otherwise only when the rows memory holds at the character bound
    would cost more than WAIT_WORTH of the step's throughput (the wait is the pool's start-up: seconds;
    docs/decisions.md, "The row length")."""
    if inline:
        return True
    if rows_at_character_bound >= rows_wanted:
        return False
    held = step_throughput(rows_at_character_bound, device_type) / step_throughput(rows_wanted, device_type)
    return held < 1 - WAIT_WORTH


def describe_rows(cap: RowCap | None, slots: int, max_seq_len: int) -> str:
    """The summary's words for the engine's rows; `cap` None: --max-num-seqs given."""
    if cap is None:
        return f"{slots} slots: --max-num-seqs"
    if slots < cap.rows:
        return (f"{slots} slots: auto, as many as memory holds at {max_seq_len} positions per row (up to {cap.rows}: "
                f"{cap.why})")
    return f"{slots} slots: auto, {cap.why}"


@dataclass(frozen=True)
class EngineSizing:
    config: EngineConfig  # what the engine starts with
    rows: RowCap | None  # the auto rule's cap (None: --max-num-seqs given)
    length_reason: str
    kv: KvChoice
    length_wait_s: float  # waited for the sample's programs before the engine


def size_engine(config: EngineConfig, requests: int, sample: Sequence[MoleculeJob], preparer: Any,
                profile: FormatProfile, model_positions: int | None, row_ceiling: int | None = None) -> EngineSizing:
    """`config` with its rows, row length and KV cache set for the job; `requests`: the job's rows to
    generate; `sample`: plan.MoleculePlan.largest (its molecules with the most atoms), submitted to
    `preparer` (prepare.MoleculePreparer) before anything else, so that their programs come first;
    max_slots None is `--max-num-seqs auto`, up to `row_ceiling` when a tune file gave one."""
    from inferlab.engine import fp8_kv_supported, resolve_device

    device = resolve_device(config.device)
    kv = choose_kv_dtype(config.kv_dtype, read_kv_gate(), device.type, fp8_kv_supported(device))
    config = dataclasses.replace(config, kv_dtype=kv.kv_dtype)
    cap = auto_row_cap(device.type, requests, row_ceiling) if config.max_slots is None else None
    wanted = cap.rows if cap is not None else config.max_slots
    if cap is not None:
        config = dataclasses.replace(config, slot_cap=cap.rows)
    waited = 0.0
    if config.max_seq_len is not None:
        length_reason = "--max-seq-len"
    else:
        length = auto_max_seq_len(sample, profile, model_positions)
        rounding = f"+ {LENGTH_MARGIN - 1:.0%}, in {LENGTH_STEP}-position tiles"
        length_reason = f"the character bound of the {len(sample)} largest molecules, {rounding}"
        if length is not None and wait_for_exact_length(preparer.inline, _rows_at(config, length, wanted), wanted,
                                                        device.type):
            t = time.perf_counter()
            needs = [m.tokens_needed for m in (preparer.submit(job.record.smiles).result() for job in sample) if m.ok]
            waited = time.perf_counter() - t
            if needs:
                length = row_length(needs, model_positions)
                longest = max(needs)
                length_reason = (f"the longest row of the {len(sample)} largest molecules ({longest} positions: "
                                 f"prompt + the constraint's bound), {rounding}")
                if length != row_length(needs, None):  # capped: the model has fewer positions
                    length_reason = (f"the model's {model_positions} positions (the longest row of the "
                                     f"{len(sample)} largest molecules needs {longest}: rows longer are refused)")
        else:
            length_reason += " (memory holds the rows at it)"
        config = dataclasses.replace(config, max_seq_len=length)
    return EngineSizing(config, cap, length_reason, kv, waited)


def _rows_at(config: EngineConfig, length: int, wanted: int) -> int:
    """The rows the memory plan holds at `length` (up to `wanted`); 0 when not even one fits."""
    from inferlab.engine import plan_without_loading

    try:
        return plan_without_loading(dataclasses.replace(config, max_seq_len=length, max_slots=None,
                                                        slot_cap=wanted)).slots
    except CapacityError:
        return 0
