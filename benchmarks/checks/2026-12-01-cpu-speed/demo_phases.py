"""The shipped demo's start-up by phase (this folder's summary.md): python demo_phases.py WORK_DIR (a demo's work dir, its
checkpoint built by an earlier `inferlab demo --work-dir WORK_DIR`), from the repository root with PYTHONPATH=src."""
import time, sys
T0 = time.perf_counter(); C0 = time.process_time()
marks = []
def mark(what): marks.append((what, time.perf_counter(), time.process_time()))
from inferlab.cli import main  # noqa
mark("import inferlab.cli")
from inferlab.workloads.conformers.pipeline.demo import demo_checkpoint, demo_molecules
from pathlib import Path
work = Path(sys.argv[1])
demo_checkpoint(work); mark("demo_checkpoint (reused)")
demo_molecules(8, 4, 10); mark("demo_molecules (RDKit, NCI)")
from inferlab.workloads.conformers.pipeline.config import PipelineConfig
from inferlab.workloads.conformers.pipeline.generate import generate_conformers
ckpt = demo_checkpoint(work)[0]
inp, out = work / "molecules.smi", work / "phases.sdf"
for old in (out, out.with_suffix(".jsonl"), out.with_name(out.name + ".manifest.json")): old.unlink(missing_ok=True)
s = generate_conformers(ckpt, inp, out, PipelineConfig(num_conformers=2), {"device": "cpu", "max_slots": 16},
                        on_phase=lambda what: mark(what))
mark("end")
prev = (T0, C0)
for what, t, c in marks:
    print(f"{what:32s} until +{t - T0:6.2f} s wall  ({t - prev[0]:5.2f} s, CPU {c - prev[1]:5.2f} s)")
    prev = (t, c)
print(f"generation {s.generate_s:.1f} s, {s.output_tokens} tokens, {s.output_tokens / s.generate_s:.0f} tok/s")
