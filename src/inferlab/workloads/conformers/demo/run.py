"""The README's demo (`inferlab demo`) in three steps the CLI calls in turn:
- `prepare_demo`: the checkpoint (model.py: the reference model, or the random fallback), the molecules
  (molecules.py: held out from the reference model's training) and the files, in a cache folder; each run
  starts afresh (the pipeline would resume otherwise);
- `generate_demo`: the conformer pipeline on them, constrained as `conformers generate` runs it (a
  wrong-handed conformer written mirrored, the summary counts them), with no stereo retries, on the CPU or
  the GPU;
- `compare_with_etkdg`: ETKDG references and the evaluation's figures (quality.py), and the picture of one
  molecule (picture.py): the first with specified stereo and a valid conformer, else the first with one.
Not here: printing (cli/demo_cmd.py), the pipeline and the evaluation themselves.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError
from inferlab.workloads.conformers.demo.model import DemoModel, demo_model
from inferlab.workloads.conformers.demo.molecules import DemoMolecules, demo_molecules
from inferlab.workloads.conformers.demo.quality import (
    DemoQuality,
    NearestPair,
    references_per_molecule,
    score_against_etkdg,
)
from inferlab.workloads.conformers.pipeline.config import ConformerSampling, PipelineConfig
from inferlab.workloads.conformers.pipeline.stats import PipelineSummary


def default_work_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "inferlab" / "demo"


@dataclass(frozen=True)
class DemoConfig:
    work_dir: Path = field(default_factory=default_work_dir)
    num_molecules: int = 6
    num_conformers: int = 4
    min_atoms: int = 8
    max_atoms: int = 20
    device: str = "auto"
    sampling: ConformerSampling = field(default_factory=ConformerSampling)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_molecules < 1 or self.num_conformers < 1:
            raise ConfigError("the demo needs at least one molecule and one conformer")
        if not 1 <= self.min_atoms <= self.max_atoms:
            raise ConfigError(f"atom range [{self.min_atoms}, {self.max_atoms}] must satisfy 1 <= min <= max")


@dataclass(frozen=True)
class DemoSetup:
    config: DemoConfig
    model: DemoModel
    molecules: DemoMolecules
    input: Path  # the molecules as .smi
    output: Path  # the SDF of the valid conformers
    rows: Path  # one JSONL row per conformer


@dataclass(frozen=True)
class DemoComparison:
    quality: DemoQuality
    picture: Path | None  # None when no molecule has a valid conformer
    featured: str | None  # the pictured molecule's id
    nearest: NearestPair | None  # the pictured pair


def prepare_demo(config: DemoConfig) -> DemoSetup:
    work = Path(config.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    model = demo_model(work)
    molecules = demo_molecules(config.num_molecules, config.min_atoms, config.max_atoms)
    inp, out = work / "molecules.smi", work / "conformers.sdf"
    inp.write_text("".join(f"{m.smiles} {m.id}\n" for m in molecules.molecules))
    setup = DemoSetup(config, model, molecules, inp, out, out.with_suffix(".jsonl"))
    for old in (out, setup.rows, _references(setup), _picture(setup)):
        old.unlink(missing_ok=True)
    return setup


def generate_demo(
    setup: DemoSetup,
    on_start: Callable[[int, int], None] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    on_tokens: Callable[[int, int, int], None] | None = None,  # generate_conformers' on_tokens
) -> PipelineSummary:
    from inferlab.engine import EngineConfig
    from inferlab.workloads.conformers.pipeline.generate import generate_conformers

    c = setup.config
    pipeline = PipelineConfig(num_conformers=c.num_conformers, sampling=c.sampling, seed=c.seed)
    # slots enough for every conformer at once (the demo's rows need a few hundred positions each)
    engine = EngineConfig(model=setup.model.path, device=c.device, max_slots=min(64, c.num_molecules * c.num_conformers))
    return generate_conformers(engine, setup.input, setup.output, pipeline, on_start, on_row, on_phase, on_tokens)


def compare_with_etkdg(setup: DemoSetup) -> DemoComparison:
    from inferlab.workloads.conformers.demo.picture import write_picture

    if not setup.output.exists():  # no valid conformer: the evaluation scores every molecule 0 from an empty file
        setup.output.write_text("")
    quality = score_against_etkdg(setup.input, setup.output, _references(setup),
                                  references_per_molecule(setup.config.num_conformers))
    for molecule in sorted(setup.molecules.molecules, key=lambda m: m.stereo == 0):  # stable: the demo's order
        pair = quality.nearest(molecule.smiles)
        if pair is not None:
            note = f"The molecule: {setup.molecules.origin}." + ("" if setup.model.trained else
                                                                  " Random weights: the geometry is noise.")
            picture = write_picture(_picture(setup), molecule.smiles, pair.generated, pair.reference, pair.rmsd,
                                    f"{molecule.id}  {molecule.smiles}", note)
            return DemoComparison(quality, picture, molecule.id, pair)
    return DemoComparison(quality, None, None, None)


def _references(setup: DemoSetup) -> Path:
    return setup.output.with_name("references.sdf")


def _picture(setup: DemoSetup) -> Path:
    return setup.output.with_name("conformer.png")
