"""Workload settings as JSON: dataclass configs (ClassifyOptions, ModelLoadConfig, SamplingParams...)
to plain dicts for the manifest and the task files, and back, with nested dataclasses and tuples
restored from the field types. Not here: what the settings mean (the workloads)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, TypeVar

T = TypeVar("T")


def to_params(obj: Any) -> dict[str, Any]:
    """A dataclass instance as a JSON-ready dict (tuples become lists)."""
    return dataclasses.asdict(obj)


def from_params(cls: type[T], data: dict[str, Any]) -> T:
    """Rebuild `cls` from `to_params` output; the dataclass validates itself as usual."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        kwargs[f.name] = _restore(hints[f.name], data[f.name])
    return cls(**kwargs)


def _restore(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return from_params(hint, value)
    if typing.get_origin(hint) is tuple and isinstance(value, list):
        return tuple(value)
    for option in typing.get_args(hint):  # X | None and other unions: the first that fits
        if dataclasses.is_dataclass(option) and isinstance(value, dict):
            return from_params(option, value)
        if typing.get_origin(option) is tuple and isinstance(value, list):
            return tuple(value)
    return value
