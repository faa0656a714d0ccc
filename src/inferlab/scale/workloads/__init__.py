"""The workloads that scale out: name -> "module:ATTRIBUTE" of its adapter (one file each; see
inferlab.scale.adapter). Imported on first use, so a worker loads only its own workload's libraries.

The engine's conformer pipeline joins with one line, once it exists (see conformers.py):
    "conformers": "inferlab.workloads.conformers.scale:CONFORMERS",
"""

from __future__ import annotations

WORKLOADS: dict[str, str] = {
    "classify": "inferlab.scale.workloads.classify:CLASSIFY",
    "hidden-states": "inferlab.scale.workloads.hidden_states:HIDDEN_STATES",
    "generate": "inferlab.scale.workloads.generate:GENERATE",
    "etkdg-conformers": "inferlab.scale.workloads.etkdg:ETKDG",
}
