"""ETKDG conformers as a resumable, shardable workload: K RDKit ETKDG conformers per molecule, written with
the conformer output format (SDF + one JSONL row per conformer), for reference sets too large for one
process (CPU workers, or Slurm CPU jobs). It is also the CPU stand-in with which the tests exercise the
conformer sharding and merging before the engine pipeline runs here.

Embedding is seeded (`seed`, one RDKit thread per worker unless told otherwise), so a molecule gets the
same conformers in any shard and on a rerun: a molecule cut short by a crash is embedded again and only
its missing conformers are written. Params: num_conformers, seed, optimize, smiles_column, id_column.
"""

from __future__ import annotations

import time
from typing import Any

from rdkit import Chem

from inferlab.errors import InputError
from inferlab.scale.adapter import ShardContext
from inferlab.scale.workloads.conformers import conformer_adapter, num_conformers
from inferlab.workloads.conformers.chemistry.inputs import read_molecule_inputs
from inferlab.workloads.conformers.chemistry.smiles import canonicalize_mol
from inferlab.workloads.conformers.evaluation.reference import ReferenceConfig, embed_reference
from inferlab.workloads.conformers.pipeline.output import ConformerResultWriter

PROFILE = "etkdg"  # the `profile` field of the rows: these are not a format profile's generations


def etkdg_params(num_confs: int, seed: int = 0, optimize: bool = False, smiles_column: str | None = None,
                 id_column: str | None = None) -> dict[str, Any]:
    return {"num_conformers": num_confs, "seed": seed, "optimize": optimize,
            "smiles_column": smiles_column, "id_column": id_column}


def _run_shard(params: dict[str, Any], ctx: ShardContext) -> dict[str, Any]:
    k = num_conformers(params)
    config = ReferenceConfig(num_confs=k, seed=params.get("seed", 0), optimize=params.get("optimize", False),
                             threads=ctx.threads or 1)
    inputs = read_molecule_inputs(ctx.input, params.get("smiles_column"), params.get("id_column"))
    start = time.perf_counter()
    written = errors = 0
    with ConformerResultWriter(ctx.output, profile=PROFILE) as writer:
        for record in inputs.records:  # ids are unique (a repeat is an error record under line-<n>)
            todo = [i for i in range(k) if not writer.is_done(record.id, i)]
            if not todo:
                continue
            try:
                if not record.ok:
                    raise InputError(record.error or "unusable input")
                mol = embed_reference(record.smiles, config)
            except InputError as e:
                for i in todo:
                    writer.write_error(record.id, record.smiles, i, str(e))
                errors += len(todo)
                ctx.progress(len(todo))
                continue
            key = canonicalize_mol(mol).smiles
            conformer_ids = [c.GetId() for c in mol.GetConformers()]
            for i in todo:
                writer.write_ok(record.id, key, i, Chem.Mol(mol, False, conformer_ids[i]))
                written += 1
                ctx.progress(1)
    return {"run_s": time.perf_counter() - start, "load_s": 0.0, "rows_ok": written, "rows_error": errors}


def _settings(params: dict[str, Any]) -> dict[str, Any]:
    return {key: params.get(key) for key in ("num_conformers", "seed", "optimize", "smiles_column", "id_column")}


ETKDG = conformer_adapter("etkdg-conformers", _run_shard, _settings, rows_exact=True)
