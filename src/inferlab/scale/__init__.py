"""Scale-out: one workload over every GPU of a host (local worker processes), a Ray cluster, or a Slurm
job array, with nothing lost when a worker dies.

The input is split into shards balanced by estimated tokens (partition.py); each shard runs the
workload's own resumable function in its own process with its own GPU and its own output (worker.py,
launchers/); a failed shard is retried or reported; the outputs are merged in input order at the end
(order.py, the adapters in workloads/). The work folder's manifest makes a rerun reuse finished shards
and resume the others (workdir.py, plan.py). coordinator.run_scaled ties it together.
"""

from inferlab.scale.config import RayOptions, ScaleConfig, ScaleJob, SlurmOptions
from inferlab.scale.coordinator import run_scaled
from inferlab.scale.report import ScaleReport

__all__ = ["RayOptions", "ScaleConfig", "ScaleJob", "ScaleReport", "SlurmOptions", "run_scaled"]
