"""The workloads that scale out, by name (one adapter file each; see inferlab.scale.adapter).

The engine's conformer pipeline joins with one line, once it exists:
    WORKLOADS["conformers"] = conformer_adapter("conformers", run_conformer_shard, conformer_settings)
"""

from __future__ import annotations

from inferlab.scale.adapter import WorkloadAdapter
from inferlab.scale.workloads.classify import CLASSIFY
from inferlab.scale.workloads.etkdg import ETKDG
from inferlab.scale.workloads.generate import GENERATE
from inferlab.scale.workloads.hidden_states import HIDDEN_STATES

WORKLOADS: dict[str, WorkloadAdapter] = {a.name: a for a in (CLASSIFY, HIDDEN_STATES, GENERATE, ETKDG)}
