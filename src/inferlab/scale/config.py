"""What a scaled run is asked to do: the job (workload, input, output, workload parameters) and how to
spread it (workers, launcher, shards, retries, Ray and Slurm options). Frozen and validated here; the
number of workers for `--gpus all` is resolved later, where the devices are known (launchers).

Not here: planning (plan.py), running (coordinator.py, launchers/), the workloads (workloads/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferlab.errors import ConfigError, InputError

ALL_GPUS = "all"
DEVICES = ("cuda", "cpu")  # cpu: N CPU worker processes (tests, or a CPU-only workload)


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # None: start a local Ray; "auto" or "ray://host:10001": join a cluster
    cpus_per_task: int = 1

    def __post_init__(self) -> None:
        if self.cpus_per_task < 1:
            raise ConfigError(f"--ray-cpus-per-task={self.cpus_per_task} must be >= 1")


@dataclass(frozen=True)
class SlurmOptions:
    partition: str | None = None
    account: str | None = None
    time_min: int = 240  # wall-clock limit of one array task
    cpus_per_task: int = 8
    mem_gb: float | None = None
    array_parallelism: int | None = None  # most array tasks running at once (None: all shards)
    logs: str | None = None  # submitit's folder (on a shared filesystem); None: <work dir>/slurm
    cluster: str | None = None  # submitit cluster: None = detect (slurm); "local" for tests
    result_wait_s: float = 15.0  # how long an ended job's result file may lag on a slow shared filesystem

    def __post_init__(self) -> None:
        if self.time_min < 1:
            raise ConfigError(f"--slurm-time={self.time_min} minutes must be >= 1")
        if self.cpus_per_task < 1:
            raise ConfigError(f"--slurm-cpus-per-task={self.cpus_per_task} must be >= 1")
        if self.mem_gb is not None and self.mem_gb <= 0:
            raise ConfigError(f"--slurm-mem-gb={self.mem_gb} must be > 0")
        if self.array_parallelism is not None and self.array_parallelism < 1:
            raise ConfigError(f"--slurm-array-parallelism={self.array_parallelism} must be >= 1")
        if self.cluster not in (None, "slurm", "local"):
            raise ConfigError(f"submitit cluster {self.cluster!r} is not one of slurm, local")
        if self.result_wait_s < 0:
            raise ConfigError(f"result_wait_s={self.result_wait_s} must be >= 0")


@dataclass(frozen=True)
class ScaleConfig:
    """How to spread one job. `workers` is a count or "all" (every GPU the launcher can see)."""

    workers: int | str = ALL_GPUS
    launcher: str = "local"
    device: str = "cuda"
    num_shards: int | None = None  # None: one shard per worker
    retries: int = 1  # extra attempts of a failed shard (each resumes its own output)
    work_dir: str | None = None  # None: <output>.scale beside the output
    poll_s: float = 0.5  # how often shard outputs are counted and workers checked
    ray: RayOptions = field(default_factory=RayOptions)
    slurm: SlurmOptions = field(default_factory=SlurmOptions)

    def __post_init__(self) -> None:
        if isinstance(self.workers, str):
            if self.workers != ALL_GPUS:
                raise ConfigError(f"--gpus {self.workers!r} must be a number or 'all'")
        elif self.workers < 1:
            raise ConfigError(f"--gpus {self.workers} must be >= 1 (or 'all')")
        if self.device not in DEVICES:
            raise ConfigError(f"scale-out device {self.device!r} must be one of {', '.join(DEVICES)}")
        if self.num_shards is not None and self.num_shards < 1:
            raise ConfigError(f"--num-shards {self.num_shards} must be >= 1")
        if self.retries < 0:
            raise ConfigError(f"--retries {self.retries} must be >= 0")
        if self.poll_s <= 0:
            raise ConfigError(f"poll interval {self.poll_s} s must be > 0")

    def work_dir_for(self, output: str | Path) -> Path:
        return Path(self.work_dir) if self.work_dir else Path(str(output) + ".scale")


@dataclass(frozen=True)
class ScaleJob:
    """One workload run: `params` are the workload adapter's JSON-ready settings (see workloads/)."""

    workload: str
    input: str
    output: str
    params: dict[str, Any]

    def __post_init__(self) -> None:
        if not Path(self.input).is_file():
            raise InputError(f"--input {self.input} does not exist; pass the input file")
        if Path(self.input).resolve() == Path(self.output).resolve():
            raise ConfigError("--input and --output are the same file; choose another --output")
