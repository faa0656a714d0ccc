"""The workloads that scale out: name -> "module:ATTRIBUTE" of its adapter (one file each; see
inferlab.scale.adapter). Imported on first use, so a worker loads only its own workload's libraries."""

from __future__ import annotations

WORKLOADS: dict[str, str] = {
    "classify": "inferlab.scale.workloads.classify:CLASSIFY",
    "hidden-states": "inferlab.scale.workloads.hidden_states:HIDDEN_STATES",
    "generate": "inferlab.scale.workloads.generate:GENERATE",
    "etkdg-conformers": "inferlab.scale.workloads.etkdg:ETKDG",
    "conformers": "inferlab.scale.workloads.conformer_pipeline:CONFORMERS",
}
