"""`inferlab bench`: run a plan (a --preset, a --plan TOML file, or --scenario with flags), each cell in
its own process, with a progress bar; print a table of the rows and write the report."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from inferlab.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run a benchmark plan; each cell in a fresh process, rows to RUN_DIR/results.jsonl",
                       description=__doc__)
    source = p.add_mutually_exclusive_group()
    from inferlab.bench.plan_presets import PLAN_PRESETS  # names only: nothing heavy is imported

    source.add_argument("--preset", help=f"a named plan: {', '.join(PLAN_PRESETS)} (--list: what each runs, its "
                        "estimated minutes)")
    source.add_argument("--plan", help="a TOML plan file (see docs/lab.md)")
    source.add_argument("--scenario", help="build a one-sweep plan from flags: attention-kernels, generate, ...")
    p.add_argument("--model", action="append", default=[],
                   help="preset name or checkpoint folder (repeatable, or comma list); with --preset/--plan it replaces "
                        "the model of every sweep that has one")
    p.add_argument("--backend", action="append", default=[], help="generate backend, e.g. hf (repeatable, or comma list)")
    p.add_argument("--set", action="append", default=[], metavar="KNOB=V1,V2",
                   help="a knob's value(s); several values make an axis. With --preset/--plan: overrides that knob in every sweep")
    p.add_argument("--only", action="append", default=[], metavar="KNOB=V1,V2",
                   help="run only the cells whose knob (or scenario/backend/model) takes one of these values")
    p.add_argument("--run-dir", help="where rows, logs and the report go (default runs/<plan name>); rerunning resumes")
    p.add_argument("--model-cache", help="cache folder for preset checkpoints, built under its models/ (default "
                   "RUN_DIR/cache); share one folder across runs to build each preset once")
    p.add_argument("--timeout", type=float, help="override every cell's timeout (seconds)")
    p.add_argument("--limit-seconds", type=float, help="stop launching cells after this long; the rest are 'skipped'")
    p.add_argument("--rerun-failed", action="store_true", help="also rerun cells recorded as error/timeout/unavailable")
    p.add_argument("--dry-run", action="store_true", help="print the cells and the time estimate, run nothing")
    p.add_argument("--no-report", action="store_true", help="do not write RUN_DIR/report")
    p.add_argument("--baseline", help="report speedups against KNOB=VALUE (e.g. attn_implementation=eager)")
    p.add_argument("--list", action="store_true", help="list plan presets, scenarios, backends and their knobs")
    p.set_defaults(func=_bench, resumes=True)


def parse_assignments(items: list[str], flag: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"{flag} {item!r}: write it as KNOB=VALUE or KNOB=V1,V2")
        key, values = item.split("=", 1)
        parts = [v.strip() for v in values.split(",") if v.strip()]
        if not parts:
            raise ConfigError(f"{flag} {item!r}: no value after '='")
        out[key.strip()] = parts
    return out


def check_baseline_knob(baseline: str | None, plan) -> None:
    """Before any cell runs: --baseline must name a knob of the plan (its value is checked against the rows
    when the report is written)."""
    from inferlab.bench.report import parse_baseline

    spec = parse_baseline(baseline)
    if spec is None:
        return
    knobs = {"backend"} | {knob for cell in plan.cells for knob in cell.config}
    if spec[0] not in knobs:
        raise ConfigError(f"--baseline {baseline}: {spec[0]!r} is not a knob of this plan; its knobs: "
                          f"{', '.join(sorted(knobs))}")


def _split(values: list[str]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def _list() -> int:
    from inferlab.bench.backends import BACKENDS
    from inferlab.bench.launcher import estimate_seconds
    from inferlab.bench.plan import build_plan
    from inferlab.bench.plan_presets import PLAN_PRESETS
    from inferlab.bench.scenarios import SCENARIOS

    print("plan presets (estimated minutes on one H100/H200 with every package; on this CPU):")
    for name, data in PLAN_PRESETS.items():
        cells = build_plan(data).cells
        gpu, cpu = estimate_seconds(cells, accelerator=True)[0], estimate_seconds(cells, accelerator=False)[0]
        print(f"  {name:<18} {len(cells):>3} cells  GPU ~{gpu / 60:4.1f} min  CPU ~{cpu / 60:4.1f} min  "
              f"{data.get('description', '')}")
    owners = [(f"scenario {s.name}", s.knobs) for s in SCENARIOS.values()]
    owners += [(f"backend {b.name} (scenario {b.scenario})", b.knobs) for b in BACKENDS.values()]
    for owner, knobs in owners:
        print(f"\n{owner}:")
        for k in knobs:
            allowed = f" {{{', '.join(str(c) for c in k.choices)}}}" if k.choices else ""
            default = "derived" if k.default is None else k.default
            print(f"  {k.name:<20} {k.type.__name__:<5} default {default!s:<10}{allowed}  {k.help}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.list:
        return _list()
    from tqdm import tqdm

    from inferlab.bench.launcher import LaunchOptions, estimate_seconds, launch, pending_cells
    from inferlab.bench.plan import build_plan, load_toml, plan_from_flags
    from inferlab.bench.plan_presets import get_plan_preset
    from inferlab.cli.paths import output_folder

    sets = parse_assignments(args.set, "--set")
    only = parse_assignments(args.only, "--only")
    if args.preset:
        data, overrides = get_plan_preset(args.preset), sets
    elif args.plan:
        data, overrides = load_toml(args.plan), sets
    elif args.scenario:
        data = plan_from_flags(args.scenario, _split(args.model), _split(args.backend), sets)
        overrides = {}
    else:
        raise ConfigError("say what to run: --preset NAME (see --list), --plan FILE.toml, or --scenario NAME with --set flags")
    if args.timeout is not None and not args.timeout > 0:  # also refuses nan
        raise ConfigError(f"--timeout {args.timeout} must be a number of seconds > 0")
    plan = build_plan(data, overrides, only, models=_split(args.model) if not args.scenario else None)
    check_baseline_knob(args.baseline, plan)
    if args.timeout is not None:
        plan = dataclasses.replace(plan, cells=tuple(dataclasses.replace(c, timeout_s=args.timeout) for c in plan.cells))
    run_dir = output_folder("--run-dir", args.run_dir or Path("runs") / plan.name)
    pending, done = pending_cells(plan, run_dir, args.rerun_failed)
    typical, worst = estimate_seconds(pending)
    limit = args.limit_seconds if args.limit_seconds is not None else plan.limit_seconds
    print(f"plan {plan.name}: {len(plan.cells)} cells, {done} already recorded in {run_dir}, {len(pending)} to run; "
          f"estimated ~{typical / 60:.1f} min (at most {worst / 60:.1f} min if every cell hits its timeout)"
          + (f"; time limit {limit:.0f} s" if limit else ""))
    if args.dry_run:
        for cell in pending:
            print(f"  {cell.key}  timeout {cell.timeout_s:>5.0f}s  {cell.label()}")
        return 0
    if pending:
        bar = tqdm(total=len(pending), unit="cell", dynamic_ncols=True)

        def on_start(index: int, total: int, cell) -> None:
            bar.set_description(f"{cell.scenario} {cell.backend or ''}".strip())

        def on_done(index: int, total: int, row: dict) -> None:
            bar.update(1)
            bar.write(f"  {row['status']:<11} {_headline_text(row):>22}  {_short_label(row)}")

        model_cache = Path(args.model_cache) if args.model_cache else None
        launch(plan, LaunchOptions(run_dir=run_dir, limit_seconds=limit, rerun_failed=args.rerun_failed,
                                   model_cache=model_cache), on_start=on_start, on_done=on_done)
        bar.close()
    return _summarise(plan, run_dir, args)


def _headline_text(row: dict) -> str:
    from inferlab.bench.markdown import sig
    from inferlab.bench.results import headline

    value = headline(row)
    if value is None:  # a row without a figure says why (the full message is in the row and the report)
        message = " ".join(str(row.get("message") or "").split())
        return message if len(message) <= 90 else message[:87] + "..."
    return f"{sig(value, 4)} {row.get('headline_metric', '')}"


def _short_label(row: dict) -> str:
    from inferlab.bench.results import PROTOCOL_KNOBS

    c = row.get("config", {})
    keys = [k for k in ("kernel", "attn_implementation", "sdpa_backend", "kv_cache", "compile", "processor", "quantization",
                        "dtype", "pool", "bucket_by_length", "sampling", "batch_size", "q_len", "kv_len")
            if k in c and k not in PROTOCOL_KNOBS]
    return f"{row.get('scenario')} {row.get('backend') or ''} {row.get('model') or ''} " + " ".join(f"{k}={c[k]}" for k in keys)


def _summarise(plan, run_dir: Path, args: argparse.Namespace) -> int:
    from inferlab.bench.markdown import text_table
    from inferlab.bench.report import write_report
    from inferlab.bench.results import config_label, group_rows, label_knobs, load_rows, table_key, varying_knobs

    keys = {c.key for c in plan.cells}
    rows = [r for r in load_rows([run_dir]) if r.get("cell_key") in keys]
    if not rows:
        print("no rows yet")
        return 0
    for (scenario, model, gpu), group in group_rows(rows, table_key).items():
        knobs = label_knobs(group)
        workload = [k for k in varying_knobs(group) if k in (group[0].get("workload_knobs") or [])] or ["batch_size"]
        print(f"\n{scenario} · {model} · {gpu}")
        print(text_table(["status", "workload", "configuration", "figure"],
                         [[r["status"], config_label(r, workload), config_label(r, knobs), _headline_text(r)] for r in group]))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("\n" + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; rows in {run_dir / 'results.jsonl'}")
    if counts.get("skipped"):
        print("some cells were skipped by the time limit: run the same command again to resume")
    if not args.no_report:
        path = write_report([str(run_dir)], rows, run_dir / "report", args.baseline)
        print(f"report: {path}")
    return 0
