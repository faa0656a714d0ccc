"""One molecule's texts for the reference model, made exactly as the pipeline prompts and constrains it.

A training text is `template.prompt` tokenised with add_special_tokens=True (pipeline/prepare.py), then the
generation the constrained decoder would write for an ETKDG conformer (`[CONFORMER]...[/CONFORMER]`, the
tokenizer's own cut of that text), then EOS. Per molecule:
- the template and its ConstraintProgram are built with qwen3-chem (a molecule the compiler refuses is
  dropped: the engine could not serve it), and the template's canonical SMILES must be the molecule's own
  (canonicalisation is stable on it, so the evaluation's prompt from the split file is the training prompt);
- train and validation molecules: NUM_CONFORMERS ETKDG conformers (chemistry/etkdg.py, the evaluation's
  embedding, with a seed of their own), hydrogens removed, each turned to its canonical orientation
  (principal axes on x, y, z, centroid at the origin: rdMolTransforms.CanonicalizeConformer), so the model
  never has to learn a random rotation; the evaluation scores with GetBestRMS, which aligns anyway;
- held-out molecules get no conformer text: they are embedded only to check that RDKit can embed them
  (the evaluation's references are made later with another seed);
- every molecule gets three probe texts with synthetic fixed4 coordinates (all positive, all negative,
  random signs; values 0-99.9999, seeded): a block's first sign changes how the tokenizer cuts `]<` vs
  `]<-` and `,` vs `,-`, so these make the reduced vocabulary cover every cut any coordinates give.
Every generation text must be the template filled with its blocks, and `constraints.simulate.check_output`
must accept its tokens (valid for the program, copy tokens exactly the program's). Failures drop the
molecule with the reason. Imports torch through the constraint compiler; runs in the build's workers.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from rdkit import Chem
from rdkit.Chem import rdMolTransforms

from inferlab.errors import InferlabError
from inferlab.workloads.conformers.chemistry.encode import encode_conformers
from inferlab.workloads.conformers.chemistry.etkdg import embed_etkdg
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.rdkit_messages import rdkit_log
from inferlab.workloads.conformers.chemistry.smiles import parse_smiles
from inferlab.workloads.conformers.chemistry.template import ConformerTemplate, build_template
from inferlab.workloads.conformers.training.scaffold_split import HELD_OUT

PROFILE = "v3-fixed4"
NUM_CONFORMERS = 8
PROBE_SIGNS = ("positive", "negative", "random")
_PROBE_MAX_UNITS = 1_000_000  # values 0.0000-99.9999


@dataclass
class MoleculeTexts:
    id: str
    split: str
    canonical_smiles: str
    prompt: str = ""
    conformers: list[str] = field(default_factory=list)  # generation texts (EOS not included), training data
    probes: list[str] = field(default_factory=list)  # generation texts with synthetic coordinates
    dropped_at: str | None = None  # the stage that refused the molecule
    error: str | None = None  # why

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TextMaker:
    """What one worker holds: qwen3-chem, its GrammarSet, the recipe's seed."""

    tokenizer: Any
    grammar_set: Any
    seed: int

    def make(self, molecule_id: str, canonical_smiles: str, split: str) -> MoleculeTexts:
        texts = MoleculeTexts(molecule_id, split, canonical_smiles)
        stage = "template"
        try:
            template = build_template(canonical_smiles, get_profile(PROFILE))
            stage = "canonical form"
            if template.canonical_smiles != canonical_smiles:
                raise _Dropped(f"canonicalisation is not stable: {canonical_smiles} -> {template.canonical_smiles}")
            stage = "constraint program"
            program = self._program(template)
            stage = "ETKDG conformers"
            conformers = self._conformers(template)
            stage = "constraint check"
            probes = [template.fill(probe_blocks(template.num_atoms, self._rng(canonical_smiles, sign), sign))
                      for sign in PROBE_SIGNS]
            for text in conformers + probes:
                self._check(program, text)
        except (InferlabError, _Dropped) as e:
            texts.dropped_at, texts.error = stage, f"{type(e).__name__}: {e}"
            return texts
        texts.prompt = template.prompt
        texts.conformers = [] if split == HELD_OUT else conformers
        texts.probes = probes
        return texts

    def _program(self, template: ConformerTemplate):
        from inferlab.constraints.program import compile_program

        return compile_program(template.segments, self.tokenizer, self.grammar_set)

    def _conformers(self, template: ConformerTemplate) -> list[str]:
        seed = derived_seed(self.seed, "etkdg", template.canonical_smiles)
        with rdkit_log():  # the force field's typing warnings (metals) are no reason to drop a molecule
            with_hs = embed_etkdg(parse_smiles(template.canonical_smiles), NUM_CONFORMERS, seed, threads=1,
                                  label=repr(template.canonical_smiles))
        mol = Chem.RemoveHs(with_hs)
        for conformer in mol.GetConformers():
            rdMolTransforms.CanonicalizeConformer(conformer)
        profile = get_profile(PROFILE)
        texts = []
        for encoded in encode_conformers(mol, profile):
            if encoded.canonical_smiles != template.canonical_smiles:
                raise _Dropped(f"the embedded molecule canonicalises to {encoded.canonical_smiles}")
            text = encoded.generation_text(profile)
            if text != template.fill(encoded.blocks):
                raise _Dropped("the encoder's text differs from the template filled with its blocks")
            texts.append(text)
        return texts

    def _check(self, program, text: str) -> None:
        from inferlab.constraints.simulate import check_output

        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        problem = check_output(program, ids, self.tokenizer)
        if problem is not None:
            raise _Dropped(f"the constraint would not write this text: {problem}")

    def _rng(self, canonical_smiles: str, sign: str) -> random.Random:
        return random.Random(derived_seed(self.seed, f"probe-{sign}", canonical_smiles))


class _Dropped(Exception):
    """A molecule the reference data cannot use (the reason is the message)."""


def derived_seed(seed: int, purpose: str, key: str) -> int:
    """A seed for (purpose, molecule) from the recipe's seed: independent of order, chunking and workers."""
    digest = hashlib.sha256(f"{seed}\x00{purpose}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF  # RDKit's randomSeed is a signed 32-bit int


def probe_blocks(num_blocks: int, rng: random.Random, sign: str) -> list[str]:
    """`num_blocks` fixed4 blocks of values 0.0000-99.9999 with the given signs (never `-0.0000`)."""
    blocks = []
    for _ in range(num_blocks):
        values = []
        for _ in range(3):
            units = rng.randrange(_PROBE_MAX_UNITS)
            negative = sign == "negative" or (sign == "random" and rng.random() < 0.5)
            text = f"{units // 10_000}.{units % 10_000:04d}"
            values.append(f"-{text}" if negative and units else text)
        blocks.append(",".join(values))
    return blocks
