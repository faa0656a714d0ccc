"""Scenario `decode-profile`: one decode step of the engine against its bound, kernel family by kernel family.

The engine's DecodeStepProbe sets the step up: `batch_size` rows of one prompt of `context_tokens - 1` random
ids admitted and prefilled (one prefill, the K/V copied to the other rows), so each row's attention reads
`context_tokens` positions, and their state frozen (every step reads and writes the same positions) while the
step is measured:
  step time     the decode step's CUDA-graph replays (eager steps on CPU), `warmup` steps first, then batches
                of 10 steps between device synchronisations until `min_repeats` and `min_duration_s`
  kernel time   `profile_steps` replays under torch.profiler: each kernel's device time, its family carried
                over from one eager step run with every operation in its family's profiler range
                (the probe's `labelled`; bench/step_profile.py); on CPU the aten ops' self times
  bound         each family's fewest bytes and FLOPs (bench/roofline.py) at the device's measured copy
                bandwidth, bf16 matrix rate and launch floor (bench/bandwidth.py, bench/device_limits.py,
                measured in the same run)
With `constraint=on` the step is the constrained variant: the rows take conformer programs in turn, compiled
as the conformer scenarios compile them (molecules.py's loader, the model's tokenizer: qwen3-chem for the
qwen3 presets) from the first MOLECULES drug-sized NCI molecules (20-50 heavy atoms, stereo assigned: the
conformer-pipeline job's), each molecule's program beside its template from the first hole on, so that half the
rows sit in a copy op and half in a hole (the probe keeps each row at its program's op after the prefill's token),
the constraint pressure measured as the engine measures it. `forced_run_tokens` F > 0 (constraint=on only) makes
the engine pack forced runs into its constrained steps (EngineConfig.forced_run_tokens / forced_run_budget,
engine/forced_runs.py): the step's forward runs over T = rows + the budget's positions (`packed_positions`);
the frozen rows book no run (`booked_per_step`, counted), so the row is the packed step's fixed cost, as
tests/gpu/test_forced_runs_gpu.py times it. The constraint's kernels are the family `constraint`, the packed
step's booking and packing `forced runs`, the booked tokens' pressure `forced pressure` (engine/op_labels.py).
The row holds the per-family table (`families`: time, share of the step, achieved GB/s and TFLOP/s, % of the
bound, what bounds it, why a family misses it), the step's own bandwidth (weights + K/V over the step time,
as the engine's decode figure counts it), the top kernels, and where the profile came from; the replayed
step's kernels in order, with their families, go to RUN_DIR/profiles/<cell key>.json. `inferlab report`
renders the table (report_roofline.py).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from functools import partial
from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import FORCED_RUN_KNOBS, TOKENIZER_KNOB, Knob, common_knobs, dtype_knob, sampling_knobs
from inferlab.bench.roofline import Ceilings, StepShape, family_rows, gemm_tiles, minimum_work, step_summary
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.bench.scenarios.molecules import MoleculeSelection
from inferlab.bench.step_profile import (
    carry_labels,
    family_range,
    graph_kernels,
    labelled_kernels,
    one_step,
    per_step,
    profile_events,
    step_range,
    top_kernels,
)
from inferlab.errors import ConfigError

STEPS_PER_SAMPLE = 10  # steps between two device synchronisations of the timed part
EAGER_STEPS = 3  # labelled eager steps (the labels; the profile itself when the replays show no kernels)
MOLECULES = 8  # constraint=on: molecules whose programs the rows take in turn (two programs each)
DRUG_SIZED = MoleculeSelection(min_heavy_atoms=20, max_heavy_atoms=50, assign_stereo=True)  # conformer-pipeline's
PROFILE = "v3-fixed4"  # the conformer format the presets run

KNOBS = (
    Knob("batch_size", int, 16, "rows of the decode step (the engine's slots)", minimum=1),
    Knob("context_tokens", int, 330, "K/V positions each row attends over in the profiled step", minimum=2),
    Knob("kv_dtype", str, "auto", "KV cache: auto (the model dtype) or fp8 (e4m3 + per-position scales; CUDA >= 8.9)",
         choices=("auto", "fp8")),
    dtype_knob(),
    *sampling_knobs(top_p=1.0, top_p_help="nucleus threshold (1.0: the plain race; < 1: top-p by rejection)"),
    Knob("profile_steps", int, 5, "steps (graph replays) run under the profiler", minimum=1),
    Knob("constraint", str, "off", "on: the constrained step, the rows under conformer programs of drug-sized NCI "
         "molecules (half in a copy, half in a hole); off: unconstrained", choices=("off", "on")),
    *FORCED_RUN_KNOBS,
    TOKENIZER_KNOB,
    *common_knobs(min_repeats=20, min_duration_s=0.3, warmup=5, repeats_help="timed batches of 10 steps"),
)


def validate(cell: Cell) -> None:
    c = cell.config
    if not 0.0 < c["top_p"] <= 1.0:
        raise ConfigError(f"top_p={c['top_p']} must be in (0, 1]; use 1.0 to disable it")
    if c["forced_run_tokens"] and c["constraint"] == "off":
        raise ConfigError(f"forced_run_tokens={c['forced_run_tokens']} packs the forced runs of constrained steps, "
                          "and constraint=off profiles the unconstrained one; add --set constraint=on, or set "
                          "forced_run_tokens=0")
    assert cell.model is not None
    model_refs.check_text_model(cell.model, c["tokenizer"], "decode-profile")
    positions = model_refs.model_config(cell.model).get("max_position_embeddings")
    if positions and c["context_tokens"] > positions:
        raise ConfigError(f"context_tokens={c['context_tokens']} is beyond the model's {positions} positions; "
                          f"e.g. --set context_tokens={positions}")


def estimate_s(cell: Cell, accelerator: bool) -> float:
    """Process start and the engine's start-up (~20 s on a GPU, the GEMM plan cached after a model's first
    cell), the prefill, the device's ceilings once per run, then a few seconds of steps and profiles; with the
    constraint ~10 s more (the tokenizer, RDKit and the molecules, their programs, the constraint runtime)."""
    return (35.0 if accelerator else 15.0) + (10.0 if cell.config["constraint"] == "on" else 0.0)


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    import torch

    from inferlab.bench.bandwidth import device_bandwidth_gb_per_s
    from inferlab.bench.device_limits import device_limits
    from inferlab.bench.devices import peak_memory, reset_peak_memory, resolve_device
    from inferlab.bench.timing import device_synchronizer, measure, timed
    from inferlab.engine import DecodeStepProbe, Engine, EngineConfig, SamplingParams

    c = cell.config
    assert ctx.model_path is not None
    device = resolve_device(c["device"])
    on_cuda = device.type == "cuda"
    dtype = getattr(torch, c["dtype"])
    sync = device_synchronizer(device)
    reset_peak_memory(device)
    b, context = c["batch_size"], c["context_tokens"]
    constrained = c["constraint"] == "on"
    with timed(sync) as setup:
        programs = _conformer_programs(ctx.model_path) if constrained else []
    with timed(sync) as load:
        engine = Engine(EngineConfig(
            model=str(ctx.model_path), device=str(device), dtype=c["dtype"], max_slots=b,
            # the constraint runtime holds programs of up to max_seq_len ops
            max_seq_len=max([context + 8] + [p.length for p in programs]), kv_dtype=c["kv_dtype"], decode_text=False,
            load_tokenizer=constrained, seed=c["seed"], forced_run_tokens=c["forced_run_tokens"],
            forced_run_budget=c["forced_run_budget"],
        ))  # fmt: skip
    sampling = SamplingParams(temperature=c["temperature"], top_p=c["top_p"], max_new_tokens=8, ignore_eos=True)
    with engine, DecodeStepProbe(engine, rows=b, context=context, sampling=sampling, seed=c["seed"],
                                 constraints=programs) as probe:

        def labelled_step() -> None:
            with step_range(on_cuda):
                probe.eager_step()

        m = measure(lambda: [probe.step() for _ in range(STEPS_PER_SAMPLE)], warmup=c["warmup"],
                    min_repeats=c["min_repeats"], min_duration_s=c["min_duration_s"], sync=sync)
        ctx.save_partial({"step_us": m.stats.median / STEPS_PER_SAMPLE * 1e6}, "the kernel profile")
        replay_events = profile_events(lambda: [probe.step() for _ in range(c["profile_steps"])], on_cuda)
        with probe.labelled(partial(family_range, synchronise=on_cuda)):
            eager_events = profile_events(lambda: [labelled_step() for _ in range(EAGER_STEPS)], on_cuda)
        shape = StepShape(
            rows=b, context=context, layers=engine.spec.num_layers, hidden=engine.spec.hidden_size,
            heads=engine.spec.num_heads, kv_heads=engine.spec.num_kv_heads, head_dim=engine.spec.head_dim,
            intermediate=engine.spec.intermediate_size, vocab=engine.spec.vocab_size,
            dtype_bytes=dtype.itemsize, kv_bytes_per_token=engine.kv_bytes_per_token, logits_bytes=dtype.itemsize,
            stop_ids=probe.stop_ids_width,
        )  # fmt: skip
        graphs, filter_level, packed_positions = probe.cuda_graphs, probe.filter_level, probe.packed_positions
        booked = probe.booked_per_step() if packed_positions is not None else 0
    memory = peak_memory(device)  # before the ceilings allocate their buffers
    # the ceilings once the engine is closed (its memory free), and after its graphs: a profiler session before
    # any graph capture can leave CUPTI unable to see later kernels (cached for the run's other cells)
    limits = device_limits(device, dtype, ctx.cache_dir)
    ceilings = Ceilings(device_bandwidth_gb_per_s(device, ctx.cache_dir) or 0.0, limits["matmul_tflops"],
                        limits["kernel_floor_us"], limits["graph_gap_us"],
                        tuple(tuple(p) for p in limits["copy_curve"]), limits.get("sm_count"))  # fmt: skip
    eager, attribution = labelled_kernels(eager_events, on_cuda)
    replayed = graph_kernels(replay_events) if graphs else []
    kernels, steps, source = _profile(eager, replayed, c["profile_steps"], on_cuda)
    step_us = m.stats.median / STEPS_PER_SAMPLE * 1e6
    measured = per_step(kernels, steps)
    norm = measured.get("norm")
    families = family_rows(measured, minimum_work(shape, norm.launches if norm else 0.0), step_us, ceilings,
                           gemm_tiles(shape))
    _write_step(ctx, cell, kernels, steps, replayed if not source.startswith("graph replays") else [])
    return {
        **step_summary(shape, step_us, ceilings),
        "kernel_us": sum(r["us"] for r in families[:-1]),
        "gaps_us": families[-1]["us"],
        "launches": families[-1]["launches"],
        "families": families,
        "below_bound": [r["family"] for r in families if not r["meets"]],
        "profile_source": source,
        "attribution": attribution,
        "top_kernels": top_kernels(kernels, steps),
        "ceilings": dataclasses.asdict(ceilings),
        "shape": dataclasses.asdict(shape),
        "kv_cache_dtype": engine.stats.kv_dtype,
        "filter_level": filter_level,
        "constraint_programs": len(programs),  # the rows take them in turn (0: unconstrained)
        "constraint_setup_s": setup.seconds,  # the tokenizer, the molecules and their programs
        "packed_positions": packed_positions,  # T of the packed step (forced runs), None for one token per row
        "booked_per_step": booked,  # forced tokens a step books into the frozen rows
        "cuda_graphs": graphs,
        "spread": m.stats.spread,
        "load_s": load.seconds,
        "device": str(device),
        **memory,
    }


def _conformer_programs(model_path: Any) -> list[Any]:
    """MOLECULES molecules' conformer programs, compiled with the model's tokenizer as the constrained backend
    compiles them, each followed by its template from the first hole on (a row at its start is in a hole)."""
    from inferlab.bench.scenarios.molecules import load_molecules, nci_molecules_path
    from inferlab.constraints.program import compile_program
    from inferlab.constraints.segments import Hole
    from inferlab.models.tokenizer_loading import load_hf_tokenizer
    from inferlab.workloads.conformers.chemistry.profiles import get_profile

    tokenizer = load_hf_tokenizer(model_path)
    # the rows never run their programs to the end: no context to fit them in (the probe's prompt is its own)
    molecules = load_molecules(nci_molecules_path(), MOLECULES, get_profile(PROFILE), tokenizer, 1 << 30, DRUG_SIZED)
    programs = []
    for m in molecules.molecules:
        segments = m.template.segments
        first_hole = next(i for i, segment in enumerate(segments) if isinstance(segment, Hole))
        programs += [compile_program(segments, tokenizer), compile_program(segments[first_hole:], tokenizer)]
    return programs


def _profile(eager: list, replayed: list, replays: int, on_cuda: bool) -> tuple[list, int, str]:
    """(kernels, steps they cover, where they come from): the replays labelled by the eager step's launches,
    else the eager steps themselves (on CPU: their aten ops)."""
    if not on_cuda:
        return eager, EAGER_STEPS, "cpu ops of eager steps"
    if not replayed:
        return eager, EAGER_STEPS, "eager steps (no graph replays, or the profiler showed none of their kernels)"
    step = one_step(eager, EAGER_STEPS)
    if step is None:
        return eager, EAGER_STEPS, "eager steps (the eager steps' launches differ from each other)"
    carried = carry_labels(step, replayed)
    if carried is None:
        return eager, EAGER_STEPS, "eager steps (the replays' kernels differ from the eager step's)"
    kernels, matched = carried
    same = "" if matched == len(kernels) else f", {matched} of {len(kernels)} kernels named as in the eager step"
    return kernels, replays, "graph replays" + same


def _write_step(ctx: CellContext, cell: Cell, kernels: list, steps: int, unmatched: list) -> None:
    """One step's kernels in order (device time averaged over the profiled steps) with their families, for a
    look beyond the row: RUN_DIR/profiles/<cell key>.json (when the steps' launches repeat; else all of them);
    with the replayed kernels' names when they could not take the eager step's labels (`unmatched`)."""
    step = one_step(kernels, steps) or kernels
    n = len(step)
    repeats = len(kernels) // n if n and len(kernels) % n == 0 else 1
    order = [{"kernel": k.name[:160], "family": k.family,
              "us": statistics.fmean(kernels[i + r * n].us for r in range(repeats))} for i, k in enumerate(step)]
    folder = ctx.run_dir / "profiles"
    folder.mkdir(parents=True, exist_ok=True)
    data = {"model": cell.model, "config": cell.config, "step": order,
            "replayed_unmatched": [[k.name[:160], k.us] for k in unmatched]}  # fmt: skip
    (folder / f"{cell.key}.json").write_text(json.dumps(data))


SCENARIO = Scenario(
    "decode-profile", "one decode step of the engine against its bound: per kernel family, time, share, % of the bound",
    KNOBS, run, validate, estimate_s, headline_metric="step_bandwidth_fraction", default_timeout_s=300.0,
    workload_knobs=("batch_size", "context_tokens", "temperature", "top_p", "constraint"),
)
