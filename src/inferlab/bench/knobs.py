"""Knobs: the typed, named settings a scenario or backend declares, and the coercion of user values
(strings from `--set`, native values from TOML) into them.

A knob owns its name, type, allowed values and default; it does not know which combinations are
possible (that is each scenario's or backend's `validate`).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any, Iterable

from inferlab.engine import EngineConfig
from inferlab.errors import ConfigError

_TRUE = {"true", "on", "yes", "1"}
_FALSE = {"false", "off", "no", "0"}
_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "a boolean (true/false, on/off)"}


@dataclass(frozen=True)
class Knob:
    """One setting of a cell. `default=None` means the owner resolves it from the other knobs (see
    Scenario.resolve), e.g. the HF backend turns compile on exactly when the KV cache is static."""

    name: str
    type: type  # int, float, str or bool
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None  # inclusive lower bound for numbers
    # values measured as a reference (a seed's slow path, a diagnosis), never recommended (bench/recommend.py)
    baseline: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.type not in _TYPE_WORDS:
            raise TypeError(f"knob {self.name}: type must be int, float, str or bool, not {self.type!r}")
        if self.default is not None:
            object.__setattr__(self, "default", self.coerce(self.default))

    def coerce(self, value: Any) -> Any:
        """Return `value` as this knob's type, or raise ConfigError naming the knob and the fix."""
        converted = self._convert(value)
        if self.choices is not None and converted not in self.choices:
            allowed = ", ".join(_show(c) for c in self.choices)
            raise ConfigError(f"knob {self.name}={_show(value)} is not allowed; choose one of: {allowed}")
        if self.minimum is not None and converted < self.minimum:
            raise ConfigError(f"knob {self.name}={_show(value)} is below its minimum {_show(self.minimum)}; "
                              f"e.g. --set {self.name}={_show(self.minimum)}")
        return converted

    def _convert(self, value: Any) -> Any:
        wrong = ConfigError(
            f"knob {self.name}={_show(value)}: expected {_TYPE_WORDS[self.type]} ({self.help}); "
            f"fix the value, e.g. --set {self.name}={_show(self.default if self.default is not None else _example(self))}"
        )
        if self.type is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
            raise wrong
        if self.type is int:
            if isinstance(value, bool):
                raise wrong
            if isinstance(value, int):
                return value
            if isinstance(value, str):
                try:
                    return int(value.strip())
                except ValueError:
                    raise wrong from None
            raise wrong
        if self.type is float:
            if isinstance(value, bool):
                raise wrong
            if isinstance(value, (int, float)):
                result = float(value)
            elif isinstance(value, str):
                try:
                    result = float(value.strip())
                except ValueError:
                    raise wrong from None
            else:
                raise wrong
            if not math.isfinite(result):
                raise wrong
            return result
        if not isinstance(value, str):
            raise wrong
        return value.strip()


def _example(knob: Knob) -> Any:
    if knob.choices:
        return knob.choices[0]
    return {int: 1, float: 1.0, str: "value", bool: "true"}[knob.type]


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if not isinstance(value, str) else value


def knob_table(knobs: Iterable[Knob]) -> dict[str, Knob]:
    """Index knobs by name; a duplicate name is a programming error."""
    table: dict[str, Knob] = {}
    for knob in knobs:
        assert knob.name not in table, f"knob {knob.name} declared twice"
        table[knob.name] = knob
    return table


def unknown_knob_error(name: str, known: Iterable[str], where: str, owners: dict[str, str] | None = None) -> ConfigError:
    """A ConfigError for a knob that `where` does not declare: says who does own it, or the nearest name."""
    known = sorted(known)
    hint = ""
    if owners and name in owners:
        hint = f" (it belongs to {owners[name]}, not to {where})"
    else:
        close = difflib.get_close_matches(name, known, n=1)
        if close:
            hint = f"; did you mean {close[0]!r}?"
    return ConfigError(f"unknown knob {name!r} for {where}{hint}; known knobs: {', '.join(known)}")


def common_knobs(*, min_repeats: int, min_duration_s: float, warmup: int,
                 repeats_help: str = "measure at least this many timed repeats") -> list[Knob]:
    """Knobs every scenario has: where it runs and how long it measures."""
    return [
        Knob("device", str, "auto", "where to run: auto picks cuda when available", choices=("auto", "cuda", "cpu")),
        Knob("seed", int, 0, "seed for inputs and sampling", minimum=0),
        Knob("warmup", int, warmup, "untimed warm-up calls before measuring", minimum=0),
        Knob("min_repeats", int, min_repeats, repeats_help, minimum=1),
        Knob("min_duration_s", float, min_duration_s, "and keep repeating until this many seconds", minimum=0.0),
        Knob("cpu_threads", int, 0, "torch intra-op threads (0 = torch's default); on a small shared CPU, 1 avoids "
             "threads spinning against each other", minimum=0),
    ]


DTYPES = ("bfloat16", "float16", "float32")
TOKENIZER_KNOB = Knob("tokenizer", str, "", "tokenizer folder for building a preset model ('' = the preset's own)")


def dtype_knob(help: str = "weights and activations") -> Knob:
    return Knob("dtype", str, "bfloat16", help, choices=DTYPES)


def sampling_knobs(*, top_p: float, do_sample: str | None = None,
                   temperature_help: str = "sampling temperature (0 = greedy)",
                   top_p_help: str = "nucleus sampling threshold (1.0 disables)") -> list[Knob]:
    """temperature and top_p; with `do_sample` (its help) a do_sample knob first, on by default."""
    knobs = [Knob("do_sample", bool, True, do_sample)] if do_sample is not None else []
    return knobs + [Knob("temperature", float, 1.0, temperature_help, minimum=0.0),
                    Knob("top_p", float, top_p, top_p_help, minimum=0.0)]


# The engine's forced tokens in bulk (EngineConfig.forced_run_tokens / forced_run_budget, engine/forced_runs.py): the
# constrained backend's knobs and decode-profile's, the budget's default the engine's own
FORCED_RUN_KNOBS = (
    Knob("forced_run_tokens", int, 0, "forced tokens a constrained row may feed per step after its own (0: one "
         "token per step)", minimum=0),
    Knob("forced_run_budget", float, EngineConfig.forced_run_budget, "booked positions a packed step has room for, "
         "per row (at least 4 runs)", minimum=0.01),
)
