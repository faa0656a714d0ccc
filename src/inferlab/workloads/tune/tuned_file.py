"""The tuned-configuration file of `inferlab tune`: what it holds, writing it, and reading it back with
every value checked. Owns TUNABLE, the flags (argparse dests) a file may set per workload. Does not own
the merge with the command line (cli/tuned_config_args.py: explicit flags win).

Format (JSON): {"format": FORMAT, "workload", "model", "metric", "recommended": {dest: value} (only the
knobs whose best value won past the measured spread: workloads/winner.py), "best" (the settings of the
best figure), "verdicts" (per knob: value, rival, margin, spread, clear, text), "runner_up_margin",
"candidates": [{"settings", "figures"}, {"settings", "error"} or {"settings", "skipped"} (descent.py)],
"grid" (per KV dtype: the row length, the rows the memory plan fits, the sample's requests, which bound the
grid), "sample", "environment", "created", "model_identity" (the checkpoint's file digests)}.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError, InputError
from inferlab.outputs.atomic import write_json_atomic

FORMAT = "inferlab-tune/1"

# workload -> {argparse dest: type of its value}; the commands' flags of the same names.
TUNABLE: dict[str, dict[str, type]] = {
    "generate": {"max_slots": int, "kv_dtype": str},
    "classify": {"batch_size": int, "dtype": str, "attn": str},
    "conformers": {"max_slots": int, "kv_dtype": str, "forced_run_tokens": int},
}


@dataclass
class TunedConfig:
    workload: str
    model: str  # the checkpoint folder it was measured on, resolved (where it was then)
    metric: str  # the figure the recommendation maximises (a key of each candidate's figures)
    recommended: dict[str, Any]  # the knobs the best candidate wins past the spread ({}: no clear winner)
    best: dict[str, Any] = field(default_factory=dict)  # the settings of the best figure
    verdicts: list[dict[str, Any]] = field(default_factory=list)  # winner.Verdict.as_dict() per compared knob
    candidates: list[dict[str, Any]] = field(default_factory=list)
    runner_up_margin: float | None = None  # best / second best - 1 on the metric; None: one candidate ran
    grid: list[dict[str, Any]] = field(default_factory=list)  # candidates.SizeLimit.as_dict() per KV dtype
    sample: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    format: str = FORMAT
    # models/checkpoint_identity.py of `model`: what tells the same checkpoint at another path (another node of a
    # cluster, a copied folder) from another one at the same path; {} in files written before it was recorded
    model_identity: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_workload(self.workload)
        check_recommended(self.workload, self.recommended, where="recommended")


def check_workload(workload: str) -> None:
    if workload not in TUNABLE:
        raise ConfigError(f"workload {workload!r} cannot be tuned; choose one of {', '.join(TUNABLE)}")


def check_recommended(workload: str, values: dict[str, Any], where: str) -> None:
    allowed = TUNABLE[workload]
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: {', '.join(unknown)} cannot be set for {workload} (allowed: {', '.join(allowed)})")
    for key, value in values.items():
        kind = allowed[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ConfigError(f"{where}: {key}={value!r} must be {kind.__name__}")


def model_mismatch(tuned: TunedConfig, model: str | Path) -> str | None:
    """Why the checkpoint at `model` is not the one `tuned` was measured on (None: it is). By the files'
    digests where the file records them, so that the same checkpoint at another path matches; else by path."""
    if tuned.model_identity:
        from inferlab.models.checkpoint_identity import checkpoint_identity

        here = checkpoint_identity(model)
        differ = sorted(name for name in set(here) | set(tuned.model_identity)
                        if here.get(name) != tuned.model_identity.get(name))
        return f"its files differ ({', '.join(differ)})" if differ else None
    return None if tuned.model == str(Path(model).resolve()) else "another path"


def write_tuned_config(config: TunedConfig, path: str | Path) -> Path:
    if not config.created:
        config.created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return write_json_atomic(path, asdict(config))


def read_tuned_config(path: str | Path, workload: str) -> TunedConfig:
    """The file at `path`, checked: written by `inferlab tune` for `workload`, with values of the right types."""
    source = Path(path)
    try:
        data = json.loads(source.read_text())
    except OSError as e:
        raise InputError(f"--config {source}: cannot read it ({e.strerror}); pass a file written by inferlab tune") from None
    except json.JSONDecodeError as e:
        raise InputError(f"--config {source} is not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"--config {source} is not an inferlab tune file (no \"format\": \"{FORMAT}\")")
    if data.get("workload") != workload:
        raise ConfigError(f"--config {source} was tuned for {data.get('workload')!r}, not {workload}; run "
                          f"inferlab tune --workload {workload}")
    if not isinstance(data.get("recommended"), dict):
        raise InputError(f"--config {source} has no \"recommended\" object")
    check_recommended(workload, data["recommended"], where=f"--config {source}")
    known = {f for f in TunedConfig.__dataclass_fields__}
    return TunedConfig(**{k: v for k, v in data.items() if k in known})
