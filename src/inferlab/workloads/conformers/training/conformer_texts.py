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
- train and validation molecules also get their stereo variants (stereo_variants.py: the mirror image of a
  molecule with specified tetrahedral centres, and the stereo each conformer's coordinates make where the
  molecule leaves stereo open), each with its own prompt, conformer texts and probe texts, made by the same
  path; each variant text must have its prompt's stereo by the pipeline's check (chemistry/stereo.py), a
  text that has not is left out, and so is a variant that cannot be made (the molecule's own texts stay).
  The molecule's own conformer texts are checked too, and counted (`stereo`), never dropped for it;
- every molecule that leaves stereo open also gets the prompt and probe texts (no conformer text) of its
  form with stereo assigned as the quality preset assigns it (chemistry/stereo_assignment.py), so that the
  reduced vocabulary cuts that prompt as qwen3-chem does: the preset prompts held-out molecules so.
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
from inferlab.workloads.conformers.chemistry.smiles import canonicalize_mol, parse_smiles
from inferlab.workloads.conformers.chemistry.stereo import stereo_agreement
from inferlab.workloads.conformers.chemistry.stereo_assignment import with_assigned_stereo
from inferlab.workloads.conformers.chemistry.template import ConformerTemplate, build_template
from inferlab.workloads.conformers.training.scaffold_split import HELD_OUT
from inferlab.workloads.conformers.training.stereo_variants import (
    ASSIGNED,
    MIRROR,
    assigned_stereoisomers,
    mirror_image,
)

PROFILE = "v3-fixed4"
NUM_CONFORMERS = 8
PROBE_SIGNS = ("positive", "negative", "random")
OWN = "own"  # the molecule's own conformer texts, in `MoleculeTexts.stereo` beside the variant kinds
ENUMERATED = "enumerated"  # MoleculeTexts.enumerated's kind: prompt and probes only, never training data
_PROBE_MAX_UNITS = 1_000_000  # values 0.0000-99.9999


@dataclass
class VariantTexts:
    """One stereo variant of a molecule (stereo_variants.py): its own prompt and texts."""

    kind: str  # stereo_variants.KINDS
    canonical_smiles: str
    prompt: str
    conformers: list[str]  # generation texts (EOS not included), training data
    probes: list[str]


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
    variants: list[VariantTexts] = field(default_factory=list)  # stereo variants (train and validation only)
    variants_left_out: list[dict[str, str]] = field(default_factory=list)  # {kind, at, why} of variants not made
    stereo: dict[str, list[int]] = field(default_factory=dict)  # OWN or a variant kind -> [texts with their
    # prompt's stereo, texts whose prompt specifies stereo]
    enumerated: VariantTexts | None = None  # the assign_stereo form's prompt and probes (no conformers)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> MoleculeTexts:
        enumerated = entry.get("enumerated")
        return cls(**{**entry, "variants": [VariantTexts(**v) for v in entry.get("variants", [])],
                      "enumerated": None if enumerated is None else VariantTexts(**enumerated)})


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
            _check_stable(template, canonical_smiles)
            stage = "constraint program"
            program = self._program(template)
            stage = "ETKDG conformers"
            mol = self._embedded(template)
            conformers = self._texts(template, mol)
            stage = "constraint check"
            probes = self._probes(template)
            for text in conformers + probes:
                self._check(program, text)
        except (InferlabError, _Dropped) as e:
            texts.dropped_at, texts.error = stage, f"{type(e).__name__}: {e}"
            return texts
        texts.prompt = template.prompt
        texts.probes = probes
        texts.enumerated = self._enumerated(template)
        if split != HELD_OUT:
            texts.conformers = conformers
            _count(texts.stereo, OWN, [self._has_stereo(template, text) for text in conformers])
            self._add_variants(texts, mol)
        return texts

    def _add_variants(self, texts: MoleculeTexts, mol: Chem.Mol) -> None:
        try:
            mirror = mirror_image(mol)
            groups = list(assigned_stereoisomers(mol).values())
        except (InferlabError, RuntimeError, ValueError) as e:  # RDKit's perception refusing the molecule
            why = f"{type(e).__name__}: {e}"
            texts.variants_left_out.append({"kind": "all", "at": "stereo perception", "why": why})
            return
        candidates = [] if mirror is None else [(MIRROR, [mirror])]
        candidates += [(ASSIGNED, singles) for singles in groups]
        for kind, mols in candidates:
            stage = "template"
            try:
                smiles = canonicalize_mol(mols[0]).smiles
                if smiles == texts.canonical_smiles:
                    stage = "meso"
                    raise _Dropped("the mirror image is the molecule itself")
                template = build_template(smiles, get_profile(PROFILE))
                stage = "canonical form"
                _check_stable(template, smiles)
                stage = "constraint program"
                program = self._program(template)
                stage = "conformer texts"
                conformers = [text for m in mols for text in self._texts(template, m)]
                stage = "stereo check"
                agree = [self._has_stereo(template, text) for text in conformers]
                _count(texts.stereo, kind, agree)
                conformers = [text for text, ok in zip(conformers, agree) if ok]
                if not conformers:
                    raise _Dropped("no conformer text has the variant's stereo")
                stage = "constraint check"
                probes = self._probes(template)
                for text in conformers + probes:
                    self._check(program, text)
            except (InferlabError, _Dropped) as e:
                texts.variants_left_out.append({"kind": kind, "at": stage, "why": f"{type(e).__name__}: {e}"})
                continue
            texts.variants.append(VariantTexts(kind, smiles, template.prompt, conformers, probes))

    def _enumerated(self, template: ConformerTemplate) -> VariantTexts | None:
        """The prompt and probes of the molecule with its open stereo assigned (the quality preset's prompt);
        None when it leaves none open or the format cannot write that form (the preset skips it too)."""
        try:
            smiles = with_assigned_stereo(parse_smiles(template.canonical_smiles))
            if smiles == template.canonical_smiles:
                return None
            assigned = build_template(smiles, get_profile(PROFILE))
        except (InferlabError, RuntimeError, ValueError):  # RDKit's enumeration refusing it: so would the preset's
            return None
        return VariantTexts(ENUMERATED, assigned.canonical_smiles, assigned.prompt, [], self._probes(assigned))

    def _program(self, template: ConformerTemplate):
        from inferlab.constraints.program import compile_program

        return compile_program(template.segments, self.tokenizer, self.grammar_set)

    def _embedded(self, template: ConformerTemplate) -> Chem.Mol:
        """The molecule (heavy atoms) with its ETKDG conformers, each in canonical orientation."""
        seed = derived_seed(self.seed, "etkdg", template.canonical_smiles)
        with rdkit_log():  # the force field's typing warnings (metals) are no reason to drop a molecule
            with_hs = embed_etkdg(parse_smiles(template.canonical_smiles), NUM_CONFORMERS, seed, threads=1,
                                  label=repr(template.canonical_smiles))
        mol = Chem.RemoveHs(with_hs)
        for conformer in mol.GetConformers():
            rdMolTransforms.CanonicalizeConformer(conformer)
        return mol

    def _texts(self, template: ConformerTemplate, mol: Chem.Mol) -> list[str]:
        """The generation texts of `mol`'s conformers, each the template filled with its blocks."""
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

    def _probes(self, template: ConformerTemplate) -> list[str]:
        return [template.fill(probe_blocks(template.num_atoms, self._rng(template.canonical_smiles, sign), sign))
                for sign in PROBE_SIGNS]

    def _has_stereo(self, template: ConformerTemplate, text: str) -> bool | None:
        """The pipeline's verdict (pipeline/judge.py): the decoded conformer has the prompt's stereo; None when
        the prompt specifies none, False when RDKit cannot read it."""
        try:
            mol = template.check(text, get_profile(PROFILE)).mol
            reference = Chem.Mol(mol)
            reference.RemoveAllConformers()
            return stereo_agreement(reference, mol).ok
        except Exception:  # RDKit's perception failing on a geometry: not a text that shows the stereo
            return False

    def _check(self, program, text: str) -> None:
        from inferlab.constraints.simulate import check_output

        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        problem = check_output(program, ids, self.tokenizer)
        if problem is not None:
            raise _Dropped(f"the constraint would not write this text: {problem}")

    def _rng(self, canonical_smiles: str, sign: str) -> random.Random:
        return random.Random(derived_seed(self.seed, f"probe-{sign}", canonical_smiles))


def _check_stable(template: ConformerTemplate, canonical_smiles: str) -> None:
    if template.canonical_smiles != canonical_smiles:
        raise _Dropped(f"canonicalisation is not stable: {canonical_smiles} -> {template.canonical_smiles}")


def _count(stereo: dict[str, list[int]], kind: str, verdicts: list[bool | None]) -> None:
    """Add the texts whose prompt specifies stereo (verdict not None) to stereo[kind] = [agreeing, judged]."""
    judged = [v for v in verdicts if v is not None]
    if judged:
        counts = stereo.setdefault(kind, [0, 0])
        counts[0] += sum(judged)
        counts[1] += len(judged)


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
