"""Reference conformer sets: K RDKit ETKDG conformers per input molecule, written to an SDF.

For tests, demos and the lab's quality scenario (GEOM-Drugs is not shipped): the records carry the same
properties as generated ones (canonical SMILES of the input, conformer index), so `conformers evaluate`
matches them exactly. Hydrogens are embedded and then removed before writing. A molecule that RDKit cannot
parse or embed is reported in the summary and skipped. `embed_many` embeds a list of molecules in a
process pool, one molecule per task. Not here: reading the inputs (chemistry/inputs.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rdkit import Chem
from rdkit.Chem import AllChem

from inferlab.child_processes import spawn_pool
from inferlab.errors import ConfigError, InputError
from inferlab.outputs.atomic import write_text_atomic
from inferlab.workloads.conformers.chemistry.inputs import MoleculeInputs
from inferlab.workloads.conformers.chemistry.sdf import ConformerSdfWriter
from inferlab.workloads.conformers.chemistry.smiles import canonicalize_mol, parse_smiles
from inferlab.workloads.conformers.evaluation.evaluate import pool_size

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReferenceConfig:
    num_confs: int = 5
    seed: int = 0
    optimize: bool = False  # MMFF-optimise each conformer after embedding
    threads: int = 0  # RDKit embedding threads; 0 = all cores

    def __post_init__(self) -> None:
        if self.num_confs < 1:
            raise ConfigError(f"num_confs={self.num_confs} must be >= 1")
        if self.threads < 0:
            raise ConfigError(f"threads={self.threads} must be >= 0 (0 = all cores)")


@dataclass
class ReferenceSummary:
    molecules_written: int = 0
    conformers_written: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)  # (input id, reason)


def embed_reference(smiles: str, config: ReferenceConfig) -> Chem.Mol:
    """The heavy-atom molecule with exactly `num_confs` ETKDG conformers, or InputError."""
    mol = Chem.AddHs(parse_smiles(smiles))
    params = AllChem.ETKDGv3()
    params.randomSeed = config.seed
    params.numThreads = config.threads
    try:
        ids = list(AllChem.EmbedMultipleConfs(mol, numConfs=config.num_confs, params=params))
    except RuntimeError as e:  # RDKit raises on some inputs (e.g. bad distance bounds around metals)
        raise InputError(f"RDKit could not embed {smiles!r}: {str(e).strip().splitlines()[0]}") from None
    if len(ids) < config.num_confs:
        raise InputError(f"RDKit embedded {len(ids)} of {config.num_confs} conformers of {smiles!r}")
    if config.optimize:
        AllChem.MMFFOptimizeMoleculeConfs(mol, numThreads=config.threads)
    return Chem.RemoveHs(mol)


def embed_many(smiles: list[str], config: ReferenceConfig, workers: int = 0,
               seeds: list[int] | None = None) -> list[Chem.Mol | str]:
    """embed_reference of each SMILES: the molecule, or the reason it could not be embedded. `seeds`: one
    ETKDG seed per molecule (default: config.seed for all). In a spawn pool of `workers` processes (0: one
    per CPU core, 1: in this process), one molecule per task, each embedding on one thread."""

    seeds = [config.seed] * len(smiles) if seeds is None else seeds
    assert len(seeds) == len(smiles)
    jobs = [(s, dataclasses.replace(config, seed=seed, threads=1)) for s, seed in zip(smiles, seeds)]
    workers = pool_size(workers, len(jobs))
    if workers == 1:
        return [Chem.Mol(b) if isinstance(b, bytes) else b for b in (_embedded(*job) for job in jobs)]
    # spawn, not fork: the caller may hold CUDA or threads that a forked child must not inherit
    with spawn_pool(workers) as pool:
        done = list(pool.map(_embedded, *zip(*jobs)))
    return [Chem.Mol(b) if isinstance(b, bytes) else b for b in done]


def _embedded(smiles: str, config: ReferenceConfig) -> bytes | str:
    """One molecule in a worker: its binary (conformers included) or the reason."""
    try:
        return embed_reference(smiles, config).ToBinary()
    except InputError as e:
        return str(e)


def write_reference_sdf(
    inputs: MoleculeInputs,
    output: str | Path,
    config: ReferenceConfig = ReferenceConfig(),
    progress: Callable[[int], None] | None = None,
) -> ReferenceSummary:
    """Write a fresh SDF at `output`: built beside it and renamed onto it when complete, so an existing file
    is replaced only by a finished set (a crash leaves it as it was)."""
    path = Path(output)
    building = path.with_name(f".{path.name}.{os.getpid()}.building")
    building.unlink(missing_ok=True)
    summary = ReferenceSummary()
    with ConformerSdfWriter(building) as writer:
        for record in inputs.records:
            if progress:
                progress(1)
            if not record.ok:
                summary.errors.append((record.id, record.error or "unusable input"))
                continue
            try:
                mol = embed_reference(record.smiles, config)
            except InputError as e:
                summary.errors.append((record.id, str(e)))
                continue
            key = canonicalize_mol(mol).smiles
            for index, conformer in enumerate(mol.GetConformers()):
                writer.write(mol, record.id, key, index, conf_id=conformer.GetId())
            summary.molecules_written += 1
            summary.conformers_written += mol.GetNumConformers()
    if building.exists():
        os.replace(building, path)
    else:
        write_text_atomic(path, "")  # no molecule could be embedded
    log.info("wrote %d conformers of %d molecules to %s", summary.conformers_written, summary.molecules_written, path)
    return summary
