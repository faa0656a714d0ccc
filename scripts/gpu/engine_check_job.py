"""engine_check parts on the conformer job through the Engine alone (issue 11's acceptance figures).

The job: NCI first_5K molecules with 20-50 heavy atoms (the first N that build a template), K = 8
conformers each sharing the molecule's prompt and ConstraintProgram, qwen3-0.6b (random weights,
qwen3-chem tokenizer), top-p 1.0 at T = 1, 256 slots, max_seq_len = the longest prompt + program bound.
--quick: tiny-qwen3, 4 molecules of 5-8 atoms, K = 2, 16 slots (a CPU smoke run of the same code).

prefill          the whole job twice (the first call of a fresh engine, then again): prefill_s as a share
                 of the call's wall time (target <= 3%) and of decode + prefill, per batch the device time
                 (prefill_s / batches) against the host's (prefill_host_s / batches), distinct prompts
                 prefilled against rows admitted (shared prompts), prefill and decode graphs captured in
                 the call; the overlap: per prefill batch, whether the device reached the prefill before
                 the host had finished launching it (CUDA events placed on the host clock through a
                 reference event recorded on an idle device), and the device time so spent waiting; and
                 isolated prefills of 8 / 32 / 64 distinct prompts and of 8 prompts x 8 rows (host launch
                 vs total, the last of 4 repeats).
constraint_cost  constrained vs unconstrained at equal lengths, the way the issue asks: the same requests
                 (prompts, ids and so seeds, K, 256 rows, top-p 1.0 T = 1), the unconstrained ones with
                 min = max = the constrained output's length; both warm (a warm pass of each first, so
                 graphs and kernels exist); tok/s = tokens / wall of Engine.generate, and the step time
                 (decode_s / steps). Target >= 0.95x. Every constrained output is checked valid.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from engine_check_speed import generate_timed  # beside this file (engine_check.py puts it on sys.path)

PROFILE = "v3-fixed4"


def drug_molecules(count: int, lo: int, hi: int) -> list[str]:
    """The first `count` NCI first_5K molecules with lo..hi heavy atoms that build a template."""
    from rdkit import Chem, RDConfig, RDLogger

    from inferlab.errors import InferlabError
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.template import build_template

    RDLogger.DisableLog("rdApp.*")
    profile, out = get_profile(PROFILE), []
    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        for line in f:
            smiles = line.split()[0]
            mol = Chem.MolFromSmiles(smiles)
            if mol is None or not lo <= mol.GetNumHeavyAtoms() <= hi:
                continue
            try:
                build_template(smiles, profile)
            except InferlabError:
                continue
            out.append(smiles)
            if len(out) == count:
                break
    return out


@dataclasses.dataclass
class Job:
    """The prepared molecules of the job: templates, prompt ids and programs, compiled once each."""

    smiles: list[str]
    templates: list[Any]
    prompts: list[tuple[int, ...]]
    programs: list[Any]
    k: int
    prepare_s: float

    @property
    def max_seq_len(self) -> int:
        return max(len(p) + prog.max_new_tokens for p, prog in zip(self.prompts, self.programs))

    def requests(self, molecules: int | None = None, lengths: dict[str, int] | None = None) -> list[Any]:
        """K requests per molecule (ids m<i>#<k>, seeds derived from the ids by the engine); constrained,
        or with `lengths` unconstrained with exactly those output lengths."""
        from inferlab.types import Request, SamplingParams

        out = []
        for i in range(len(self.smiles) if molecules is None else molecules):
            for j in range(self.k):
                rid = f"m{i}#{j}"
                if lengths is None:
                    out.append(Request(id=rid, prompt_ids=self.prompts[i], constraint=self.programs[i],
                                       sampling=SamplingParams(temperature=1.0, top_p=1.0)))
                else:
                    n = lengths[rid]
                    out.append(Request(id=rid, prompt_ids=self.prompts[i], sampling=SamplingParams(
                        temperature=1.0, top_p=1.0, max_new_tokens=n, min_new_tokens=n)))
        return out


def prepare_job(ctx, molecules: int, k: int) -> tuple[Any, Job]:
    """The checkpoint's tokenizer, the job's molecules prepared with it."""
    from inferlab.constraints.program import compile_program
    from inferlab.models.tokenizer_loading import load_tokenizer
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.template import build_template

    path = ctx.checkpoint("tiny-qwen3" if ctx.quick else "qwen3-0.6b")
    tokenizer = load_tokenizer(path)
    t0 = time.perf_counter()
    smiles = drug_molecules(molecules, *((5, 8) if ctx.quick else (20, 50)))
    templates = [build_template(s, get_profile(PROFILE)) for s in smiles]
    prompts = [tuple(t.prompt_ids(tokenizer)) for t in templates]
    programs = [compile_program(t.segments, tokenizer) for t in templates]
    return path, Job(smiles, templates, prompts, programs, k, time.perf_counter() - t0)


def job_engine(ctx, path, job: Job):
    from inferlab.engine import Engine, EngineConfig

    slots = 16 if ctx.quick else 256
    return Engine(EngineConfig(model=path, device=str(ctx.device), max_slots=slots, max_seq_len=job.max_seq_len))


def timed_call(ctx, engine, requests) -> tuple[dict[str, Any], list[Any]]:
    """One synchronised Engine.generate: its wall time and the change of every numeric stat."""
    results, wall, delta = generate_timed(ctx, engine, requests)
    tokens = sum(len(r.token_ids) for r in results)
    steps = max(delta["decode_steps"], 1)
    batches = max(delta["prefill_batches"], 1)
    cell = {
        "requests": len(requests), "ok": sum(r.ok for r in results), "tokens": tokens, "wall_s": wall,
        "tok_per_s": tokens / wall, "ms_per_step": 1e3 * delta["decode_s"] / steps,
        "prefill_share_of_wall": delta["prefill_s"] / wall,
        "prefill_share_of_device": delta["prefill_s"] / max(delta["prefill_s"] + delta["decode_s"], 1e-9),
        "prefill_device_ms_per_batch": 1e3 * delta["prefill_s"] / batches,
        "prefill_host_ms_per_batch": 1e3 * delta["prefill_host_s"] / batches,
        "stats": delta,
    }  # fmt: skip
    return cell, results


class PrefillOverlap:
    """Wraps runner.prefill: per batch, host launch start/end and CUDA events around it, placed on the host
    clock through a reference event recorded on an idle device."""

    def __init__(self, engine) -> None:
        import torch

        self.torch, self.engine, self.runner = torch, engine, engine.runner
        self.records: list[tuple[float, float, Any, Any]] = []
        self.real = self.runner.prefill
        torch.cuda.synchronize()
        self.ref = torch.cuda.Event(enable_timing=True)
        self.ref.record()
        self.ref_host = time.perf_counter()
        torch.cuda.synchronize()

    def __enter__(self) -> "PrefillOverlap":
        def prefill(rows, items):
            begin, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            h0 = time.perf_counter()
            begin.record()
            done = self.real(rows, items)
            end.record()
            self.records.append((h0, time.perf_counter(), begin, end))
            return done

        self.runner.prefill = prefill
        return self

    def __exit__(self, *exc) -> None:
        del self.runner.prefill  # the instance attribute: the method shows through again

    def report(self) -> dict[str, Any]:
        self.torch.cuda.synchronize()
        waited, late, device_ms, host_ms = 0.0, 0, [], []
        for h0, h1, begin, end in self.records:
            d0 = self.ref_host + self.ref.elapsed_time(begin) / 1e3  # when the device reached the prefill
            device_ms.append(begin.elapsed_time(end))
            host_ms.append(1e3 * (h1 - h0))
            if d0 < h1:  # the device was there before the host had launched everything: it waited
                late += 1
                waited += h1 - d0
        n = max(len(self.records), 1)
        return {"batches": len(self.records), "device_reached_before_launch_done": late,
                "device_wait_s": waited, "device_ms_per_batch": sum(device_ms) / n,
                "host_launch_ms_per_batch": sum(host_ms) / n}  # fmt: skip


def overlap_row(ctx, part: str, label: str, overlap: dict[str, Any]) -> None:
    """The summary row of a PrefillOverlap report."""
    ctx.row(part, f"{label}: batches the device reached before their launch ended",
            f"{overlap['device_reached_before_launch_done']} of {overlap['batches']}",
            f"device waited {overlap['device_wait_s']:.2f} s in all; launch {overlap['host_launch_ms_per_batch']:.1f} "
            "ms/batch")


def isolated_prefills(ctx, engine, job: Job) -> dict[str, Any]:
    """Admit + prefill of distinct prompts alone (host launch, then total with a sync), last of 4 repeats."""
    from inferlab.engine.intake import Prepared
    from inferlab.types import Request, SamplingParams, Timings

    runner, out = engine.runner, {}
    sampling = SamplingParams(temperature=1.0)
    for label, distinct, per in (("8", 8, 1), ("32", 32, 1), ("64", 64, 1), ("8x8 shared", 8, 8)):
        n = min(distinct * per, engine.plan.slots)
        items = [Prepared(i, Request(id=f"p{i}", prompt_ids=(0,)), list(job.prompts[(i // per) % len(job.prompts)]),
                          sampling, i, [], 0, Timings()) for i in range(n)]  # fmt: skip
        out[label] = {"rows": n, **time_admit_prefill(ctx, runner, items, repeats=4)}
    return out


def time_admit_prefill(ctx, runner, items: list, repeats: int) -> dict[str, float]:
    """runner.admit + prefill of `items` into rows 0..n-1 on an idle device, `repeats` times: the last one's
    host launch time and its total up to a sync (ms); the rows are released after."""
    import torch

    n = len(items)
    with torch.inference_mode():
        for _ in range(repeats):
            ctx.sync()
            t0 = time.perf_counter()
            runner.admit(range(n), items)
            runner.prefill(range(n), items)
            t1 = time.perf_counter()
            ctx.sync()
            t2 = time.perf_counter()
        runner.release(range(n))
    return {"host_launch_ms": 1e3 * (t1 - t0), "total_ms": 1e3 * (t2 - t0)}


def part_prefill(ctx) -> dict[str, Any]:
    molecules, k = (4, 2) if ctx.quick else (400, 8)
    path, job = prepare_job(ctx, molecules, k)
    res: dict[str, Any] = {"molecules": len(job.smiles), "k": k, "prepare_s": job.prepare_s,
                           "max_seq_len": job.max_seq_len,
                           "prompt_tokens_mean": sum(map(len, job.prompts)) / len(job.prompts)}  # fmt: skip
    engine = job_engine(ctx, path, job)
    res["startup"] = engine.stats.as_dict()
    requests = job.requests()
    for label in ("first_call", "second_call"):
        if ctx.cuda and label == "second_call":
            with PrefillOverlap(engine) as overlap:
                cell, results = timed_call(ctx, engine, requests)
            cell["overlap"] = overlap.report()
        else:
            cell, results = timed_call(ctx, engine, requests)
        res[label] = cell
        s = cell["stats"]
        verdict = "ok" if cell["prefill_share_of_wall"] <= 0.03 else "FAIL > 3%"
        ctx.row("prefill", f"{label}: prefill_s / wall ({s['prefill_batches']} batches)",
                f"{s['prefill_s']:.2f} s / {cell['wall_s']:.1f} s",
                f"{verdict} ({100 * cell['prefill_share_of_wall']:.1f}%)")
        ctx.row("prefill", f"{label}: per batch device | host ms",
                f"{cell['prefill_device_ms_per_batch']:.2f} | {cell['prefill_host_ms_per_batch']:.2f}",
                f"{s['prefill_lanes']} prompts prefilled for {s['prefill_lanes'] + s['shared_prompt_rows']} rows")
        ctx.row("prefill", f"{label}: tok/s, graphs captured in the call",
                f"{cell['tok_per_s']:,.0f}", f"{s['lazy_graphs']} graphs in {s['lazy_capture_s']:.2f} s; "
                f"intake {s['intake_s']:.2f} s")  # fmt: skip
        if "overlap" in cell:
            overlap_row(ctx, "prefill", label, cell["overlap"])
    if ctx.cuda:
        res["isolated"] = isolated_prefills(ctx, engine, job)
        for label, cell in res["isolated"].items():
            ctx.row("prefill", f"isolated {label} prompts: host launch | total ms",
                    f"{cell['host_launch_ms']:.2f} | {cell['total_ms']:.2f}")
    res["all_ok"] = all(r.ok for r in results)
    del engine
    ctx.free()
    return res


def part_constraint_cost(ctx) -> dict[str, Any]:
    from engine_check_constrained import check_output  # beside this file (engine_check.py puts it on sys.path)

    molecules, k, warm_molecules = (4, 2, 2) if ctx.quick else (200, 8, 40)
    path, job = prepare_job(ctx, molecules, k)
    engine = job_engine(ctx, path, job)
    res: dict[str, Any] = {"molecules": len(job.smiles), "k": k, "max_seq_len": job.max_seq_len}
    warm, warm_results = timed_call(ctx, engine, job.requests(warm_molecules))  # graphs, kernels, the runtime
    warm_lengths = {r.id: len(r.token_ids) for r in warm_results}
    timed_call(ctx, engine, job.requests(warm_molecules, warm_lengths))
    res["warm_constraint_setup_s"] = engine.stats.constraint_setup_s
    constrained, results = timed_call(ctx, engine, job.requests())
    lengths = {r.id: len(r.token_ids) for r in results}
    unconstrained, free = timed_call(ctx, engine, job.requests(lengths=lengths))
    invalid = [r.id for i, r in enumerate(results) if check_output(r, job.templates[i // k], job.smiles[i // k])]
    ratio = constrained["tok_per_s"] / unconstrained["tok_per_s"]
    step_ratio = unconstrained["ms_per_step"] / constrained["ms_per_step"]
    res |= {"constrained": constrained, "unconstrained": unconstrained, "ratio": ratio, "step_ratio": step_ratio,
            "invalid": len(invalid), "invalid_examples": invalid[:5],
            "equal_lengths": [len(r.token_ids) for r in free] == [lengths[r.id] for r in free]}  # fmt: skip
    ctx.row("constraint_cost", f"{len(results)} rows: valid", f"{len(results) - len(invalid)} of {len(results)}",
            "ok" if not invalid else "FAIL")
    ctx.row("constraint_cost", "constrained vs unconstrained tok/s (equal lengths)",
            f"{constrained['tok_per_s']:,.0f} vs {unconstrained['tok_per_s']:,.0f}",
            ("ok " if ratio >= 0.95 else "FAIL < 0.95 ") + f"({ratio:.3f}x)")
    ctx.row("constraint_cost", "ms per step constrained | unconstrained",
            f"{constrained['ms_per_step']:.3f} | {unconstrained['ms_per_step']:.3f}",
            f"step {step_ratio:.3f}x; lazy graphs in the timed calls {constrained['stats']['lazy_graphs']} + "
            f"{unconstrained['stats']['lazy_graphs']}")  # fmt: skip
    del engine
    ctx.free()
    return res
