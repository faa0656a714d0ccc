"""Would settling each stereo element as it is written (a staged retry) reach the input's stereo cheaply, and
what does it do to the geometry?

    python benchmarks/checks/2026-12-08-staged-stereo/staged_retries.py [--molecules 16 --k 8 --retries 8]

The reference model writes each tetrahedral centre's hand at chance, and a redraw from the centre is a fair
coin (benchmarks/checks/2026-12-04-prefix-stereo-retries/). Redrawn from a finished conformer, though, every
element after the centre is drawn again too, so a row of several elements converges slowly (60.2% after 8
rounds at 4.3x the tokens). Here a conformer is generated in stages instead: each stage ends at the block of
the next element's deciding atom (the last written of a centre and its neighbours; of a double bond's atoms
and theirs), where that element's verdict is known; a wrong element is redrawn from its centre (a double bond:
its first atom; --cut first: from the first written of its atoms) up to its deciding atom again, before
anything after it exists. Each stage is one request:
prompt = the prompt and the tokens so far, constraint = the program's segments from the next block to the
copy after the deciding atom's block, then EOS (the last stage: to the end). Up to --retries redraws per row.

Beside it, the same molecules generated whole (one request each), as the quality table's rows: the model's own
stereo, and the pipeline's mirror (a conformer whose elements are all wrong written as its mirror image). For
each: the share of conformers of the input's stereo (the pipeline's verdict), output and prefill tokens, and
COV-R / AMR-R at 0.75 and 1.25 A against K ETKDG references (seed 1001; heavy atoms, GetBestRMS; a conformer
of the wrong stereo counts as generated). CPU, the reference model. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rdkit import Chem

from inferlab.constraints.program import COPY, HOLE, compile_program
from inferlab.constraints.segments import EndOfSequence
from inferlab.engine import Engine, EngineConfig
from inferlab.types import Request, SamplingParams
from inferlab.workloads.conformers.chemistry.profiles import DEFAULT_PROFILE, get_profile
from inferlab.workloads.conformers.chemistry.stereo import specified_stereo, stereo_agreement
from inferlab.workloads.conformers.chemistry.stereo_mirror import mirror_image
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.evaluation.metrics import best_rms_matrix, ensemble_metrics
from inferlab.workloads.conformers.evaluation.reference import ReferenceConfig, embed_reference
from inferlab.workloads.conformers.reference_model import reference_model_dir

sys.path.insert(0, str(Path(__file__).parents[1] / "2026-12-04-prefix-stereo-retries"))
from prefix_retries import _trans, held_out_molecules  # noqa: E402

BLOCK = re.compile(r"<[^<>]*>")


@dataclass(frozen=True)
class Element:
    centre: int  # the centre (a double bond: its first atom), where a redraw starts under --cut centre
    first: int  # the first written of the centre and its neighbours (a double bond: of its atoms and theirs)
    deciding: int  # the last written of them: the atom that settles it
    atom: int | None  # a tetrahedral centre's index, else None
    bond: int | None  # a double bond's index, else None


@dataclass
class Row:
    index: int  # molecule index
    k: int
    tokens: list[int] = field(default_factory=list)  # generated so far, no EOS
    written: int = 0  # atoms whose blocks are complete
    done: bool = False
    spent: int = 0  # output tokens, redraws included
    prefill: int = 0  # prompt and prefix tokens of every request
    retries: int = 0


def elements_of(mol: Chem.Mol) -> list[Element]:
    """The input's specified stereo elements, ordered by deciding atom (atom k = block k)."""
    atoms, bonds = specified_stereo(mol)
    out = []
    for i in atoms:
        neighbours = [n.GetIdx() for n in mol.GetAtomWithIdx(i).GetNeighbors()]
        out.append(Element(i, min([i] + neighbours), max([i] + neighbours), i, None))
    for b in bonds:
        bond = mol.GetBondWithIdx(b)
        ends = (bond.GetBeginAtom(), bond.GetEndAtom())
        around = [n.GetIdx() for a in ends for n in [a, *a.GetNeighbors()]]
        out.append(Element(min(a.GetIdx() for a in ends), min(around), max(around), None, b))
    return sorted(out, key=lambda e: (e.deciding, e.centre))


def is_right(element: Element, mol: Chem.Mol, geometric: Chem.Mol) -> bool:
    """`mol`: the input's tags; `geometric`: the same with stereo assigned from the written coordinates."""
    if element.atom is not None:
        return geometric.GetAtomWithIdx(element.atom).GetChiralTag() == mol.GetAtomWithIdx(element.atom).GetChiralTag()
    return _trans(geometric.GetBondWithIdx(element.bond)) == _trans(mol.GetBondWithIdx(element.bond))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", type=int, default=16)
    parser.add_argument("--k", type=int, default=8, help="conformers per molecule; K = k ETKDG references")
    parser.add_argument("--retries", type=int, default=8, help="redraws per row at most")
    parser.add_argument("--max-heavy-atoms", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cut", choices=["centre", "first"], default="centre",
                        help="where a redraw starts: the element's centre, or the first written of its atoms")
    args = parser.parse_args()
    started = time.perf_counter()
    profile = get_profile(DEFAULT_PROFILE)
    engine = Engine(EngineConfig(model=str(reference_model_dir()), device="cpu", max_slots=64, max_seq_len=2048,
                                 seed=args.seed))
    tokenizer = engine.tokenizer
    smiles = held_out_molecules(args.molecules, args.max_heavy_atoms)
    templates = [build_template(s, profile) for s in smiles]
    prompts = [list(t.prompt_ids(tokenizer)) for t in templates]
    inputs = [Chem.MolFromSmiles(t.canonical_smiles) for t in templates]  # atom k = block k
    elements = [elements_of(m) for m in inputs]
    placeholder = [profile.coordinates.format_block(40.0 + 3 * i, 7.0 + i, -11.0) for i in range(200)]

    def generate(jobs: list[tuple[Row, int, int]], tag: str) -> None:
        """jobs: (row, first segment, end segment (exclusive; None: to the program's end)); the row's tokens
        gain the generated ones, EOS dropped."""
        requests = []
        for n, (row, start, end) in enumerate(jobs):
            segments = templates[row.index].segments
            program = compile_program(segments[start:] if end is None else (*segments[start:end], EndOfSequence()),
                                      tokenizer)
            prompt = prompts[row.index] + row.tokens
            row.prefill += len(prompt)
            requests.append(Request(id=f"{tag}-{row.index}-{row.k}-{n}", prompt_ids=prompt,
                                    sampling=SamplingParams(temperature=1.0, top_p=1.0,
                                                            max_new_tokens=program.max_new_tokens),
                                    constraint=program, metadata=row))
        for result in engine.generate(requests):
            row = result.metadata
            assert result.finish_reason == "eos", (result.finish_reason, result.error)
            row.tokens += list(result.token_ids[:-1])
            row.spent += len(result.token_ids)

    def placed(row: Row) -> Chem.Mol:
        """The input molecule at the row's written positions (unwritten atoms far apart, away from the rest)."""
        template = templates[row.index]
        blocks = [b[1:-1] for b in BLOCK.findall(tokenizer.decode(row.tokens))][: row.written]
        blocks += placeholder[row.written : template.num_atoms]
        text = template.fill(blocks)
        return template.check(text, profile).mol

    def wrong_written(row: Row) -> list[Element]:
        mol = placed(row)
        geometric = Chem.Mol(mol)
        Chem.AssignStereochemistryFrom3D(geometric)
        return [e for e in elements[row.index] if e.deciding < row.written and not is_right(e, mol, geometric)]

    def hole_start(row: Row, atom: int) -> int:
        """Token index of atom `atom`'s block in the row's tokens (the runtime's reading of the program)."""
        program = compile_program(templates[row.index].segments, tokenizer)
        kinds, values = program.ops[0].tolist(), program.ops[1].tolist()
        t, holes = 0, 0
        for op, (kind, value) in enumerate(zip(kinds, values)):
            if kind == COPY:
                t += 1
                continue
            assert kind == HOLE
            if holes == atom:
                return t
            holes += 1
            while row.tokens[t] != values[op + 1]:
                t += 1
        raise AssertionError("the atom is not in the row's tokens")

    def is_ok(mol: Chem.Mol) -> bool:
        reference = Chem.Mol(mol)
        reference.RemoveAllConformers()
        return bool(stereo_agreement(reference, mol).ok)

    def finished(row: Row) -> Chem.Mol:
        return templates[row.index].check(tokenizer.decode(row.tokens), profile).mol

    # whole: one request per row, as the quality table generates
    whole = [Row(i, k) for i in range(len(smiles)) for k in range(args.k)]
    generate([(row, 0, None) for row in whole], "whole")
    # staged
    staged = [Row(i, k) for i in range(len(smiles)) for k in range(args.k)]
    rounds = 0
    while not all(row.done for row in staged):
        jobs = []
        for row in staged:
            if row.done:
                continue
            start = 0 if row.written == 0 and not row.tokens else 2 * row.written + 1
            target = next((e for e in elements[row.index] if e.deciding >= row.written), None)
            jobs.append((row, start, None if target is None else 2 * target.deciding + 3))
        generate(jobs, f"stage{rounds}")
        for row, _, end in jobs:
            if end is None:
                row.written, row.done = templates[row.index].num_atoms, True
                continue
            row.written = (end - 1) // 2
            wrong = wrong_written(row)
            if wrong and row.retries < args.retries:
                centre = min(e.centre if args.cut == "centre" else e.first for e in wrong)
                row.tokens = row.tokens[: hole_start(row, centre)]
                row.written, row.retries = centre, row.retries + 1
        rounds += 1
        print(f"stage round {rounds}: {len(jobs)} requests, {sum(r.done for r in staged)} rows done", flush=True)

    references = [embed_reference(s, ReferenceConfig(num_confs=args.k, seed=1001)) for s in smiles]

    def quality(mols_by_row: list[tuple[Row, Chem.Mol]]) -> dict[str, float]:
        stereo = [is_ok(m) for _, m in mols_by_row]
        per_molecule = []
        for i, ref in enumerate(references):
            refs = [Chem.Mol(ref, confId=c.GetId()) for c in ref.GetConformers()]
            gens = [m for row, m in mols_by_row if row.index == i]
            per_molecule.append(ensemble_metrics(best_rms_matrix(refs, gens).values))
        return {"stereo_ok": sum(stereo) / len(stereo),
                "cov_r_075": float(np.mean([m.coverage[0.75].recall for m in per_molecule])),
                "cov_r_125": float(np.mean([m.coverage[1.25].recall for m in per_molecule])),
                "amr_r": float(np.nanmean([m.matching_recall for m in per_molecule]))}

    def mirrored(mol: Chem.Mol) -> Chem.Mol:
        """The pipeline's mirror: a conformer whose stereo is wrong but whose mirror image's is right."""
        if is_ok(mol):
            return mol
        image = mirror_image(mol)
        return image if is_ok(image) else mol

    whole_mols = [(row, finished(row)) for row in whole]
    systems = {
        "whole (the model's own)": (quality(whole_mols), whole),
        "whole + mirror (the pipeline's default)": (quality([(r, mirrored(m)) for r, m in whole_mols]), whole),
        f"staged, <= {args.retries} redraws from the {args.cut}": (quality([(row, finished(row)) for row in staged]), staged),
    }
    summary = {"molecules": len(smiles), "conformers": len(whole), "retries": args.retries, "cut": args.cut,
               "stage_rounds": rounds,
               "seconds": round(time.perf_counter() - started, 1), "systems": {}}
    print(f"{'':42} {'stereo':>7} {'COV-R .75':>9} {'COV-R 1.25':>10} {'AMR-R':>6} {'output tok':>10} {'prefill tok':>11}")
    for name, (q, rows) in systems.items():
        out, pre = sum(r.spent for r in rows), sum(r.prefill for r in rows)
        summary["systems"][name] = {**q, "output_tokens": out, "prefill_tokens": pre,
                                    "redraws": sum(r.retries for r in rows)}
        print(f"{name:42} {q['stereo_ok']:>7.1%} {q['cov_r_075']:>9.1%} {q['cov_r_125']:>10.1%} {q['amr_r']:>6.3f} "
              f"{out:>10,} {pre:>11,}")
    print(json.dumps(summary))
    engine.close()


if __name__ == "__main__":
    main()
