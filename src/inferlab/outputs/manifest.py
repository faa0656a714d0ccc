"""Which job made an output: its command, the settings that change its results, a digest of each input
and the checkpoint's identity (models/checkpoint_identity.py: what is in the model folder, not its path),
recorded when the job starts and compared before a rerun resumes it.

A manifest from before checkpoint identities were recorded (no `checkpoint` field) resumes when everything
it does record matches (the guard logs that the weights could not be compared); the rewritten manifest
then records them.

The single-process commands keep theirs beside the output (`<output>.manifest.json`, guard.py); a scaled
run keeps the same facts in its work folder's manifest (scale/workdir.py) and the activation store in its
`run.json`: all three compare settings here, after a JSON round trip (a tuple in this run's settings
equals the list read back from the file), and name every setting that differs with both values.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_VERSION = 1


def json_ready(value: Any) -> Any:
    """`value` as it reads back from a JSON file: tuples become lists, paths and other objects strings."""
    return json.loads(json.dumps(value, default=str))


def file_sha256(path: str | Path, block: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while chunk := f.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def setting_changes(recorded: dict[str, Any], current: dict[str, Any], recorded_as: str = "before") -> list[str]:
    """One phrase per setting whose value differs ("num_conformers=1 before, 2 now"); nested settings are
    named by their path ("sampling.mode"). `name=` is how the CLI recognises a setting to name its flag."""
    old, new = _flat(json_ready(recorded)), _flat(json_ready(current))
    missing = object()
    return [f"{key}={_shown(old.get(key, missing))} {recorded_as}, {_shown(new.get(key, missing))} now"
            for key in sorted(old.keys() | new.keys()) if old.get(key, missing) != new.get(key, missing)]


def _flat(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _shown(value: Any) -> str:
    return "unset" if not isinstance(value, (str, int, float, bool, list, dict, type(None))) else repr(value)


@dataclass(frozen=True)
class JobManifest:
    command: str  # "conformers generate", "generate", ...
    settings: dict[str, Any]  # the settings that change the results (the model among them), JSON-ready
    inputs: dict[str, str] = field(default_factory=dict)  # flag -> SHA-256 of that input file
    checkpoint: dict[str, str] | None = None  # the model folder's file -> digest; None: not recorded
    version: int = MANIFEST_VERSION

    def to_json(self) -> dict[str, Any]:
        return json_ready(asdict(self))

    @staticmethod
    def from_json(data: Any) -> "JobManifest":
        """The manifest read from a file; ValueError when it is not one this version wrote."""
        if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
            raise ValueError(f"not a version-{MANIFEST_VERSION} job manifest")
        try:
            checkpoint = data.get("checkpoint")
            return JobManifest(str(data["command"]), dict(data["settings"]), dict(data["inputs"]),
                               None if checkpoint is None else dict(checkpoint))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"a job manifest without {e}") from None

    def differences(self, current: "JobManifest") -> list[str]:
        """What makes `current` another job than the one this manifest records (empty: the same job)."""
        if self.command != current.command:
            return [f"it was written by `inferlab {self.command}`, not `inferlab {current.command}`"]
        changed = [f"{flag} changed since (SHA-256 {self.inputs.get(flag, '-')[:12]}... then, "
                   f"{digest[:12]}... now)" for flag, digest in current.inputs.items()
                   if self.inputs.get(flag) != digest]
        if self.checkpoint is not None and current.checkpoint is not None and self.checkpoint != current.checkpoint:
            files = sorted(name for name in self.checkpoint.keys() | current.checkpoint.keys()
                           if self.checkpoint.get(name) != current.checkpoint.get(name))
            changed.append(f"the checkpoint in the --model folder is not the one it was made with ({', '.join(files)} "
                           "differ: other weights or config)")
        return changed + setting_changes(self.settings, current.settings, "then")
