"""How many decode steps a multi-token step could save on the conformer job: the forced runs' lengths.

    python benchmarks/checks/2026-12-04-forced-runs/forced_runs.py [--molecules 400] [--tokenizer DIR]

Issue 29's third point: a step may take each row's forced run (the copy tokens the constraint program already
knows) after its sampled token as extra query positions. This walks the real token sequences of the job's
conformers (ETKDG conformers of the preset's molecules, drug-sized NCI 20-50 heavy atoms, stereo assigned,
encoded in v3-fixed4, tokenized by qwen3-chem) through each molecule's compiled program: a token is *sampled*
where the model chooses it (a hole's tokens and its exit token, which the model emits to leave the hole),
*forced* where a COPY op emits it with no draw. It prints the forced share of the output tokens, the runs'
length distribution, and for an extra-position cap F per row per step the steps a multi-token step saves
(each forced run of L tokens rides in ceil(L / F) steps beside sampled tokens: min(L, F) per step) and the
resulting upper bound on the speed-up at a step cost that does not grow with the extra positions.
One JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def molecules(count: int) -> list[str]:
    """The conformer-pipeline preset's selection: NCI molecules of 20-50 heavy atoms, stereo assigned."""
    import tempfile

    sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
    from lab_sweep import drug_sized_molecules

    path = drug_sized_molecules(Path(tempfile.mkdtemp()) / "molecules.smi", count, 20, 50)
    return [line.split()[0] for line in path.read_text().splitlines()]


def walk(ops, tokens: list[int]) -> list[bool]:
    """Per output token: forced (True) or sampled (False), by the program's ops (COPY = 1, HOLE = 2)."""
    from inferlab.constraints.program import COPY, HOLE

    kinds, values = ops[0].tolist(), ops[1].tolist()
    forced, op = [], 0
    for token in tokens:
        if kinds[op] == HOLE:
            exit_token = values[op + 1] if op + 1 < len(kinds) and kinds[op + 1] == COPY else None
            forced.append(False)  # a hole's tokens and its exit are the model's
            if token == exit_token:  # it leaves the hole: the exit consumes the copy op after it
                op += 2
            continue
        assert kinds[op] == COPY and values[op] == token, (op, token, values[op])
        forced.append(True)
        op += 1
    return forced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", type=int, default=400)
    parser.add_argument("--tokenizer", default=os.environ.get("INFERLAB_QWEN3_CHEM_TOKENIZER",
                                                              str(ROOT.parent / "shared" / "tokenizers" / "qwen3-chem")))
    args = parser.parse_args()
    from rdkit import Chem

    from inferlab.errors import InputError
    from inferlab.workloads.conformers.chemistry.etkdg import embed_etkdg

    from inferlab.constraints.program import compile_program
    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.models.tokenizer_loading import load_tokenizer
    from inferlab.workloads.conformers.chemistry.encode import encode_conformer
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.template import build_template

    profile = get_profile("v3-fixed4")
    tokenizer = load_tokenizer(args.tokenizer)
    grammars = grammar_set_for(tokenizer)
    runs: Counter[int] = Counter()
    total = forced_total = used = 0
    for smiles in molecules(args.molecules):
        template = build_template(smiles, profile)
        program = compile_program(template.segments, tokenizer, grammars)
        try:  # the project's reference embedding (ETKDGv3)
            mol = embed_etkdg(Chem.MolFromSmiles(smiles), 1, seed=7, threads=1)
        except InputError:
            continue
        text = encode_conformer(mol, profile).generation_text(profile)
        tokens = tokenizer(text, add_special_tokens=False)["input_ids"] + [program.eos_token_id]
        flags = walk(program.ops, tokens)
        used += 1
        total += len(flags)
        forced_total += sum(flags)
        length = 0
        for flag in flags + [False]:
            if flag:
                length += 1
            elif length:
                runs[length] += 1
                length = 0
    sampled = total - forced_total
    print(f"{used} molecules, {total} output tokens: {forced_total} forced ({forced_total / total:.1%}), "
          f"{sampled} sampled; {sum(runs.values())} forced runs, mean length "
          f"{forced_total / max(1, sum(runs.values())):.2f}")
    print("run length: count (tokens)  " + ", ".join(f"{n}: {c} ({n * c})" for n, c in sorted(runs.items())))
    caps = {}
    for cap in (1, 2, 4, 8, 16):
        # a run of L rides in ceil(L / cap) steps that also carry a sampled token; the steps left: sampled ones
        # plus those the run needs beyond the sampled tokens it can ride with (one before each run)
        extra_steps = sum(c * max(0, -(-n // cap) - 1) for n, c in runs.items())
        steps = sampled + extra_steps
        caps[cap] = {"steps": steps, "speedup_bound": round(total / steps, 4)}
        print(f"extra positions per row <= {cap}: {steps} steps for {total} tokens: <= {total / steps:.3f}x")
    print(json.dumps({"molecules": used, "tokens": total, "forced": forced_total,
                      "runs": dict(sorted(runs.items())), "caps": caps}))


if __name__ == "__main__":
    main()
