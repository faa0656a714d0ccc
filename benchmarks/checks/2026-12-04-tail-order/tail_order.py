"""How much of the conformer job's decode steps the drain at its end costs, and what admitting the longest
requests first would save: a simulation of the engine's continuous batching (CPU, no model).

    python benchmarks/checks/2026-12-04-tail-order/tail_order.py [--molecules 400] [--k 16] [--slots 989]

Requests: the conformer-pipeline preset's molecules x K, each as long as its ETKDG conformer's v3-fixed4 text
in qwen3-chem tokens (plus EOS), +-10% per conformer (seeded). The loop follows the engine's scheduler
(engine/scheduler.py, loop.py): sync points every `--steps` decode steps; at each, finished rows free and the
FIFO queue refills them once >= slots // 16 are free (min_admission) or nothing else can run; a row that
finishes mid-chunk idles to the chunk's end. Orders compared: the input's (the pipeline's, molecule by
molecule); longest first over the whole job (what the lab's engine-alone cells do: scenario constrained's
sort_by_length); longest first within windows of W requests; and the input's order with only the job's last W
requests longest first (what a streaming pipeline can do: it knows the job's size from its first pass).
Prints steps, live-row occupancy and the speed-up over the input's order; one JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def lengths_of_molecules(count: int, tokenizer_dir: str) -> list[int]:
    from rdkit import Chem

    from inferlab.errors import InputError
    from inferlab.models.tokenizer_loading import load_tokenizer
    from inferlab.workloads.conformers.chemistry.encode import encode_conformer
    from inferlab.workloads.conformers.chemistry.etkdg import embed_etkdg
    from inferlab.workloads.conformers.chemistry.profiles import get_profile

    sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
    from lab_sweep import drug_sized_molecules

    path = drug_sized_molecules(Path(tempfile.mkdtemp()) / "molecules.smi", count, 20, 50)
    profile, tokenizer = get_profile("v3-fixed4"), load_tokenizer(tokenizer_dir)
    out = []
    for line in path.read_text().splitlines():
        try:
            mol = embed_etkdg(Chem.MolFromSmiles(line.split()[0]), 1, seed=7, threads=1)
        except InputError:
            continue
        text = encode_conformer(mol, profile).generation_text(profile)
        out.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]) + 1)
    return out


def simulate(lengths: list[int], slots: int, steps_per_sync: int) -> tuple[int, int]:
    """(decode steps, live row-steps) of the engine's loop over requests of `lengths` tokens, in this order."""
    min_admission = max(1, slots // 16)
    queue = list(reversed(lengths))  # pop() takes the next request
    rows: list[int] = []  # tokens left per live row (the first comes from the prefill)
    steps = live_steps = 0
    while queue or rows:
        free = slots - len(rows)
        if queue and (free >= min_admission or not rows):
            while queue and len(rows) < slots:
                rows.append(queue.pop() - 1)
        chunk = min(steps_per_sync, max(rows)) if rows else 0
        steps += chunk
        live_steps += chunk * len(rows)
        rows = [left - chunk for left in rows if left > chunk]
    return steps, live_steps


def windowed(lengths: list[int], window: int) -> list[int]:
    out = []
    for start in range(0, len(lengths), window):
        out += sorted(lengths[start : start + window], reverse=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", type=int, default=400)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--slots", type=int, default=989)
    parser.add_argument("--steps", type=int, default=16, help="decode steps per sync point")
    parser.add_argument("--tokenizer", default=str(ROOT.parent / "shared" / "tokenizers" / "qwen3-chem"))
    args = parser.parse_args()
    per_molecule = lengths_of_molecules(args.molecules, args.tokenizer)
    rng = random.Random(0)
    requests = [max(2, round(n * rng.uniform(0.9, 1.1))) for n in per_molecule for _ in range(args.k)]
    tokens = sum(requests)
    orders = {"input order": requests, "longest first (whole job)": sorted(requests, reverse=True)}
    for window in (args.slots, 4 * args.slots):
        orders[f"longest first in windows of {window}"] = windowed(requests, window)
    for last in (args.slots, 2 * args.slots, 4 * args.slots):
        orders[f"input order, the last {last} longest first"] = requests[:-last] + sorted(requests[-last:], reverse=True)
    figures = {}
    base = None
    for name, order in orders.items():
        steps, live = simulate(order, args.slots, args.steps)
        base = base or steps
        figures[name] = {"steps": steps, "occupancy": round(live / (steps * args.slots), 4),
                         "speedup": round(base / steps, 4)}
        print(f"{name}: {steps} steps for {tokens} tokens, rows {live / (steps * args.slots):.1%} live, "
              f"{base / steps:.3f}x the input order's steps")
    floor = -(-tokens // args.slots)
    print(f"floor (every row live every step): {floor} steps; {len(requests)} requests of mean {tokens / len(requests):.0f}")
    print(json.dumps({"requests": len(requests), "tokens": tokens, "slots": args.slots, "floor_steps": floor,
                      "orders": figures}))


if __name__ == "__main__":
    main()
