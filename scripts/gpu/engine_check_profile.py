"""engine_check part on where the time goes: per-kernel profile of a decode step.

The profile runs eager steps under torch.profiler (kernel device times, top 15, calls per step) and times
graph replays of the same bucket, so kernel time and launch/gap overhead can be told apart.
"""

from __future__ import annotations

from typing import Any

import torch
from engine_check_micro import time_us
from engine_check_speed import PROMPT_LEN, _engine


def _kernel_table(prof, steps: int, top: int = 15) -> list[dict[str, Any]]:
    from torch.autograd import DeviceType

    table = []
    for evt in prof.key_averages():
        if getattr(evt, "device_type", None) != DeviceType.CUDA:  # kernels only: CPU ops would count twice
            continue
        device_us = getattr(evt, "self_device_time_total", None)
        if device_us is None:
            device_us = getattr(evt, "self_cuda_time_total", 0.0)
        if device_us and device_us > 0:
            table.append(
                {"kernel": evt.key[:90], "us_per_step": device_us / steps, "calls_per_step": evt.count / steps}
            )
    table.sort(key=lambda r: -r["us_per_step"])
    return table[:top] + [
        {
            "kernel": "(all)",
            "us_per_step": sum(r["us_per_step"] for r in table),
            "calls_per_step": sum(r["calls_per_step"] for r in table),
        }
    ]


def part_profile(ctx) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    from inferlab.engine.intake import Prepared
    from inferlab.engine.sampler import FILTER_NONE, FILTER_TOP_P
    from inferlab.types import Request, SamplingParams, Timings

    res: dict[str, Any] = {}
    preset = "tiny" if ctx.quick else "llama-380m"
    cells = (
        [(4, FILTER_TOP_P)]
        if ctx.quick
        else [(16, FILTER_TOP_P), (16, FILTER_NONE), (256, FILTER_TOP_P), (256, FILTER_NONE)]
    )
    engine = _engine(ctx, preset, max(b for b, _ in cells), 24 if ctx.quick else 1000)
    runner = engine.runner
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.cuda else [])
    for batch, level in cells:
        sampling = SamplingParams(
            temperature=1.0,
            top_p=0.9 if level == FILTER_TOP_P else 1.0,
            max_new_tokens=900 if not ctx.quick else 20,
            ignore_eos=True,
        )
        items = [
            Prepared(
                i, Request(id=f"p{i}", prompt_ids=(1,)), list(range(10, 10 + PROMPT_LEN)), sampling, i, [], 0, Timings()
            )
            for i in range(batch)
        ]
        with torch.inference_mode():
            runner.admit(range(batch), items)
            runner.prefill(range(batch), items)
            runner.decode(batch, (level, False), 4, PROMPT_LEN + 1)
            name = f"B={batch} level={level}"
            graph_us = (
                time_us(
                    ctx, lambda: runner.decode(batch, (level, False), 1, None), 10 if ctx.quick else 50, graph=False
                )
                if runner.graphs is not None
                else None
            )
            steps = 3 if ctx.quick else 5
            with profile(activities=activities) as prof:
                for _ in range(steps):
                    runner.decode_step(batch, (level, False), None)
                ctx.sync()
            runner.release(range(batch))
        table = _kernel_table(prof, steps) if ctx.cuda else []
        res[name] = {"graph_step_us": graph_us, "kernels": table}
        if ctx.cuda:
            total = table[-1]
            ctx.row(
                "profile",
                f"{preset} {name}: graph step us | kernel us (calls)",
                f"{graph_us:.0f} | {total['us_per_step']:.0f} ({total['calls_per_step']:.0f})",
            )
            for r in table[:3]:
                ctx.row("profile", f"  {r['kernel'][:54]}", f"{r['us_per_step']:.1f} us x{r['calls_per_step']:.0f}")
        else:
            ctx.row("profile", f"{preset} {name}", "cpu: profiled (no device kernels)")
    return res
