"""Runs a plan: every cell in its own fresh process with a wall-clock timeout, one result row per cell
appended and flushed to RUN_DIR/results.jsonl as it ends.

A hang (killed with its whole process tree at the timeout), a crash (signal, non-zero exit), a Python
exception or "No available kernel" each become a row and the sweep goes on. A rerun of the same plan into
the same RUN_DIR skips cells already recorded (by cell key), so a killed sweep resumes; cells not started
because the time limit ran out are recorded as `skipped` and run on the next launch. One launch per
RUN_DIR at a time (RUN_DIR/lock, outputs/lock.py).

Owns processes, the run directory and the time budget; does not measure anything itself.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import inferlab
from inferlab.bench import model_refs
from inferlab.bench.backends import get_backend
from inferlab.bench.cells import Cell
from inferlab.bench.plan import Plan
from inferlab.bench.results import RESULTS_FILE, load_rows
from inferlab.bench.rows import FINISHED_STATUSES, UNAVAILABLE_MARKERS, Outcome, make_row
from inferlab.bench.scenarios import get_scenario
from inferlab.child_processes import child_environment
from inferlab.environment import gpu_idle_check
from inferlab.errors import ConfigError
from inferlab.jsonl_io import ResumableJsonlWriter
from inferlab.outputs.lock import OutputLock
from inferlab.process_tree import ProcessTree

log = logging.getLogger(__name__)

_SRC_DIR = Path(inferlab.__file__).resolve().parents[1]


@dataclass(frozen=True)
class LaunchOptions:
    run_dir: Path
    limit_seconds: float | None = None  # stop launching cells after this long; the rest become `skipped`
    rerun_failed: bool = False  # also rerun cells recorded as error / timeout / unavailable
    grace_s: float = 5.0  # SIGTERM -> SIGKILL delay when killing a timed-out cell
    model_cache: Path | None = None  # cache root for preset checkpoints (under models/; default RUN_DIR/cache)

    def __post_init__(self) -> None:
        if self.limit_seconds is not None and self.limit_seconds <= 0:
            raise ConfigError(f"--limit-seconds {self.limit_seconds} must be > 0")


@dataclass
class LaunchSummary:
    run_dir: Path
    run_id: str
    rows: list[dict[str, Any]] = field(default_factory=list)  # rows written by this launch
    already_done: int = 0  # cells found finished in RUN_DIR and not run again


@dataclass(frozen=True)
class ChildExit:
    returncode: int | None
    timed_out: bool
    seconds: float


def has_accelerator() -> bool:
    """A cheap guess for estimates, without importing torch: is there an NVIDIA driver?"""
    return shutil.which("nvidia-smi") is not None


def estimate_seconds(cells: list[Cell] | tuple[Cell, ...], accelerator: bool | None = None) -> tuple[float, float]:
    """(typical, worst case) seconds for running `cells`: the scenarios' rough estimates capped by each
    cell's timeout, and the sum of the timeouts. For this machine (accelerator=None) a cell the parent
    already knows is unavailable costs nothing; for another machine (accelerator=True/False) every cell
    counts, since what is installed there is not known here."""
    here = accelerator is None
    accel = has_accelerator() if here else bool(accelerator)
    typical = worst = 0.0
    for c in cells:
        if here and precheck_reason(c) is not None:
            continue
        typical += min(get_scenario(c.scenario).estimate_s(c, accel), c.timeout_s)
        worst += c.timeout_s
    return typical, worst


def precheck_reason(cell: Cell) -> str | None:
    """Why `cell` certainly cannot run here (a missing tokenizer, the scenario's or backend's parent-side
    check), or None."""
    reason = model_refs.missing_tokenizer(cell) or get_scenario(cell.scenario).precheck(cell)
    if reason is None and cell.backend is not None:
        reason = get_backend(cell.backend, cell.scenario).precheck(cell)
    return reason


def pending_cells(plan: Plan, run_dir: Path, rerun_failed: bool = False) -> tuple[list[Cell], int]:
    """(cells still to run, number already recorded as finished)."""
    done_statuses = ("ok",) if rerun_failed else FINISHED_STATUSES
    done: set[str] = set()
    if (run_dir / RESULTS_FILE).is_file():
        done = {r["cell_key"] for r in load_rows([run_dir]) if r.get("status") in done_statuses and "cell_key" in r}
    pending = [c for c in plan.cells if c.key not in done]
    return pending, len(plan.cells) - len(pending)


def launch(plan: Plan, options: LaunchOptions, on_start: Callable[[int, int, Cell], None] | None = None,
           on_done: Callable[[int, int, dict[str, Any]], None] | None = None) -> LaunchSummary:
    """Run the plan's pending cells; a second launch on the same run folder meanwhile is refused (its rows
    would be recorded twice)."""
    run_dir = options.run_dir.resolve()
    with OutputLock(run_dir / "lock", f"the run folder {run_dir}"):
        return _launch(plan, options, run_dir, on_start, on_done)


def _launch(plan: Plan, options: LaunchOptions, run_dir: Path, on_start: Callable[[int, int, Cell], None] | None,
            on_done: Callable[[int, int, dict[str, Any]], None] | None) -> LaunchSummary:
    for sub in ("logs", "cells", "cache"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    run_id = _run_id(run_dir, plan.name)
    pending, already = pending_cells(plan, run_dir, options.rerun_failed)
    summary = LaunchSummary(run_dir=run_dir, run_id=run_id, already_done=already)
    (run_dir / "cells" / f"plan-{plan.name}.json").write_text(json.dumps([c.to_json() for c in plan.cells], indent=1))
    if not pending:
        return summary
    start = time.monotonic()
    limit = options.limit_seconds if options.limit_seconds is not None else plan.limit_seconds
    env = _capture_environment(run_dir)
    plugins = tuple(str(Path(p).resolve()) for p in plan.plugins)
    missing = {c.key: reason for c in pending if (reason := precheck_reason(c)) is not None}
    model_cache = (options.model_cache or run_dir / "cache").resolve()
    model_paths, model_errors = _prepare_models([c for c in pending if c.key not in missing], model_cache)
    with ResumableJsonlWriter(run_dir / RESULTS_FILE, id_field="cell_key") as writer:
        for index, cell in enumerate(pending):
            if on_start:
                on_start(index, len(pending), cell)
            elapsed = time.monotonic() - start
            scenario = get_scenario(cell.scenario)
            estimate = min(scenario.estimate_s(cell, has_accelerator()), cell.timeout_s)
            if cell.key in missing:
                message = f"{missing[cell.key]} (known before starting the cell; no process was run)"
                row = make_row(cell, Outcome("unavailable", message), run_id=run_id, env=env)
            elif limit is not None and elapsed + estimate > limit:
                message = (f"not started: the time limit of {limit:.0f} s would be passed (elapsed {elapsed:.0f} s, "
                           f"this cell ~{estimate:.0f} s); rerun the same command to resume")
                row = make_row(cell, Outcome("skipped", message), run_id=run_id, env=env)
            elif _model_key(cell) in model_errors:
                row = make_row(cell, Outcome("error", model_errors[_model_key(cell)]), run_id=run_id, env=env)
            else:
                timeout = cell.timeout_s if limit is None else max(1.0, min(cell.timeout_s, limit - elapsed))
                row = _run_cell(cell, run_dir, run_id, env, model_paths.get(_model_key(cell)), plugins, timeout,
                                cut_by_limit=timeout < cell.timeout_s, grace_s=options.grace_s)
            writer.write(row)
            summary.rows.append(row)
            if on_done:
                on_done(index, len(pending), row)
    return summary


def _run_cell(cell: Cell, run_dir: Path, run_id: str, env: dict[str, Any], model_path: Path | None,
              plugins: tuple[str, ...], timeout_s: float, cut_by_limit: bool, grace_s: float) -> dict[str, Any]:
    spec_path = run_dir / "cells" / f"{cell.key}.json"
    outcome_path = run_dir / "cells" / f"{cell.key}.outcome.json"
    log_path = run_dir / "logs" / f"{cell.key}.log"
    outcome_path.unlink(missing_ok=True)
    spec = {"cell": cell.to_json(), "model_path": str(model_path) if model_path else None,
            "run_dir": str(run_dir), "cache_dir": str(run_dir / "cache"), "plugins": list(plugins)}
    spec_path.write_text(json.dumps(spec, indent=1))
    gpu_idle, idle_warning = gpu_idle_check()
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    exit_ = run_child([sys.executable, "-m", "inferlab.bench.cell_main", str(spec_path), str(outcome_path)],
                      log_path, timeout_s, grace_s)
    outcome = _outcome_of(exit_, outcome_path, log_path, timeout_s, cut_by_limit)
    return make_row(cell, outcome, run_id=run_id, env=env, started_at=started_at, wall_s=round(exit_.seconds, 3),
                    gpu_idle=gpu_idle, log=str(log_path.relative_to(run_dir)),
                    extra_warnings=[idle_warning] if idle_warning else None)


def run_child(cmd: list[str], log_path: Path, timeout_s: float, grace_s: float = 5.0) -> ChildExit:
    """Run `cmd` in a new session (its own process group), output to `log_path`; at the timeout, or when
    this process is interrupted (Ctrl-C, SIGTERM), end its whole tree (SIGTERM, then SIGKILL after
    `grace_s`): its process group and every process seen below it (process_tree.py: grandchildren that
    started their own session included; the tree is walked every WATCH_S while the child runs).
    Leftovers of the tree are killed either way. A child that calls
    die_with_parent_from_environment(kill_group=True) (cell_main does) kills its group itself when this
    process dies without getting to (SIGKILL)."""
    child_env = child_environment()
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_SRC_DIR), child_env.get("PYTHONPATH", "")) if p)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    child_env.setdefault("TOKENIZERS_PARALLELISM", "false")
    start = time.monotonic()
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True, env=child_env)
        tree = ProcessTree(proc.pid)
        timed_out = False
        try:
            returncode = _wait_watching(proc, tree, start + timeout_s)
            if returncode is None:
                timed_out = True
                returncode = _end_tree(proc, tree, grace_s)
        except BaseException:  # interrupted: the cell goes with us (it gets no row; a rerun runs it)
            _end_tree(proc, tree, grace_s)
            raise
        _signal_group(proc.pid, signal.SIGKILL)  # compile workers and other grandchildren must not outlive the cell
        tree.kill()
    return ChildExit(returncode=returncode, timed_out=timed_out, seconds=time.monotonic() - start)


WATCH_S = 0.25  # how often a running cell's process tree is read


def _wait_watching(proc: subprocess.Popen, tree: ProcessTree, deadline: float) -> int | None:
    """The child's exit code, or None at the deadline; its tree watched meanwhile."""
    while True:
        try:
            return proc.wait(timeout=max(0.0, min(WATCH_S, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            tree.watch()
            if time.monotonic() >= deadline:
                return None


def _end_tree(proc: subprocess.Popen, tree: ProcessTree, grace_s: float) -> int | None:
    """SIGTERM the child's group and tree, SIGKILL them after `grace_s`; the child's exit code."""
    tree.watch()
    _signal_group(proc.pid, signal.SIGTERM)
    tree.signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        tree.watch()
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
    tree.kill()
    return proc.returncode


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _outcome_of(exit_: ChildExit, outcome_path: Path, log_path: Path, timeout_s: float, cut_by_limit: bool) -> Outcome:
    tail = log_tail(log_path)
    if exit_.timed_out and cut_by_limit:  # the run's budget ran out, not the cell's own timeout: resumable
        return Outcome("skipped", f"cut by the run's time limit after {timeout_s:.0f} s (before its own timeout); "
                                  f"process tree killed; rerun the same command to resume. Last output: {tail}")
    if exit_.timed_out:
        return Outcome("timeout", f"no result after {timeout_s:.0f} s (its timeout); process tree killed. "
                                  f"Last output: {tail}")
    if outcome_path.is_file():
        try:
            outcome = Outcome.from_json(json.loads(outcome_path.read_text(encoding="utf-8")))
        except (ValueError, RecursionError) as e:  # the cell's own code wrote into the file
            outcome = Outcome("error", f"the cell's outcome file is not JSON ({e}); the cell's code wrote something "
                                       "else there")
        if exit_.returncode not in (0, None):
            outcome.warnings.append(f"the cell process exited with {exit_.returncode} after writing its result")
        return outcome
    rc = exit_.returncode
    if rc is not None and rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else f"signal {-rc}"
        hint = " (SIGKILL: possibly the kernel's out-of-memory killer)" if -rc == signal.SIGKILL else ""
        what = f"crashed: killed by {name}{hint}"
    else:
        what = f"crashed: exit code {rc} without a result"
    status = "unavailable" if any(m in tail for m in UNAVAILABLE_MARKERS) else "error"
    return Outcome(status, f"{what}. Last output: {tail}")


def log_tail(path: Path, lines: int = 12, max_chars: int = 2000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no output)"
    kept = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    tail = " | ".join(ln.strip() for ln in kept) or "(no output)"
    return tail[-max_chars:]


def _run_id(run_dir: Path, plan_name: str) -> str:
    meta_path = run_dir / "run.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    if "run_id" not in meta:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        meta["run_id"] = f"{stamp}-{plan_name}-{uuid.uuid4().hex[:6]}"
        meta["created"] = stamp
    plans = meta.setdefault("plans", [])
    if plan_name not in plans:
        plans.append(plan_name)
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    return meta["run_id"]


def _capture_environment(run_dir: Path) -> dict[str, Any]:
    """The environment, captured in a child (the parent never imports torch); saved as env.json."""
    log_path = run_dir / "logs" / "environment.log"
    out_path = run_dir / "env.json"
    exit_ = run_child([sys.executable, "-c", "import json,sys; from inferlab.child_processes import die_with_parent_from_"
                       "environment as d; d(kill_group=True); from inferlab.environment import capture_environment;"
                       f" open({str(out_path)!r},'w').write(json.dumps(capture_environment()))"], log_path, 120.0)
    if exit_.returncode == 0 and out_path.is_file():
        return json.loads(out_path.read_text())
    return {"error": f"environment capture failed: {log_tail(log_path)}"}


def _prepare_models(cells: list[Cell], cache_root: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Build the preset models the pending cells need (each once, all in one process), resolve
    directories. Returns ({model key: path}, {model key: error message}), keyed by _model_key."""
    paths: dict[str, Path] = {}
    presets: dict[tuple[str, str], str] = {}  # (preset, tokenizer) -> model key
    for cell in cells:
        if cell.model is None:
            continue
        if model_refs.is_preset(cell.model):
            presets[(cell.model, str(cell.config.get("tokenizer", "")))] = _model_key(cell)
        else:
            paths[_model_key(cell)] = Path(cell.model).expanduser().resolve()
    errors: dict[str, str] = {}
    for pair, built in model_refs.build_presets(cache_root, list(presets)).items():
        if isinstance(built, Path):
            paths[presets[pair]] = built
        else:
            errors[presets[pair]] = f"could not build preset {pair[0]}: {built}"
    return paths, errors


def _model_key(cell: Cell) -> str:
    """A preset with another tokenizer is another checkpoint."""
    return f"{cell.model}|{cell.config.get('tokenizer', '')}"
