"""Would retrying a wrong-handed conformer from its deciding atom, not from its start, give the input's stereo?

    python benchmarks/checks/2026-12-04-prefix-stereo-retries/prefix_retries.py [--molecules 24 --k 8]

The reference model writes each tetrahedral centre's hand at chance (docs/decisions.md). A centre's hand is
settled by its deciding atom: the last written (canonical SMILES order) of the centre and its neighbours;
a double bond's by the last written of its two atoms and their neighbours. A wrong element can therefore be
redrawn from the model itself by cutting the conformer at the start of that atom's coordinate block and
continuing from there (prompt = the prompt and the tokens before the block, constraint = the program's
segments from that block on): a draw from the model's own distribution given everything before the block,
where a whole retry redraws the whole conformer. This check measures, on held-out molecules of the reference
model's split with stereo (assigned where the SMILES leaves it open, as the quality preset assigns it), K
conformers each through the engine with the conformer constraint (T=1, top-p 1): the share whose stereo is
the input's as generated, after up to --rounds rounds of prefix retries (each round cuts at the first wrong
element's deciding atom), and after whole retries of the same token budget; and the tokens each spent.
CPU, the reference model, ~5 min on 2 cores. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field

from rdkit import Chem

from inferlab.constraints.program import COPY, HOLE, compile_program
from inferlab.engine import Engine, EngineConfig
from inferlab.types import Request, SamplingParams
from inferlab.workloads.conformers.chemistry.profiles import DEFAULT_PROFILE, get_profile
from inferlab.workloads.conformers.chemistry.stereo import specified_stereo, stereo_agreement
from inferlab.workloads.conformers.chemistry.stereo_assignment import with_assigned_stereo
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.reference_model import reference_model_dir


@dataclass
class Attempt:
    """One conformer row: its molecule, its tokens so far, what it cost."""

    index: int  # molecule index
    k: int
    tokens: list[int] = field(default_factory=list)
    spent: int = 0  # output tokens generated for this row, retries included
    rounds: int = 0


def held_out_molecules(count: int, max_heavy: int) -> list[str]:
    """The first `count` held-out SMILES (held_out.smi) of <= max_heavy heavy atoms with a tetrahedral centre
    once stereo is assigned where left open."""
    out = []
    for line in (reference_model_dir() / "held_out.smi").read_text().splitlines():
        mol = Chem.MolFromSmiles(line.split()[0])
        if mol is None or mol.GetNumHeavyAtoms() > max_heavy:
            continue
        smiles = with_assigned_stereo(mol)
        if specified_stereo(Chem.MolFromSmiles(smiles))[0]:
            out.append(smiles)
        if len(out) == count:
            break
    return out


def wrong_elements(mol: Chem.Mol, cut: str = "deciding") -> list[int]:
    """The atoms (sorted) to cut at for each specified element `mol`'s coordinates contradict: `mol` carries
    the input's tags (ConformerTemplate.check) with the conformer's positions, atom k = block k. cut
    "deciding": the element's deciding atom; "centre": the centre itself (a double bond: its first atom)."""
    geometric = Chem.Mol(mol)
    Chem.AssignStereochemistryFrom3D(geometric)
    atoms, bonds = specified_stereo(mol)
    deciding = []
    for i in atoms:
        if geometric.GetAtomWithIdx(i).GetChiralTag() != mol.GetAtomWithIdx(i).GetChiralTag():
            neighbours = [n.GetIdx() for n in mol.GetAtomWithIdx(i).GetNeighbors()]
            deciding.append(max([i] + neighbours) if cut == "deciding" else i)
    for b in bonds:
        bond, other = mol.GetBondWithIdx(b), geometric.GetBondWithIdx(b)
        if _trans(other) != _trans(bond):
            ends = (bond.GetBeginAtom(), bond.GetEndAtom())
            around = [n.GetIdx() for a in ends for n in [a, *a.GetNeighbors()]]
            deciding.append(max(around) if cut == "deciding" else min(a.GetIdx() for a in ends))
    return sorted(deciding)


def _trans(bond: Chem.Bond) -> bool | None:
    stereo = bond.GetStereo()
    if stereo in (Chem.BondStereo.STEREOE, Chem.BondStereo.STEREOTRANS):
        return True
    if stereo in (Chem.BondStereo.STEREOZ, Chem.BondStereo.STEREOCIS):
        return False
    return None


def hole_starts(program, tokens: list[int]) -> list[int]:
    """Token index where each HOLE op of `program` starts in `tokens` (the runtime's reading: a COPY op takes
    one token, a HOLE takes tokens until the next op's copy token, its exit)."""
    kinds, values = program.ops[0].tolist(), program.ops[1].tolist()
    starts, t = [], 0
    for op, (kind, value) in enumerate(zip(kinds, values)):
        if kind == COPY:
            t += 1
            continue
        assert kind == HOLE
        starts.append(t)
        exit_token = values[op + 1]
        while tokens[t] != exit_token:
            t += 1
    return starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", type=int, default=24)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=8, help="prefix retries per row at most")
    parser.add_argument("--max-heavy-atoms", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cut", choices=["deciding", "centre"], default="deciding",
                        help="where a prefix retry starts: the wrong element's deciding atom, or its centre")
    args = parser.parse_args()
    started = time.perf_counter()
    profile = get_profile(DEFAULT_PROFILE)
    engine = Engine(EngineConfig(model=str(reference_model_dir()), device="cpu", max_slots=64, max_seq_len=2048,
                                 seed=args.seed))
    tokenizer = engine.tokenizer
    smiles = held_out_molecules(args.molecules, args.max_heavy_atoms)
    templates = [build_template(s, profile) for s in smiles]
    programs = [compile_program(t.segments, tokenizer) for t in templates]
    prompts = [list(t.prompt_ids(tokenizer)) for t in templates]

    def run(jobs: list[tuple[Attempt, int, int]], tag: str) -> None:
        """jobs: (row, segment to continue from (0: the whole conformer), cut token index)."""
        requests = []
        for n, (row, segment, cut) in enumerate(jobs):
            program = programs[row.index] if segment == 0 else compile_program(
                templates[row.index].segments[segment:], tokenizer)
            requests.append(Request(id=f"{tag}-{row.index}-{row.k}-{row.rounds}-{n}",
                                    prompt_ids=prompts[row.index] + row.tokens[:cut],
                                    sampling=SamplingParams(temperature=1.0, top_p=1.0,
                                                            max_new_tokens=program.max_new_tokens),
                                    constraint=program, metadata=(row, cut)))
        for result in engine.generate(requests):
            row, cut = result.metadata
            assert result.finish_reason == "eos", (result.finish_reason, result.error)
            row.tokens = row.tokens[:cut] + list(result.token_ids)
            row.spent += len(result.token_ids)

    def conformer(row: Attempt) -> Chem.Mol:
        return templates[row.index].check(tokenizer.decode(row.tokens[:-1]), profile).mol  # EOS off

    def verdict(row: Attempt) -> list[int]:
        return wrong_elements(conformer(row), args.cut)

    def is_ok(row: Attempt) -> bool:
        """The pipeline's verdict (chemistry/stereo.py: the stereoisomer, symmetric molecules included)."""
        mol = conformer(row)
        reference = Chem.Mol(mol)
        reference.RemoveAllConformers()
        return bool(stereo_agreement(reference, mol).ok)

    rows = [Attempt(i, k) for i in range(len(smiles)) for k in range(args.k)]
    run([(row, 0, 0) for row in rows], "first")
    first_ok = [is_ok(row) for row in rows]
    first_spent = [row.spent for row in rows]
    # prefix retries: each round cuts every wrong row at its first wrong element's deciding atom
    for round_ in range(args.rounds):
        jobs = []
        for row in rows:
            wrong = verdict(row)
            if wrong:
                atom = wrong[0]
                row.rounds += 1
                cut = hole_starts(programs[row.index], row.tokens)[atom]
                jobs.append((row, 2 * atom + 1, cut))  # segments: Copy, (Hole, Copy) per atom, EndOfSequence
        if not jobs:
            break
        run(jobs, f"prefix{round_}")
        fixed = sum(1 for row, segment, _ in jobs if (segment - 1) // 2 not in verdict(row))
        print(f"prefix round {round_}: {len(jobs)} rows cut, the element cut at right now in {fixed}")
    prefix_ok = [is_ok(row) for row in rows]
    prefix_spent = [row.spent for row in rows]
    # whole retries: every wrong row regenerated from its start, round after round, until the prefix retries'
    # tokens are spent (the last round may pass them)
    budget = sum(prefix_spent)
    whole = [Attempt(i, k) for i in range(len(smiles)) for k in range(args.k)]
    run([(row, 0, 0) for row in whole], "whole")
    for round_ in range(64):
        wrong_rows = [row for row in whole if verdict(row)]
        if not wrong_rows or sum(row.spent for row in whole) >= budget:
            break
        for row in wrong_rows:
            row.rounds += 1
        run([(row, 0, 0) for row in wrong_rows], f"whole{round_}")
    spent = sum(row.spent for row in whole)
    whole_ok = [is_ok(row) for row in whole]
    n = len(rows)
    summary = {
        "molecules": len(smiles), "conformers": n, "rounds": args.rounds, "cut": args.cut,
        "stereo_ok_as_generated": sum(first_ok) / n, "tokens_as_generated": sum(first_spent),
        "stereo_ok_prefix_retries": sum(prefix_ok) / n, "tokens_prefix_retries": sum(prefix_spent),
        "prefix_rounds_used": sum(row.rounds for row in rows),
        "stereo_ok_whole_retries_same_budget": sum(whole_ok) / n, "tokens_whole_retries": spent,
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(f"{'':34} {'stereo as input':>16} {'output tokens':>14}")
    print(f"{'as generated':34} {summary['stereo_ok_as_generated']:>15.1%} {sum(first_spent):>14,}")
    print(f"{'prefix retries (<= %d rounds)' % args.rounds:34} {summary['stereo_ok_prefix_retries']:>15.1%} "
          f"{sum(prefix_spent):>14,}")
    print(f"{'whole retries, same token budget':34} {summary['stereo_ok_whole_retries_same_budget']:>15.1%} "
          f"{spent:>14,}")
    print(json.dumps(summary))
    engine.close()


if __name__ == "__main__":
    main()
