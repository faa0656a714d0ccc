"""Stereo agreement of a conformer checkpoint, tetrahedral and E/Z apart, on train and held-out molecules:

    python scripts/reference_stereo.py --model DIR --work-dir D [--per-group 20 --num-conformers 4 --device cpu]

Three groups of molecules from the checkpoint's split.tsv (the committed one when the folder has none), each
the first --per-group molecules of at most --max-heavy-atoms heavy atoms, the sources taken in turn:
`train` and `held_out`, molecules whose SMILES specify stereo (ChEMBL's), and `held_out_assigned`, held-out
molecules that specify none but have stereocentres or stereo double bonds, given a configuration as the
quality preset gives it (`assign_stereo`: RDKit's first enumerated isomer). Each group goes through
`inferlab conformers generate` as a user runs it (T=1, top-p 1, no stereo retries: the agreement is the
model's own; --summary-json beside), and every valid conformer of the SDF is judged by the pipeline's
check (chemistry/stereo.py) three times: on the input's whole stereo (the pipeline's `stereo_ok`), on its
tetrahedral centres alone and on its double bonds alone (the other kind cleared from the reference).
A conformer counts for a kind when its input specifies that kind; the elements (centres, bonds) count too,
since a conformer of n centres is right by chance with probability 2^-n, an element with 1/2. Prints a
table and one JSON line, and writes WORK_DIR/stereo.json. A rerun on the same work folder resumes the
generation runs (nothing left to generate: the judging again); another model needs another folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from rdkit import Chem

GROUPS = ("train", "held_out", "held_out_assigned")
KINDS = ("all", "tetrahedral", "double_bond")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="checkpoint folder (with split.tsv, or the "
                                                                  "committed split is used)")
    parser.add_argument("--work-dir", type=Path, required=True, help="inputs, SDF, JSONL and summaries go here")
    parser.add_argument("--per-group", type=int, default=20, help="molecules per group")
    parser.add_argument("--max-heavy-atoms", type=int, default=30)
    parser.add_argument("--num-conformers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--groups", nargs="+", choices=GROUPS, default=list(GROUPS))
    args = parser.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    figures = {}
    for group, molecules in select_groups(_split_file(args.model), args.per_group, args.max_heavy_atoms).items():
        if group not in args.groups:
            continue
        smi = args.work_dir / f"{group}.smi"
        smi.write_text("".join(f"{smiles} {molecule_id}\n" for molecule_id, smiles in molecules))
        sdf = args.work_dir / f"{group}.sdf"
        command = [sys.executable, "-m", "inferlab.cli", "conformers", "generate", "--model", str(args.model),
                   "--input", str(smi), "--output", str(sdf), "--num-conformers", str(args.num_conformers),
                   "--sampling", "top-p", "--temperature", "1.0", "--top-p", "1.0", "--seed", str(args.seed),
                   "--stereo-retries", "0", "--device", args.device,
                   "--summary-json", str(args.work_dir / f"{group}.summary.json")]
        print(f"=== {group}: {len(molecules)} molecules: {' '.join(command)}", flush=True)
        subprocess.run(command, check=True)
        summary = json.loads((args.work_dir / f"{group}.summary.json").read_text())
        # the CLI summary's own figure counts the rows this run wrote ([0, 0] when a rerun had none left)
        figures[group] = {"molecules": len(molecules), **judge_sdf(sdf),
                          "pipeline_stereo": [summary.get("stereo_matches"), summary.get("stereo_checked")]}
    columns = [*KINDS, *(f"{kind} elements" for kind in KINDS[1:])]
    print(f"{'group':<18} {'molecules':>9} " + " ".join(f"{c:>20}" for c in columns))
    for group, f in figures.items():
        cells = [f"{f[c][0]:>4} of {f[c][1]:<4} {_share(f[c]):>5}" for c in columns]
        print(f"{group:<18} {f['molecules']:>9} " + " ".join(f"{c:>20}" for c in cells))
    record = {"model": str(args.model), "num_conformers": args.num_conformers, "seed": args.seed,
              "max_heavy_atoms": args.max_heavy_atoms, "groups": figures}
    (args.work_dir / "stereo.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))
    return 0


def _split_file(model: Path) -> Path:
    from inferlab.workloads.conformers.reference_model import SPLIT_FILE

    return model / "split.tsv" if (model / "split.tsv").is_file() else SPLIT_FILE


def select_groups(split_file: Path, per_group: int, max_atoms: int) -> dict[str, list[tuple[str, str]]]:
    """Each group's (id, SMILES), the sources taken in turn in the split file's order."""
    from inferlab.workloads.conformers.chemistry.stereo import specified_stereo
    from inferlab.workloads.conformers.chemistry.stereo_assignment import with_assigned_stereo
    from inferlab.workloads.conformers.training.scaffold_split import read_split

    queues: dict[str, dict[str, list[tuple[str, str]]]] = {group: {} for group in GROUPS}
    for row in read_split(split_file):
        if row.num_atoms > max_atoms or row.split not in ("train", "held_out"):
            continue
        mol = Chem.MolFromSmiles(row.canonical_smiles)
        if any(specified_stereo(mol)):
            group, smiles = row.split, row.canonical_smiles
        elif row.split == "held_out" and (assigned := with_assigned_stereo(mol)) != row.canonical_smiles:
            group, smiles = "held_out_assigned", assigned
        else:
            continue
        queues[group].setdefault(row.source, []).append((row.id, smiles))
    return {group: _in_turn(list(by_source.values()), per_group) for group, by_source in queues.items()}


def _in_turn(queues: list[list[tuple[str, str]]], count: int) -> list[tuple[str, str]]:
    taken = [queue[i] for i in range(max(map(len, queues), default=0)) for queue in queues if i < len(queue)]
    return taken[:count]


def judge_sdf(sdf: Path) -> dict[str, list[int]]:
    """[agreeing, judged] conformers per kind (KINDS) over the SDF's records, and elements per kind
    ("tetrahedral elements": specified centres the geometry has right, of those judged)."""
    from inferlab.workloads.conformers.chemistry.smiles import parse_smiles
    from inferlab.workloads.conformers.chemistry.stereo import stereo_agreement

    counts = {name: [0, 0] for name in (*KINDS, *(f"{kind} elements" for kind in KINDS[1:]))}
    if not sdf.is_file():
        return counts
    for record in Chem.SDMolSupplier(str(sdf), removeHs=False, sanitize=True):
        if record is None:
            continue
        reference = parse_smiles(record.GetProp("canonical_smiles"))
        for kind in KINDS:
            agreement = stereo_agreement(_only(reference, kind), record)
            if agreement.ok is not None:
                counts[kind][0] += int(agreement.ok)
                counts[kind][1] += 1
                if kind != "all":  # one kind alone: the mismatches are that kind's contradicted elements
                    counts[f"{kind} elements"][0] += agreement.specified - agreement.mismatches
                    counts[f"{kind} elements"][1] += agreement.specified
    return counts


def _only(reference: Chem.Mol, kind: str) -> Chem.Mol:
    """`reference` with the other kind's stereo cleared (`all`: unchanged)."""
    mol = Chem.Mol(reference)
    if kind == "double_bond":
        for atom in mol.GetAtoms():
            atom.SetChiralTag(Chem.ChiralType.CHI_UNSPECIFIED)
    elif kind == "tetrahedral":
        for bond in mol.GetBonds():
            if bond.GetBondType() == Chem.BondType.DOUBLE:
                bond.SetStereo(Chem.BondStereo.STEREONONE)
    return mol


def _share(pair: list[int]) -> str:
    return f"{pair[0] / pair[1]:.0%}" if pair[1] else "-"


if __name__ == "__main__":
    sys.exit(main())
