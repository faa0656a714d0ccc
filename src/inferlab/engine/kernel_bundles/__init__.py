"""Triton kernels compiled on the GPUs we run, shipped with the package: one bundle per GPU model here.

A fresh machine's first start-up compiles every kernel its warm-up launches, behind a dry run of the warm-up
that holds the GIL beside the weights' load (docs/decisions.md "A fresh machine reads the package's Triton
kernels"), and on a cluster every new node is a fresh machine.
Triton keeps a compiled kernel in its disk cache under a hash of the kernel's source and specialisation, of
Triton itself (`triton_key`: its sources and libtriton) and of the backend (ptxas's version, the GPU's arch),
so a cache folder filled on one machine serves another whose Triton, ptxas and GPU are the same.

A bundle is such a folder, filled by the precompile of the flagship jobs (`python -m
inferlab.engine.kernel_bundles.build`, on the GPU), with a manifest (<gpu-slug>.json):
    identity  Triton's version and a hash of its triton_key(), ptxas's version, the GPU's name and compute
              capability, Python's major.minor (Triton 3.6 builds a launcher module per signature with it)
    records   the precompile records of those jobs (precompile_record.py): each key without its cache
              folder, and its kernels' files relative to the folder
and the folder's files in <gpu-slug>.tar.xz: each kernel's metadata, binary and file group, and the launcher
modules; the IR text Triton keeps beside them (ttir, ttgir, llir, ptx, the source) is left out, since a cache
hit reads only what its group names and Triton drops the group's missing members.

`install` is what the precompile thread asks first, beside the weights' load: on a GPU whose identity equals
the manifest's it unpacks the bundle into Triton's cache (a file already there is kept; each group file is
rewritten to name the new folder, since Triton's groups hold absolute paths) and says whether one of its
records has this start-up's key. If so nothing is left to compile: the engine records the precompile as
done and the warm-up reads every kernel from the cache. Otherwise the dry run compiles as before and finds
what the bundle holds in the cache (one read each instead of a compile). A bundle whose identity differs, or
`EngineConfig.shipped_kernels=False`, changes nothing. A record's key holds the engine's code fingerprint, so
an engine edited since the build takes the second path until the bundle is built again.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferlab.engine.gemm_plans import gpu_slug

log = logging.getLogger(__name__)

FORMAT = 1
BUNDLES_FOLDER = Path(__file__).parent  # the shipped files (package data: pyproject's package-data)
GROUP_PREFIX = "__grp__"  # Triton's file-group files: {"child_paths": {name: absolute path}}
KEPT_SUFFIXES = (".json", ".cubin", ".so")  # metadata and groups, the binary, launcher modules


def identity(device: Any) -> dict[str, Any] | None:
    """What decides whether this machine's Triton finds the bundle's files under the same hashes, or None
    where Triton does not say (another version's internals)."""
    import torch

    try:
        import triton
        from triton.backends.nvidia.compiler import get_ptxas_version
        from triton.runtime.cache import triton_key

        major, minor = torch.cuda.get_device_capability(device)
        ptxas = get_ptxas_version(major * 10 + minor).strip().splitlines()[-1]
        return {"gpu": torch.cuda.get_device_properties(device).name, "capability": [major, minor],
                "triton": triton.__version__, "triton_key": hashlib.sha256(triton_key().encode()).hexdigest()[:16],
                "ptxas": ptxas, "python": f"{sys.version_info.major}.{sys.version_info.minor}"}  # fmt: skip
    except Exception as e:  # noqa: BLE001  (Triton's internals move between versions)
        log.debug("shipped kernels: no identity for this machine's Triton (%s: %s)", type(e).__name__, e)
        return None


def record_key(key: dict[str, Any]) -> dict[str, Any]:
    """A precompile record's key without the machine's own cache folder (the bundle's records' form)."""
    return {k: v for k, v in key.items() if k != "triton_cache"}


@dataclass(frozen=True)
class Installed:
    exact: bool  # a record of the bundle has this start-up's key: every kernel the warm-up launches is in place
    kernels: int  # that record's kernels (0 unless exact)
    files: list[str]  # that record's files in Triton's cache, absolute ([] unless exact)
    written: int  # files the bundle added to the cache (the others were there already)
    seconds: float


def manifest_path(gpu: str, folder: Path = BUNDLES_FOLDER) -> Path:
    return folder / f"{gpu_slug(gpu)}.json"


def install(key: dict[str, Any], device: Any, cache_dir: str, folder: Path = BUNDLES_FOLDER) -> Installed | None:
    """The bundle of this GPU unpacked into Triton's cache folder `cache_dir` when its identity is this
    machine's (module docstring); None where there is none, it does not apply, or it cannot be read."""
    t = time.perf_counter()
    if os.environ.get("TRITON_CACHE_MANAGER"):
        return None  # another cache manager: its files are not this folder's
    path = manifest_path(key.get("gpu", ""), folder)
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
        if manifest.get("format") != FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}, expected {FORMAT}")
        mine = identity(device)
        if mine != manifest["identity"]:
            differs = sorted(k for k in set(mine or {}) | set(manifest["identity"])
                             if (mine or {}).get(k) != manifest["identity"].get(k))
            log.debug("shipped kernels: %s is for another machine (%s differ)", path.name, ", ".join(differs))
            return None
        written = unpack(path.with_name(manifest["archive"]), Path(cache_dir))
    except (OSError, ValueError, KeyError, TypeError, tarfile.TarError) as e:
        log.warning("shipped kernels: could not use %s (%s); the precompile compiles them", path, e)
        return None
    wanted = record_key(key)
    for entry in manifest["records"]:
        if entry["key"] == wanted:
            files = [str(Path(cache_dir) / rel) for rel in entry["files"]]
            if all(os.path.exists(f) for f in files):
                return Installed(True, entry["kernels"], files, written, time.perf_counter() - t)
    return Installed(False, 0, [], written, time.perf_counter() - t)


def unpack(archive: Path, cache_dir: Path) -> int:
    """The archive's `<hash>/<file>` members written into `cache_dir` where absent (each through a temporary
    file renamed into place, as Triton writes); groups rewritten to absolute paths. Returns files written."""
    written = 0
    with tarfile.open(archive, "r:xz") as tar:
        for member in tar:
            parts = Path(member.name).parts
            if not member.isfile() or len(parts) != 2 or any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"unexpected member {member.name!r} in {archive.name}")
            target = cache_dir / parts[0] / parts[1]
            if target.exists():
                continue
            data = tar.extractfile(member).read()
            if parts[1].startswith(GROUP_PREFIX):
                names = json.loads(data)["child_paths"]  # the bundle's groups name files of their own folder
                data = json.dumps({"child_paths": {n: str(target.parent / n) for n in names}}).encode()
            _write_atomically(target, data)
            written += 1
    return written


def _write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def pack(cache_dir: Path, records: list[dict[str, Any]], ident: dict[str, Any], folder: Path) -> Path:
    """Write <slug>.json and <slug>.tar.xz into `folder` from Triton's cache folder `cache_dir` and the
    precompile records made in it (start-up cache entries: {"key", "value": {"kernels", "files"}}).
    Returns the manifest's path."""
    cache_dir = cache_dir.resolve()
    members: dict[str, bytes] = {}
    for kernel_folder in sorted(p for p in cache_dir.iterdir() if p.is_dir()):
        kept = sorted(p for p in kernel_folder.iterdir() if p.is_file() and p.name.endswith(KEPT_SUFFIXES)
                      and not p.name.startswith("."))  # fmt: skip
        names = {p.name for p in kept}
        for p in kept:
            data = p.read_bytes()
            if p.name.startswith(GROUP_PREFIX):  # relative, and only the members shipped
                children = json.loads(data)["child_paths"]
                data = json.dumps({"child_paths": sorted(n for n in children if n in names)}).encode()
            members[f"{kernel_folder.name}/{p.name}"] = data
    shipped = []
    for entry in records:
        key, value = entry["key"], entry["value"]
        named = [str(Path(f).resolve().relative_to(cache_dir)) for f in value["files"]]
        files = [f for f in named if f in members]  # the IR text it also names is not shipped
        if not files:
            raise ValueError(f"a record names no file the cache folder holds: {named[:3]}")
        shipped.append({"key": record_key(key), "kernels": value["kernels"], "files": sorted(files)})
    slug = gpu_slug(ident["gpu"])
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"{slug}.tar.xz"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", preset=9) as tar:
        for name, data in sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(buffer.getvalue())
    manifest = {"format": FORMAT, "identity": ident, "archive": archive.name, "files": len(members),
                "records": sorted(shipped, key=lambda r: json.dumps(r["key"], sort_keys=True))}  # fmt: skip
    path = folder / f"{slug}.json"
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return path
