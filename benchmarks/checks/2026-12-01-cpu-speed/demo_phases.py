"""The shipped demo's start-up by phase (summary.md here), wall and CPU seconds of each:

    PYTHONPATH=src python benchmarks/checks/2026-12-01-cpu-speed/demo_phases.py WORK_DIR

WORK_DIR: an earlier `inferlab demo --work-dir WORK_DIR`'s folder (its checkpoint and molecules reused).
The steps of `inferlab demo` (cli/demo_cmd.py, pipeline/demo.py) one by one, the pipeline's own phases
through its on_phase callback.
"""

import sys
import time

marks = [("start", time.perf_counter(), time.process_time())]


def mark(what: str) -> None:
    marks.append((what, time.perf_counter(), time.process_time()))


from pathlib import Path  # noqa: E402

import inferlab.cli  # noqa: E402, F401

mark("import inferlab.cli")
from inferlab.engine import EngineConfig  # noqa: E402
from inferlab.workloads.conformers.pipeline.config import PipelineConfig  # noqa: E402
from inferlab.workloads.conformers.pipeline.demo import demo_checkpoint, demo_molecules  # noqa: E402
from inferlab.workloads.conformers.pipeline.generate import generate_conformers  # noqa: E402

work = Path(sys.argv[1])
checkpoint = demo_checkpoint(work)[0]
mark("the demo's checkpoint (reused)")
demo_molecules(8, 4, 10)
mark("the molecules (RDKit, NCI)")
out = work / "phases.sdf"
for old in (out, out.with_suffix(".jsonl"), out.with_name(out.name + ".manifest.json")):
    old.unlink(missing_ok=True)
summary = generate_conformers(EngineConfig(model=checkpoint, device="cpu", max_slots=16), work / "molecules.smi", out,
                              PipelineConfig(num_conformers=2), on_phase=mark)  # fmt: skip
mark("end")
for (_, t0, c0), (what, t1, c1) in zip(marks, marks[1:]):
    print(f"until {what!r:36s} {t1 - t0:6.2f} s wall, {c1 - c0:5.2f} s CPU")
print(f"generation {summary.generate_s:.1f} s: {summary.output_tokens} tokens")
