"""Named steering vectors, loaded once from a safetensors file (or built from tensors): the host-side set
whose entries requests name (`Steer(layer, vector="name", scale)`), for the engine and for the
transformers fallback alike.

A file holds one tensor per entry: [hidden] (one vector, usable at any layer) or [layers, hidden] (a vector
per decoder layer, as contrastive activation addition produces them; a request at layer L takes row L).
Every entry is checked once here (a floating dtype, finite values, one hidden size for the whole set) and
kept in fp32 on the host. Not here: putting vectors on the device (engine/steering.py) and checking one
request's entries against a model (engine/steering.py `resolve_steering`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import torch

from inferlab.errors import InputError


class SteeringVectors:
    def __init__(self, entries: Mapping[str, torch.Tensor], source: str = "tensors") -> None:
        if not entries:
            raise InputError(f"{source} holds no steering vectors; give at least one tensor")
        self.source = source
        self._entries: dict[str, torch.Tensor] = {}
        sizes = set()
        for name, tensor in entries.items():
            if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
                kind = tensor.dtype if isinstance(tensor, torch.Tensor) else type(tensor).__name__
                raise InputError(f"steering vector {name!r} in {source} is {kind}; store a floating-point tensor")
            if tensor.dim() not in (1, 2) or tensor.shape[-1] == 0:
                raise InputError(
                    f"steering vector {name!r} in {source} has shape {tuple(tensor.shape)}; store [hidden] or "
                    "[layers, hidden] (one row per decoder layer)"
                )
            values = tensor.detach().to("cpu", torch.float32).contiguous()
            bad = (~torch.isfinite(values)).nonzero()
            if len(bad):
                raise InputError(f"steering vector {name!r} in {source} has a NaN or inf at {bad[0].tolist()}")
            sizes.add(values.shape[-1])
            self._entries[name] = values
        if len(sizes) > 1:
            raise InputError(f"the steering vectors in {source} have different hidden sizes {sorted(sizes)}")
        self.hidden_size = sizes.pop()

    @classmethod
    def load(cls, path: str | Path) -> "SteeringVectors":
        """Every tensor of a safetensors file, by its key."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        p = Path(path)
        if not p.is_file():
            raise InputError(f"steering vectors file {p} does not exist")
        try:
            tensors = load_file(str(p))
        except (SafetensorError, OSError, ValueError) as e:
            raise InputError(f"{p} is not a readable safetensors file: {e}") from None
        return cls(tensors, source=str(p))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def entry(self, name: str) -> torch.Tensor:
        """The stored tensor ([hidden] or [layers, hidden], fp32, CPU)."""
        return self._entries[name]

    def vector(self, name: str, layer: int, num_layers: int) -> torch.Tensor:
        """Entry `name` for decoder layer `layer` (already resolved to 0..num_layers-1): [hidden] fp32."""
        if name not in self._entries:
            raise InputError(f"no steering vector named {name!r} in {self.source}; it has {', '.join(self.names)}")
        values = self._entries[name]
        if values.dim() == 1:
            return values
        if values.shape[0] != num_layers:
            raise InputError(
                f"steering vector {name!r} in {self.source} has {values.shape[0]} rows (one per layer) but the "
                f"model has {num_layers} decoder layers; use vectors made for this model"
            )
        return values[layer]
