"""The `conformer-quality` scenario's references (child process only: RDKit): K ETKDGv3 conformers per
molecule with the reference seed, embedded once per run directory and reused by every cell of the run, so
all systems are scored against the same conformers. RUN_DIR/conformer-quality/references/<digest>.sdf holds
them (keyed by the template's canonical SMILES, as `conformers evaluate` reads them) and <digest>.json the
molecules RDKit could not embed; the digest covers the molecules in order, K, the seed and the RDKit version,
so cells of other molecules or settings embed their own. Both files are written beside their place and
renamed onto it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ReferenceSet:
    conformers: dict[str, tuple[bytes, ...]]  # canonical SMILES -> K RDKit binaries, one conformer each
    failed: dict[str, str]  # canonical SMILES -> why RDKit could not embed it
    path: Path
    embed_s: float  # 0 when read from the run directory's cache


def reference_set(run_dir: Path, molecules: list[Any], num_confs: int, seed: int, workers: int) -> ReferenceSet:
    """The references of `molecules` (the scenario's Molecule records), from the cache or embedded now."""
    from rdkit import rdBase

    from inferlab.outputs.atomic import write_json_atomic

    keys = [m.template.canonical_smiles for m in molecules]
    digest = hashlib.sha256(json.dumps([keys, num_confs, seed, rdBase.rdkitVersion]).encode()).hexdigest()[:16]
    folder = run_dir / "conformer-quality" / "references"
    sdf, failures = folder / f"{digest}.sdf", folder / f"{digest}.json"
    if sdf.is_file() and failures.is_file():
        return ReferenceSet(_read(sdf), json.loads(failures.read_text()), sdf, 0.0)
    started = time.perf_counter()
    failed = _embed(molecules, num_confs, seed, workers, sdf)
    write_json_atomic(failures, failed)
    return ReferenceSet(_read(sdf), failed, sdf, time.perf_counter() - started)


def _embed(molecules: list[Any], num_confs: int, seed: int, workers: int, sdf: Path) -> dict[str, str]:
    from inferlab.workloads.conformers.chemistry.sdf import ConformerSdfWriter
    from inferlab.workloads.conformers.evaluation.reference import ReferenceConfig, embed_many

    embedded = embed_many([m.smiles for m in molecules], ReferenceConfig(num_confs=num_confs, seed=seed), workers)
    failed: dict[str, str] = {}
    building = sdf.with_name(f".{sdf.name}.{os.getpid()}.building")
    building.unlink(missing_ok=True)
    with ConformerSdfWriter(building) as writer:
        for m, mol in zip(molecules, embedded):
            if isinstance(mol, str):
                failed[m.template.canonical_smiles] = mol
                continue
            for index, conformer in enumerate(mol.GetConformers()):
                writer.write(mol, m.id, m.template.canonical_smiles, index, conf_id=conformer.GetId())
    if not building.exists():  # nothing embedded: an empty set, not a missing one
        building.parent.mkdir(parents=True, exist_ok=True)
        building.write_text("")
    os.replace(building, sdf)
    return failed


def _read(sdf: Path) -> dict[str, tuple[bytes, ...]]:
    from inferlab.workloads.conformers.evaluation.evaluate import group_by_molecule

    groups, unreadable = group_by_molecule(sdf)
    assert not unreadable, f"the reference set {sdf} has unreadable records: {unreadable[:2]}"
    return {key: tuple(m.ToBinary() for m in mols) for key, mols in groups.items()}

