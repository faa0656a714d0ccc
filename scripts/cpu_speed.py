"""The engine's CPU speed, three ways (benchmarks/README.md, "CPU speed"):

    python scripts/cpu_speed.py decode --model DIR        # 16 rows, unconstrained: tokens/s, wall and per CPU-second
    python scripts/cpu_speed.py step --model DIR          # one eager decode step: CPU ms per kernel family
    python scripts/cpu_speed.py demo-job --model DIR      # the first demo's job (8 NCI molecules x 2): phases, tokens/s

Each prints its figures and one JSON line. On a shared machine wall time follows the other processes'
load (printed beside), so each figure also comes per CPU-second of this process (its threads' time).
Only public names are used (the Engine, DecodeStepProbe, the conformer pipeline), so the script measures
any checkout put first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path


def _decode(args) -> dict:
    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Request, SamplingParams

    t = time.perf_counter()
    engine = Engine(EngineConfig(model=args.model, device="cpu", max_slots=args.rows, max_seq_len=args.max_seq_len,
                                 dtype=args.dtype))  # fmt: skip
    startup_s = time.perf_counter() - t
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.new, min_new_tokens=args.new)
    prompt = tuple(range(5, 5 + args.prompt))
    requests = [Request(id=str(i), prompt_ids=prompt, sampling=sampling) for i in range(args.rows)]
    engine.generate(requests[:2])  # first calls allocate
    wall, cpu = time.perf_counter(), time.process_time()
    results = engine.generate(requests)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tokens = sum(len(r.token_ids) for r in results)
    engine.close()
    return dict(tokens=tokens, wall_s=wall, cpu_s=cpu, tokens_per_s=tokens / wall, tokens_per_cpu_s=tokens / cpu,
                engine_start_s=startup_s)


def _step(args) -> dict:
    from inferlab.engine import DecodeStepProbe, Engine, EngineConfig
    from inferlab.types import SamplingParams

    spent: dict[str, float] = defaultdict(float)
    depth = [0]

    @contextmanager
    def timed(family: str):
        depth[0] += 1
        t = time.thread_time()
        try:
            yield
        finally:
            depth[0] -= 1
            if depth[0] == 0:  # families nest (the MLP's activation inside its GEMM range): outermost only
                spent[family] += time.thread_time() - t

    config = EngineConfig(model=args.model, device="cpu", max_slots=args.rows, max_seq_len=args.max_seq_len,
                          dtype=args.dtype)  # fmt: skip
    sampling = SamplingParams(temperature=1.0)
    with Engine(config) as engine, DecodeStepProbe(engine, args.rows, args.context, sampling) as probe:
        for _ in range(3):
            probe.eager_step()
        t = time.thread_time()
        for _ in range(args.steps):
            probe.eager_step()
        step_s = (time.thread_time() - t) / args.steps
        with probe.labelled(timed):
            for _ in range(args.steps):
                probe.eager_step()
    families = {k: v / args.steps * 1e3 for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}
    return dict(step_cpu_ms=step_s * 1e3, tokens_per_cpu_s=args.rows / step_s, context=args.context,
                family_cpu_ms=families)


def _demo_job(args) -> dict:
    from inferlab.engine import EngineConfig
    from inferlab.workloads.conformers.pipeline.config import PipelineConfig
    from inferlab.workloads.conformers.demo.molecules import nci_molecules
    from inferlab.workloads.conformers.pipeline.generate import generate_conformers

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="cpu-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    cpu = time.process_time()
    molecules = nci_molecules(8, 4, 10)
    inp, out = work / "molecules.smi", work / "conformers.sdf"
    inp.write_text("".join(f"{m.smiles} {m.id}\n" for m in molecules))
    for old in (out, out.with_suffix(".jsonl"), out.with_name(out.name + ".manifest.json")):
        old.unlink(missing_ok=True)
    phases: list[tuple[str, float]] = []  # (what the pipeline started doing, when)
    s = generate_conformers(EngineConfig(model=args.model, device="cpu", max_slots=16), inp, out,
                            PipelineConfig(num_conformers=2), on_phase=lambda what: phases.append((what, time.perf_counter())))  # fmt: skip
    ends = [t for _, t in phases[1:]] + [time.perf_counter()]
    e = s.engine
    return dict(wall_s=s.wall_s, cpu_s=time.process_time() - cpu,
                phase_s={what: end - t for (what, t), end in zip(phases, ends)}, before_engine_s=s.before_engine_s,
                engine_start_s=s.engine_start_s, generate_s=s.generate_s, consumer_s=s.consumer_s,
                teardown_s=s.teardown_s, tokens=s.output_tokens, tokens_per_s=s.output_tokens / s.generate_s,
                conformers=s.conformers_generated, rejected=s.conformers_rejected, decode_steps=e["decode_steps"],
                decode_s=e["decode_s"], prefill_s=e["prefill_s"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    for name, help_ in (("decode", "unconstrained generation"), ("step", "one decode step by kernel family"),
                        ("demo-job", "the first demo's constrained job")):  # fmt: skip
        q = sub.add_parser(name, help=help_)
        q.add_argument("--model", required=True)
        q.add_argument("--rows", type=int, default=16)
        q.add_argument("--max-seq-len", type=int, default=2048)
        q.add_argument("--dtype", default="auto")
    sub.choices["decode"].add_argument("--new", type=int, default=300, help="new tokens per row")
    sub.choices["decode"].add_argument("--prompt", type=int, default=20, help="prompt tokens per row")
    sub.choices["step"].add_argument("--context", type=int, default=150, help="positions each row attends to")
    sub.choices["step"].add_argument("--steps", type=int, default=20)
    sub.choices["demo-job"].add_argument("--work-dir", default=None)
    args = p.parse_args()
    load = os.getloadavg()[0]
    figures = {"decode": _decode, "step": _step, "demo-job": _demo_job}[args.what](args)
    figures.update(what=args.what, model=args.model, rows=args.rows, load_avg_1min_before=load,
                   load_avg_1min_after=os.getloadavg()[0], cores=os.cpu_count())
    for key, value in figures.items():
        print(f"{key:22s} {value:.3f}" if isinstance(value, float) else f"{key:22s} {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
