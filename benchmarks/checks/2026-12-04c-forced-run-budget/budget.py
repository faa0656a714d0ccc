"""Decode steps of the conformer job against forced tokens in bulk and the step's budget of booked positions.

    python benchmarks/checks/2026-12-04c-forced-run-budget/budget.py [--molecules 64] [--k 4] [--rows 64]
        [--settings 0:4,4:4,...]

The engine on the CPU with the reference model (real coordinates, so real hole lengths; qwen3-chem's
tokenization), the conformer-pipeline preset's molecules (NCI, 20-50 heavy atoms, stereo assigned), K
conformers each, T = 1, one Engine.generate call over `rows` rows refilled continuously. For each
(forced_run_tokens F, budget E = max(F, rows / d)) it counts the decode steps (in whole chunks of 16) and the live row-steps (rows x steps while live), and
checks that every run gives the same tokens as one token per step. Step counts do not depend on the
machine's speed (this CPU's timings are not the device's and are not reported). One JSON line per setting.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--settings", default="0:4,2:4,4:2,4:4,4:8,4:16,7:4",
                        help="F:d pairs, the budget E = max(F, rows / d); the first is the reference")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks" / "checks" / "2026-12-04-forced-runs"))
    from forced_runs import molecules

    import torch

    from inferlab.constraints.program import compile_program
    from inferlab.engine import Engine, EngineConfig, forced_runs
    from inferlab.types import Request, SamplingParams
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.template import build_template
    from inferlab.workloads.conformers.reference_model import reference_model_dir

    torch.set_num_threads(1)
    smiles = molecules(args.molecules)
    settings = [tuple(int(x) for x in pair.split(":")) for pair in args.settings.split(",")]  # (F, d)
    reference = None
    for width, share in settings:
        forced_runs.extra_positions = lambda rows, w, share=share: min(rows * w, max(w, -(-rows // share)))
        config = EngineConfig(model=str(reference_model_dir()), max_slots=args.rows, max_seq_len=2048,
                              forced_run_tokens=width, decode_steps_per_sync=16)
        with Engine(config) as engine:
            requests = []
            for i, s in enumerate(smiles):
                template = build_template(s, get_profile("v3-fixed4"))
                program = compile_program(template.segments, engine.tokenizer)
                prompt = tuple(template.prompt_ids(engine.tokenizer))
                requests += [Request(id=f"{i}#{k}", prompt_ids=prompt, constraint=program,
                                     sampling=SamplingParams(temperature=1.0, seed=k)) for k in range(args.k)]
            results = engine.generate(requests)
            stats = engine.stats
        tokens = [r.token_ids for r in results]
        if reference is None:
            reference = (tokens, stats.decode_steps, stats.live_row_steps)
        print(json.dumps({"forced_run_tokens": width, "budget": f"max(F, rows/{share})" if width else None,
                          "rows": args.rows, "requests": len(requests), "tokens": sum(map(len, tokens)),
                          "decode_steps": stats.decode_steps, "live_row_steps": stats.live_row_steps,
                          "fewer_steps": round(reference[1] / stats.decode_steps, 4),
                          "fewer_row_steps": round(reference[2] / stats.live_row_steps, 4),
                          "same_tokens": tokens == reference[0],
                          "valid": sum(r.finish_reason == "eos" for r in results)}), flush=True)


if __name__ == "__main__":
    main()
