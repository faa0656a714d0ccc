"""Template: a SMILES and a format profile -> the prompt text and the constraint segments of its conformer.

The segments are the encoder's output for that molecule with every block's content turned into a hole:
`Copy("[CONFORMER][C]<")`, `Hole("coord3-fixed4")`, `Copy(">[C]<")`, ..., `Copy(">[/CONFORMER]")`,
`EndOfSequence()`. Each copy between two holes starts with `>`, which no coordinate grammar contains, so
the automaton always knows where a block ends. The template also checks a finished generation: every
block well formed and every descriptor and structure token exactly the template's.

Not here: tokenisation and compilation (inferlab.constraints), caching (the generation workload).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from inferlab.constraints.segments import Copy, EndOfSequence, Hole, Segment
from inferlab.errors import InputError
from inferlab.workloads.conformers.chemistry.decode import (
    DecodedConformer,
    molecule_with_positions,
    read_units,
    strip_tags,
)
from inferlab.workloads.conformers.chemistry.encode import enriched_layout
from inferlab.workloads.conformers.chemistry.profiles import FormatProfile
from inferlab.workloads.conformers.chemistry.smiles import canonicalize_smiles

_BLOCK_CONTENT = re.compile(r"<[^<>]*>")


@dataclass(frozen=True)
class ConformerTemplate:
    canonical_smiles: str
    profile: str
    prompt: str  # the prompt text; the tokenizer adds a BOS where it is configured to
    segments: tuple[Segment, ...]
    num_atoms: int  # number of holes (heavy atoms, plus explicit H such as [2H])

    @property
    def copy_texts(self) -> tuple[str, ...]:
        return tuple(s.text for s in self.segments if isinstance(s, Copy))

    @property
    def skeleton(self) -> str:
        """The generation text with every block emptied: `[CONFORMER][C]<>[C]<>...[/CONFORMER]`."""
        return "".join(self.copy_texts)

    def prompt_ids(self, tokenizer) -> list[int]:
        """The prompt's token ids; a BOS comes first exactly when the tokenizer is configured to add one."""
        return list(tokenizer(self.prompt, add_special_tokens=True)["input_ids"])

    def describe_segment(self, index: int) -> str:
        """Segment `index` of `segments` in words: an atom's coordinate block or a copy run (where, e.g., a
        constraint's pressure peaked)."""
        segment = self.segments[index]
        if isinstance(segment, EndOfSequence):
            return "the end of the conformer (EOS)"
        if isinstance(segment, Hole):
            atom = (index - 1) // 2
            before = self.copy_texts[atom]
            return f"atom {atom}'s coordinates ({before[before.rfind('[') : -1]})"
        k = index // 2
        where = "the opening" if k == 0 else "the closing" if k == self.num_atoms else f"before atom {k}'s coordinates"
        return f"the copy {segment.text!r} ({where})"

    def fill(self, blocks: list[str] | tuple[str, ...]) -> str:
        """The generation text with block k holding blocks[k] (used by tests and the baseline)."""
        if len(blocks) != self.num_atoms:
            raise InputError(f"{len(blocks)} blocks given for a template of {self.num_atoms} atoms")
        copies = self.copy_texts
        return copies[0] + "".join(b + c for b, c in zip(blocks, copies[1:]))

    def check(self, text: str, profile: FormatProfile) -> DecodedConformer:
        """Decode `text` strictly as exactly this template's molecule; InputError says why it is not.

        Every block must be well formed and every descriptor and structure token must be the template's,
        so the molecule is the template's own (stereo included); block k is the position of atom k of
        the canonical SMILES.
        """
        _, positions = read_units(strip_tags(text, profile), profile)
        skeleton = _BLOCK_CONTENT.sub("<>", text)
        if skeleton != self.skeleton:
            at = next((i for i, (a, b) in enumerate(zip(skeleton, self.skeleton)) if a != b), None)
            at = min(len(skeleton), len(self.skeleton)) if at is None else at
            raise InputError(
                f"the structure differs from the template at character {at} of the emptied text: "
                f"{skeleton[at:at + 20]!r} instead of {self.skeleton[at:at + 20]!r}"
            )
        return DecodedConformer(molecule_with_positions(self.canonical_smiles, positions), self.canonical_smiles)


def build_template(smiles: str, profile: FormatProfile) -> ConformerTemplate:
    """InputError (naming the SMILES) for an invalid SMILES; UnsupportedError for a dative bond."""
    canonical = canonicalize_smiles(smiles)
    layout = enriched_layout(canonical, profile)
    copies = list(layout.copies)
    copies[0] = profile.conformer_open + copies[0]
    copies[-1] = copies[-1] + profile.conformer_close
    segments: list[Segment] = [Copy(copies[0])]
    for copy in copies[1:]:
        segments += [Hole(profile.hole_grammar), Copy(copy)]
    segments.append(EndOfSequence())
    return ConformerTemplate(
        canonical_smiles=canonical.smiles,
        profile=profile.name,
        prompt=profile.prompt_text(canonical.smiles),
        segments=tuple(segments),
        num_atoms=len(layout.atoms),
    )
