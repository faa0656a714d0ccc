#!/usr/bin/env python
"""`inferlab tune --workload conformers` on a GPU, run as a user runs it: qwen3-0.6b (random weights, the
qwen3-chem tokenizer), drug-sized NCI molecules (20-50 heavy atoms, stereo assigned where the file leaves
it open: the conformer-pipeline preset's selection), K conformers each. Every candidate starts warm and is
timed in 3 passes; the grid doubles max_slots up to the memory plan's largest at the sample's row length,
for the model dtype and for fp8 (the GPU's KV dtypes). The sample's requests (molecules x K) must reach
the memory plan's largest max_slots for the grid to end there: the defaults (90 x 8 = 720) do on an H100
(qwen3-0.6b at these molecules' 1,664 tokens, 0.9 of ~79 GiB: 363 rows bf16, 667 fp8; an H200 fits 650
and 1,195: pass --molecules 160 there).

Resumable: the checkpoint, the sample and the measured candidates live in --work (runs/tune in the
checkout: kept between calls on a warm machine), and --budget-s stops before a candidate that would pass
it (exit 3); run the same command again until it prints the recommendation and writes the file.

GPU:  python scripts/gpu/tune_check.py --out $OUT --budget-s $BUDGET_S     # ~15 min on an H100: two calls
CPU:  python scripts/gpu/tune_check.py --out /tmp/tc --device cpu --quick  # a tiny model, 2 molecules x 2
Writes under --out: tuned-conformers.json (once every candidate is measured) and tune.log.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))


def checkpoint(work: Path, quick: bool) -> Path:
    from inferlab.models.checkpoint_init import init_checkpoint
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    preset, dtype = ("tiny", "float32") if quick else ("qwen3-0.6b", "bfloat16")
    path = work / f"{preset}-{dtype}"
    if not (path / "config.json").exists():  # quick: our small built-in tokenizer (a 151k vocabulary is slow on CPU)
        init_checkpoint(preset, path, seed=0, dtype=dtype, tokenizer_dir=None if quick else qwen3_chem_tokenizer_dir())
    return path


def drug_sized_molecules(path: Path, count: int, min_atoms: int, max_atoms: int) -> Path:
    """The first `count` NCI first_5K molecules with min-max heavy atoms, stereo assigned where open."""
    from rdkit import Chem, rdBase

    from inferlab.bench.scenarios.molecules import nci_molecules_path, with_assigned_stereo

    if path.is_file() and len(path.read_text().splitlines()) == count:
        return path
    lines = []
    blocker = rdBase.BlockLogs()
    with nci_molecules_path().open() as f:
        for i, line in enumerate(f):
            mol = Chem.MolFromSmiles(line.split()[0]) if line.strip() else None
            if mol is not None and min_atoms <= mol.GetNumHeavyAtoms() <= max_atoms:
                lines.append(f"{with_assigned_stereo(mol)} nci{i}\n")
                if len(lines) == count:
                    break
    del blocker
    path.write_text("".join(lines))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=str(REPO / "runs" / "tune"), help="checkpoint, sample, measured candidates")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="tiny, 2 small molecules x 2 (CPU proof of the script)")
    ap.add_argument("--molecules", type=int, default=90)
    ap.add_argument("--num-conformers", type=int, default=8)
    ap.add_argument("--min-seconds", type=float, default=2.0)
    ap.add_argument("--budget-s", type=float, default=540.0, help="this call's seconds (the tune gets what is left)")
    args = ap.parse_args()
    started = time.monotonic()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    model = checkpoint(work, args.quick)
    count, atoms, k = (2, (6, 9), 2) if args.quick else (args.molecules, (20, 50), args.num_conformers)
    sample = drug_sized_molecules(work / f"molecules-{count}.smi", count, *atoms)
    budget = max(1.0, args.budget_s - (time.monotonic() - started))
    command = [sys.executable, "-u", "-m", "inferlab.cli", "tune", "--model", str(model), "--workload", "conformers",
               "--sample", str(sample), "--sample-rows", str(count), "--num-conformers", str(k),
               "--min-seconds", str(0.0 if args.quick else args.min_seconds), "--device", args.device,
               "--work-dir", str(work / f"measured-{model.name}-{count}x{k}"), "--budget-s", f"{budget:.0f}",
               "--out", str(out / "tuned-conformers.json")]
    print("$", " ".join(command), flush=True)
    with (out / "tune.log").open("w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in process.stdout:  # type: ignore[union-attr]
            sys.stdout.write(line)
            log.write(line)
        code = process.wait()
    print(f"inferlab tune exited {code}" + (" (not finished: run this command again)" if code == 3 else ""))
    return code


if __name__ == "__main__":
    sys.exit(main())
