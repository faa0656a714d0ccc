"""A checkpoint's rotary embedding parameters (RopeSpec), read from one rope parameter dict of config.json.
Shared by the Llama reading (config.py) and the Gemma one (gemma_config.py: a rope per layer type); the
rope arithmetic is rope.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferlab.errors import ConfigError, UnsupportedError


@dataclass(frozen=True)
class RopeSpec:
    """Rotary embedding parameters; `rope_type` selects the inverse-frequency rule in models/rope.py."""

    theta: float
    rope_type: str = "default"
    # The scaling parameters of the chosen type (e.g. llama3: factor, low_freq_factor, high_freq_factor,
    # original_max_position_embeddings), as a sorted tuple of pairs so the spec stays hashable.
    params: tuple[tuple[str, Any], ...] = ()
    partial_rotary_factor: float = 1.0

    def param(self, name: str) -> Any:
        for key, value in self.params:
            if key == name:
                return value
        raise ConfigError(f"rope_type {self.rope_type!r} needs {name!r} in the config's rope parameters")


def rope_from_parameters(params: dict[str, Any], cfg: dict[str, Any], default_theta: float) -> RopeSpec:
    """A RopeSpec from one rope parameter dict ({rope_type | type, rope_theta, scaling parameters...})."""
    params = dict(params)
    rope_type = params.pop("rope_type", None) or params.pop("type", None) or "default"
    theta = params.pop("rope_theta", cfg.get("rope_theta", default_theta))
    partial = params.pop("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise UnsupportedError(
            f"partial_rotary_factor={partial} is not supported by the inferlab engine"
        )
    return RopeSpec(theta=float(theta), rope_type=str(rope_type), params=tuple(sorted(params.items())))
