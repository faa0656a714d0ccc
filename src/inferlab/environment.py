"""The environment recorded in every result row (GPU, driver, versions, commit, host, date) and the check
that the GPU is otherwise idle before a cell starts.

`python -m inferlab.environment` prints the environment as JSON: the launcher runs it once per
launch in a child, so the parent never imports torch. Owns nvidia-smi queries; does not time anything.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

_REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], timeout: float = 10.0) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


COMMIT_ENV_VAR = "INFERLAB_GIT_COMMIT"  # for copies of a checkout whose .git is missing or stale (the device)


def git_commit(repo: Path = _REPO_ROOT) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout the package runs from. $INFERLAB_GIT_COMMIT wins when set (dirty
    unknown): a copied tree may carry a stale .git whose HEAD is not the code that runs. (None, None) when
    neither is known."""
    if os.environ.get(COMMIT_ENV_VAR):
        return os.environ[COMMIT_ENV_VAR], None
    commit = _run(["git", "-C", str(repo), "rev-parse", "HEAD"])
    if commit is None:
        return None, None
    status = _run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"])
    return commit, bool(status)


def capture_environment() -> dict[str, Any]:
    """Everything that decides what a number means. Imports torch (run it in a child process)."""
    import torch

    env: dict[str, Any] = {
        "gpu": None,
        "gpu_count": 0,
        "driver": None,
        "cuda": torch.version.cuda,
        "cudnn": None,
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "triton": _version("triton"),
        "flash_attn": _version("flash-attn") or _version("flash_attn"),
        "python": platform.python_version(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "hostname": socket.gethostname(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if torch.cuda.is_available():
        env["gpu_count"] = torch.cuda.device_count()
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cudnn"] = torch.backends.cudnn.version()
        env["driver"] = (_run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]) or "").split("\n")[0] or None
    env["commit"], env["dirty"] = git_commit()
    return env


def gpu_processes() -> list[dict[str, Any]] | None:
    """Compute processes on the GPUs now, or None where nvidia-smi is absent (no check possible)."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = _run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"])
    if out is None:
        return None
    processes = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            processes.append({"pid": int(parts[0]), "name": parts[1], "used_memory_mib": parts[2]})
    return processes


def gpu_idle_check() -> tuple[dict[str, Any], str | None]:
    """({checked, processes}, warning or None). Run before a cell starts, so any process is foreign."""
    processes = gpu_processes()
    if processes is None:
        return {"checked": False, "processes": []}, None
    warning = None
    if processes:
        names = ", ".join(f"{p['name']} (pid {p['pid']}, {p['used_memory_mib']} MiB)" for p in processes)
        warning = f"GPU not idle when the cell started: {names}"
    return {"checked": True, "processes": processes}, warning


if __name__ == "__main__":
    json.dump(capture_environment(), sys.stdout)
