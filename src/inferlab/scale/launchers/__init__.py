"""How a shard runs, by launcher name (one file each). Each entry builds a launcher from the scale
configuration and the work folder; see base.Launcher for what they do."""

from __future__ import annotations

from collections.abc import Callable

from inferlab.scale.config import ScaleConfig
from inferlab.scale.launchers.base import Launcher
from inferlab.scale.workdir import WorkDir


def _local(config: ScaleConfig, work: WorkDir) -> Launcher:
    from inferlab.scale.launchers.local import LocalLauncher

    return LocalLauncher(config, work)


def _ray(config: ScaleConfig, work: WorkDir) -> Launcher:
    from inferlab.scale.launchers.ray_tasks import RayLauncher

    return RayLauncher(config, work)


def _slurm(config: ScaleConfig, work: WorkDir) -> Launcher:
    from inferlab.scale.launchers.slurm import SlurmLauncher

    return SlurmLauncher(config, work)


LAUNCHERS: dict[str, Callable[[ScaleConfig, WorkDir], Launcher]] = {"local": _local, "ray": _ray, "slurm": _slurm}
