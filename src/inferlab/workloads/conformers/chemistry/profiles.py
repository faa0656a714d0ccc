"""Format profiles: every choice of the enriched-conformer text that differs between checkpoints.

A profile pins the atom descriptor style (v3: bare atoms wrapped `[C]`; v2: heteroatoms carry their
H count `[OH]`), the coordinate style (fixed4: `1.2500`; stripped: `1.25`), the hole grammar the
constraint compiler uses for one `<x,y,z>` block, the prompt template and the tags around a conformer.
Whether a BOS is prepended is the tokenizer's own setting (`add_special_tokens=True`), never the profile's.

This module owns the registry and the prompt text; descriptors.py and coordinates.py own the two styles.
It does not tokenise anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferlab.constraints.grammars import GRAMMARS
from inferlab.errors import ConfigError
from inferlab.workloads.conformers.chemistry.coordinates import COORDINATE_STYLES, CoordinateStyle
from inferlab.workloads.conformers.chemistry.descriptors import DESCRIPTOR_STYLES, DescriptorStyle


@dataclass(frozen=True)
class FormatProfile:
    name: str
    descriptor_style: str  # a key of descriptors.DESCRIPTOR_STYLES
    coordinate_style: str  # a key of coordinates.COORDINATE_STYLES
    description: str
    prompt_template: str = "[SMILES]{smiles}[/SMILES]"
    conformer_open: str = "[CONFORMER]"  # the generation starts with this tag
    conformer_close: str = "[/CONFORMER]"  # then the tokenizer's EOS

    def __post_init__(self) -> None:
        if self.descriptor_style not in DESCRIPTOR_STYLES:
            raise ConfigError(
                f"profile {self.name!r}: descriptor_style={self.descriptor_style!r} is unknown; "
                f"use one of {', '.join(DESCRIPTOR_STYLES)}"
            )
        if self.coordinate_style not in COORDINATE_STYLES:
            raise ConfigError(
                f"profile {self.name!r}: coordinate_style={self.coordinate_style!r} is unknown; "
                f"use one of {', '.join(COORDINATE_STYLES)}"
            )
        if "{smiles}" not in self.prompt_template:
            raise ConfigError(f"profile {self.name!r}: prompt_template must contain '{{smiles}}'")
        if GRAMMARS.get(self.hole_grammar) is None:
            raise ConfigError(f"profile {self.name!r}: hole grammar {self.hole_grammar!r} is not in grammars.GRAMMARS")

    @property
    def descriptors(self) -> DescriptorStyle:
        return DESCRIPTOR_STYLES[self.descriptor_style]

    @property
    def coordinates(self) -> CoordinateStyle:
        return COORDINATE_STYLES[self.coordinate_style]

    @property
    def hole_grammar(self) -> str:
        """Name of the grammar (constraints/grammars.py) of one block's content `x,y,z`."""
        return COORDINATE_STYLES[self.coordinate_style].grammar

    def prompt_text(self, canonical_smiles: str) -> str:
        return self.prompt_template.format(smiles=canonical_smiles)

    def wrap(self, enriched: str) -> str:
        """The text a model generates for one conformer (before EOS)."""
        return f"{self.conformer_open}{enriched}{self.conformer_close}"


PROFILES: dict[str, FormatProfile] = {
    p.name: p
    for p in [
        FormatProfile(
            "v3-fixed4", "v3", "fixed4", "current format: bare atoms `[C]`, `[O]`; always 4 decimals `1.2500`"
        ),
        FormatProfile(
            "v3-stripped",
            "v3",
            "stripped",
            "v3 descriptors with trailing zeros stripped (`1.25`, `0`): the data of the first Qwen checkpoints",
        ),
        FormatProfile(
            "v2-fixed4", "v2", "fixed4", "v2 descriptors (heteroatom H counts `[OH]`, `[NH2]`) with 4 decimals"
        ),
        FormatProfile(
            "v2-stripped",
            "v2",
            "stripped",
            "v2 descriptors with stripped coordinates: the geom_cartesian_v2 data of the Llama checkpoints",
        ),
    ]
}

DEFAULT_PROFILE = "v3-fixed4"


def get_profile(name: str) -> FormatProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(f"unknown conformer profile {name!r}; choose one of: {', '.join(PROFILES)}") from None
