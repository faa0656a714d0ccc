"""Flags shared by the commands that scale out (`--gpus`, `--launcher`, Ray and Slurm options) and the
hand-off to inferlab.scale: one combined progress bar over every worker (read from the shard outputs)
and the closing report. A command adds the flags with `add_scale_args` and, when `wants_scale_out`,
returns `run_scaled_command(args, workload, params)` instead of running in its own process."""

from __future__ import annotations

import argparse
from typing import Any

from inferlab.cli.arg_types import positive_int
from inferlab.errors import ConfigError

EXIT_INCOMPLETE = 3  # some shard failed past its retries; a rerun resumes


def _gpus(text: str) -> int | str:
    return text if text == "all" else positive_int(text, "a number or 'all'")


def add_scale_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scale out: several GPUs, a Ray cluster or a Slurm job array")
    g.add_argument("--gpus", type=_gpus, default=None, metavar="N|all",
                   help="run N workers with one GPU each (all: every GPU this launcher sees); inputs are sharded "
                        "by estimated tokens, outputs merged in input order; a rerun resumes")
    g.add_argument("--launcher", choices=["local", "ray", "slurm"], default=None,
                   help="local: worker processes on this host (default); ray: Ray tasks; slurm: a submitit job array")
    g.add_argument("--num-shards", type=int, default=None,
                   help="input pieces (default: one per worker); more shards than workers queue on free GPUs")
    g.add_argument("--retries", type=int, default=1,
                   help="extra attempts of a failed shard, each resuming it (default 1)")
    g.add_argument("--work-dir", default=None, help="shards, logs and the manifest (default: OUTPUT.scale)")
    g.add_argument("--ray-address", default=None,
                   help="Ray cluster to join (auto, ray://host:10001); default: a local Ray")
    g.add_argument("--ray-cpus-per-task", type=int, default=1)
    g.add_argument("--slurm-partition", default=None, help="the partition (queue) the job array is submitted to "
                   "(default: the cluster's default partition)")
    g.add_argument("--slurm-account", default=None, help="the account charged for the job array (default: yours)")
    g.add_argument("--slurm-time", type=int, default=240, help="minutes per array task (default 240)")
    g.add_argument("--slurm-cpus-per-task", type=int, default=8,
                   help="CPU cores per array task: the conformer pipeline's template and judge processes use them "
                        "(default 8)")
    g.add_argument("--slurm-mem-gb", type=float, default=None,
                   help="host memory per array task in GB (default: the partition's default)")
    g.add_argument("--slurm-array-parallelism", type=int, default=None, help="most tasks running at once")
    g.add_argument("--slurm-logs", default=None,
                   help="submitit's folder, on a shared filesystem (default: WORK_DIR/slurm)")


def wants_scale_out(args: argparse.Namespace) -> bool:
    return args.gpus is not None or args.launcher is not None


def scale_device(device: str) -> str:
    """The workers' device from a command's --device: each worker sees one GPU, so only the kind counts."""
    if device == "cpu":
        return "cpu"
    if device in ("auto", "cuda"):
        return "cuda"
    raise ConfigError(f"--device {device} picks one GPU; with --gpus every worker gets its own: "
                      "use --device cuda (or auto), or cpu for CPU workers")


def scale_config_from(args: argparse.Namespace):
    from inferlab.scale import RayOptions, ScaleConfig, SlurmOptions

    return ScaleConfig(
        workers=args.gpus if args.gpus is not None else "all",
        launcher=args.launcher or "local",
        device=scale_device(args.device),
        num_shards=args.num_shards,
        retries=args.retries,
        work_dir=args.work_dir,
        ray=RayOptions(address=args.ray_address, cpus_per_task=args.ray_cpus_per_task),
        slurm=SlurmOptions(
            partition=args.slurm_partition, account=args.slurm_account, time_min=args.slurm_time,
            cpus_per_task=args.slurm_cpus_per_task, mem_gb=args.slurm_mem_gb,
            array_parallelism=args.slurm_array_parallelism, logs=args.slurm_logs,
        ),
    )


def run_scaled_command(args: argparse.Namespace, workload: str, params: dict[str, Any]) -> int:
    """Run `workload` scaled out with the command's --input/--output; print the report."""
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from inferlab.scale import ScaleJob, run_scaled

    config = scale_config_from(args)
    job = ScaleJob(workload, args.input, args.output, params)
    bar = None

    def show(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:  # rows finished by earlier runs are the bar's start, not part of its rate
            bar = tqdm(total=total, initial=done, unit="row", dynamic_ncols=True, desc=f"{workload} (all workers)")
        bar.update(done - bar.n)

    try:
        with logging_redirect_tqdm():  # log lines above the bar, not through it
            report = run_scaled(job, config, on_progress=show)
    finally:
        if bar is not None:
            bar.close()
    print_scale_report(report)
    return scaled_exit_code(report)


def scaled_exit_code(report) -> int:
    """EXIT_INCOMPLETE when a shard is unfinished; else NO_ROW_OK when the shards run now wrote rows, none
    succeeded (the workers' summaries: rows_ok, rows_error) and no earlier run's rows stand; else 0."""
    from inferlab.cli.row_outcome import exit_code

    if not report.complete:
        return EXIT_INCOMPLETE
    ran = [(s.stats or {}).get("summary", {}) for s in report.shards if s.attempts_this_run]
    if not ran or not all("rows_ok" in summary for summary in ran):
        return 0
    ok = sum(summary["rows_ok"] for summary in ran)
    return exit_code(ok + sum(summary.get("rows_error", 0) for summary in ran), ok, report.rows_total,
                     report.rows_before)


def print_scale_report(report) -> None:
    rate = report.rows_per_s
    print(f"{report.workload}: {report.rows_done} of {report.rows_total} rows in {len(report.shards)} shards on "
          f"{report.workers} {report.launcher} worker(s), {report.wall_s:.1f} s"
          + (f", {rate:,.1f} rows/s this run" if rate else "")
          + f"; shard balance (heaviest/mean est. tokens) {report.imbalance:.3f}")
    print(f"{'shard':>5} {'rows':>8} {'est.tokens':>12} {'status':>8} {'attempts':>8} {'load s':>8} {'run s':>8}")
    for s in report.shards:
        summary = (s.stats or {}).get("summary", {})
        print(f"{s.index:>5} {s.rows:>8} {s.est_tokens:>12,.0f} {s.status:>8} {s.attempts:>8} "
              f"{_seconds(summary.get('load_s')):>8} {_seconds(summary.get('run_s')):>8}")
    for s in report.failed:
        print(f"\nshard {s.index} {s.status}: {s.message or 'not finished'}\n  log: {s.log}")
        if s.log_tail:
            print("  " + s.log_tail.replace("\n", "\n  "))
    if report.complete:
        print(f"wrote {report.merged_rows} rows to {report.output} (work folder {report.work_dir})")
    else:
        print(f"\nthe output was not merged: {len(report.failed)} shard(s) unfinished; the finished shards are kept in "
              f"{report.work_dir}; run the same command again to resume")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
