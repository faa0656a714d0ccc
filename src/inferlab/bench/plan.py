"""Plans: what a sweep runs, from a TOML file, command-line flags or a named preset, expanded into a
list of validated Cells before anything runs.

One schema serves all three sources (a preset is the same dict in code; flags build a one-sweep dict):

    name = "my-plan"
    timeout_s = 600            # per cell, unless a sweep says otherwise
    limit_seconds = 1500       # optional: stop launching cells after this long (the rest: "skipped")
    plugins = ["my_scenario.py"]   # relative to the plan file
    [defaults.generate]        # knob values for every sweep of that scenario (a sweep's own values win)
    new_tokens = 64
    [[sweep]]
    scenario = "generate"
    models = ["tiny"]          # or model = "tiny"
    backends = ["hf"]          # or backend = "hf"
    [sweep.set]                # a scalar fixes a knob; a list is an axis (cartesian product)
    batch_size = [16, 64]

Every refusal is a ConfigError naming the sweep, the knob and the fix.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.backends import BACKENDS, backends_for, get_backend
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, unknown_knob_error
from inferlab.bench.plugins import load_plugin_files
from inferlab.bench.scenarios import SCENARIOS, get_scenario
from inferlab.errors import ConfigError

_PLAN_KEYS = {"name", "description", "timeout_s", "limit_seconds", "plugins", "defaults", "sweep"}
_SWEEP_KEYS = {"scenario", "model", "models", "backend", "backends", "set", "timeout_s"}


@dataclass(frozen=True)
class Plan:
    name: str
    cells: tuple[Cell, ...]
    limit_seconds: float | None = None
    plugins: tuple[str, ...] = ()
    description: str = ""


def load_toml(path: str | Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"plan file {p} does not exist; pass --plan PATH to a TOML plan or use --preset NAME")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"plan file {p} is not valid TOML: {e}") from None
    if isinstance(data.get("plugins"), list):  # a plugin path is relative to the plan file, wherever bench runs
        data["plugins"] = [str(p.parent / plugin) if isinstance(plugin, str) else plugin for plugin in data["plugins"]]
    return data


def plan_from_flags(scenario: str, models: list[str], backends: list[str], settings: dict[str, list[str]],
                    timeout_s: float | None = None) -> dict[str, Any]:
    """The plan dict for `inferlab bench --scenario S --model M --backend B --set k=v1,v2 ...`."""
    sweep: dict[str, Any] = {"scenario": scenario, "set": dict(settings)}
    if models:
        sweep["models"] = list(models)
    if backends:
        sweep["backends"] = list(backends)
    plan: dict[str, Any] = {"name": "flags", "sweep": [sweep]}
    if timeout_s is not None:
        plan["timeout_s"] = timeout_s
    return plan


def build_plan(data: dict[str, Any], overrides: dict[str, list[Any]] | None = None,
               only: dict[str, list[Any]] | None = None, models: list[str] | None = None) -> Plan:
    """Expand and validate. `overrides` replace a knob's values in every sweep that has the knob;
    `only` keeps the cells whose knob (or scenario/backend/model) takes one of the given values;
    `models` replaces the models of every sweep that takes one (the same protocol on another model)."""
    _check_keys(data, _PLAN_KEYS, "the plan")
    if models:
        data = {**data, "sweep": [_with_models(s, models) for s in data.get("sweep", [])]}
    name = str(data.get("name", "plan"))
    plugins = tuple(str(p) for p in data.get("plugins", []))
    load_plugin_files(plugins)
    sweeps = data.get("sweep")
    if not isinstance(sweeps, list) or not sweeps:
        raise ConfigError(f"plan {name}: no [[sweep]] tables; add at least one sweep with a scenario")
    defaults = data.get("defaults", {})
    for scenario_name in defaults:
        get_scenario(scenario_name)
    overrides = dict(overrides or {})
    used_overrides: set[str] = set()
    cells: list[Cell] = []
    seen: set[str] = set()
    for index, sweep in enumerate(sweeps, start=1):
        where = f"plan {name}, sweep {index}"
        for cell in _expand_sweep(sweep, defaults, overrides, used_overrides, data.get("timeout_s"), where):
            if cell.key not in seen:
                seen.add(cell.key)
                cells.append(cell)
    unused = sorted(set(overrides) - used_overrides)
    if unused:
        known = sorted({knob for cell in cells for knob in cell.config})
        raise ConfigError(f"plan {name}: --set {unused[0]} matches no knob of any sweep; this plan's knobs: "
                          f"{', '.join(known)} (`inferlab bench --list` lists every scenario's)")
    if only:
        cells = _filter(cells, only, name)
    limit = data.get("limit_seconds")
    return Plan(name=name, cells=tuple(cells), limit_seconds=float(limit) if limit is not None else None,
                plugins=plugins, description=str(data.get("description", "")))


def _expand_sweep(sweep: dict[str, Any], defaults: dict[str, Any], overrides: dict[str, list[Any]],
                  used_overrides: set[str], plan_timeout: Any, where: str) -> list[Cell]:
    if not isinstance(sweep, dict):
        raise ConfigError(f"{where}: a sweep must be a table with scenario = ...")
    _check_keys(sweep, _SWEEP_KEYS, where)
    if "scenario" not in sweep:
        raise ConfigError(f"{where}: no scenario; choose one of: {', '.join(sorted(SCENARIOS))}")
    scenario = get_scenario(str(sweep["scenario"]))
    where = f"{where} ({scenario.name})"
    models = _one_or_many(sweep, "model", "models", where)
    backends = _one_or_many(sweep, "backend", "backends", where)
    if scenario.uses_model:
        if not models:
            raise ConfigError(f"{where}: no model; set model = a preset ({', '.join(model_refs.preset_names())}) or a checkpoint folder")
        for m in models:
            model_refs.check_model(m, where)
    elif models:
        raise ConfigError(f"{where}: scenario {scenario.name} takes no model; remove model/models")
    if scenario.uses_backends:
        if not backends and scenario.default_backend is not None:
            backends = [scenario.default_backend]
        if not backends:
            raise ConfigError(f"{where}: no backend; choose from: {', '.join(sorted(backends_for(scenario.name)))}")
        for b in backends:
            get_backend(b, scenario.name)
    elif backends:
        raise ConfigError(f"{where}: scenario {scenario.name} takes no backend; remove backend/backends")

    sweep_knobs = dict(scenario.knob_map)
    for b in backends:
        sweep_knobs.update(get_backend(b, scenario.name).knob_map)
    values: dict[str, list[Any]] = {}
    for is_default, source in ((True, defaults.get(scenario.name, {})), (False, sweep.get("set", {}))):
        for knob_name, raw in source.items():
            if is_default and knob_name not in sweep_knobs and _owners().get(knob_name, "").startswith("backend"):
                continue  # a default for a backend this sweep does not use
            if knob_name not in sweep_knobs:
                raise unknown_knob_error(knob_name, sweep_knobs, f"{where}: scenario {scenario.name}"
                                         + (f" with backend {', '.join(backends)}" if backends else ""), _owners())
            values[knob_name] = raw if isinstance(raw, list) else [raw]
    for knob_name, raw in overrides.items():
        if knob_name in sweep_knobs:
            values[knob_name] = list(raw)
            used_overrides.add(knob_name)
    for knob_name, raw in values.items():
        if not raw:
            raise ConfigError(f"{where}: knob {knob_name} has an empty list of values; give at least one")
        values[knob_name] = [sweep_knobs[knob_name].coerce(v) for v in raw]

    timeout = float(sweep.get("timeout_s", plan_timeout or scenario.default_timeout_s))
    axes = list(values.items())
    cells = []
    for model in models or [None]:
        for backend in backends or [None]:
            cell_knobs = dict(scenario.knob_map)
            if backend is not None:
                cell_knobs.update(get_backend(backend, scenario.name).knob_map)
            for combo in itertools.product(*[vals for _, vals in axes]):
                chosen = {k: v for (k, _), v in zip(axes, combo) if k in cell_knobs}
                cells.append(_make_cell(scenario.name, backend, model, cell_knobs, chosen, timeout, where))
    return cells


def _make_cell(scenario_name: str, backend: str | None, model: str | None, knobs: dict[str, Knob],
               chosen: dict[str, Any], timeout_s: float, where: str) -> Cell:
    scenario = get_scenario(scenario_name)
    config = {name: chosen.get(name, knob.default) for name, knob in knobs.items()}
    config = scenario.resolve(config)
    if backend is not None:
        config = get_backend(backend, scenario_name).resolve(config)
    if "tokenizer" in config and not config["tokenizer"] and model is not None:
        config["tokenizer"] = model_refs.default_tokenizer_for(model)
    unresolved = [k for k, v in config.items() if v is None]
    assert not unresolved, f"{scenario_name}/{backend}: knobs left unresolved: {unresolved}"
    cell = Cell(scenario=scenario_name, backend=backend, model=model, config=config, timeout_s=timeout_s)
    try:
        scenario.validate(cell)
        if backend is not None:
            get_backend(backend, scenario_name).validate(cell)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    return cell


def _filter(cells: list[Cell], only: dict[str, list[Any]], plan_name: str) -> list[Cell]:
    """Keep cells whose value of each filtered name is among the wanted ones; a cell without that knob
    (another scenario's) is not constrained by it. A name no cell has is a typo: refused."""
    fields = ("scenario", "backend", "model")
    for name in only:
        if name not in fields and not any(name in c.config for c in cells):
            raise ConfigError(f"plan {plan_name}: --only {name} is not a knob of any cell; check the name")

    def matches(cell: Cell) -> bool:
        for name, wanted in only.items():
            if name in fields:
                value = getattr(cell, name)
            elif name in cell.config:
                value = cell.config[name]
            else:
                continue
            if not any(_same(value, w) for w in wanted):
                return False
        return True

    kept = [c for c in cells if matches(c)]
    if not kept:
        raise ConfigError(f"plan {plan_name}: --only {only} keeps no cell; check the values")
    return kept


def _same(value: Any, wanted: Any) -> bool:
    if isinstance(value, bool):
        return str(wanted).lower() in (("true", "on", "yes", "1") if value else ("false", "off", "no", "0"))
    if isinstance(value, (int, float)) and not isinstance(wanted, bool):
        try:
            return float(wanted) == float(value)
        except ValueError:
            return False
    return str(value).lower() == str(wanted).lower()


def _with_models(sweep: Any, models: list[str]) -> Any:
    if not isinstance(sweep, dict) or not ({"model", "models"} & set(sweep)):
        return sweep
    replaced = {k: v for k, v in sweep.items() if k not in ("model", "models")}
    replaced["models"] = list(models)
    return replaced


def _one_or_many(sweep: dict[str, Any], one: str, many: str, where: str) -> list[str]:
    if one in sweep and many in sweep:
        raise ConfigError(f"{where}: give {one} or {many}, not both")
    if one in sweep:
        return [str(sweep[one])]
    value = sweep.get(many, [])
    if not isinstance(value, list):
        raise ConfigError(f"{where}: {many} must be a list, e.g. {many} = [\"{value}\"]")
    return [str(v) for v in value]


def _check_keys(table: dict[str, Any], allowed: set[str], where: str) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r}; allowed: {', '.join(sorted(allowed))}")


def _owners() -> dict[str, str]:
    """knob name -> who declares it, for 'it belongs to ...' hints."""
    owners: dict[str, str] = {}
    for s in SCENARIOS.values():
        for k in s.knobs:
            owners.setdefault(k.name, f"scenario {s.name}")
    for b in BACKENDS.values():
        for k in b.knobs:
            owners.setdefault(k.name, f"backend {b.name} of scenario {b.scenario}")
    return owners
