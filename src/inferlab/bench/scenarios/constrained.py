"""Scenario `constrained`: conformers of real molecules generated under the conformer constraint through
a backend (backends of scenario `constrained`: `hf` = the seeds' HF generate + per-token Python
LogitsProcessor; the engine adds `inferlab`), measured the same way for every backend.

The scenario owns everything a comparison depends on (constrained_inputs.py): the molecules (the first
`num_molecules` of the file that fit the context), K requests per molecule, the measured prefix
(`max_requests`: the baseline is slow, so its rate may be measured on the first requests; the row says
how many of how many), the batches (longest first with `sort_by_length`), the sampling settings.
Protocol, as in `generate`: load, then `prepare` (the backend's host work for every measured request,
timed apart), a first call on the first batch stopped after `warmup_steps` decode steps with every shape
kept (compile, capture), its warm twin, then the timed passes over the measured batches. Tokens are
counted per row up to and including the first EOS; every output of the first pass is decoded and
checked strictly against its template (`valid_fraction`).
"""

from __future__ import annotations

import math
from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob, common_knobs
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.errors import ConfigError

SAMPLINGS = {  # name -> (do_sample, temperature, top_p, top_k)
    "greedy": (False, 1.0, 1.0, 0),
    "top-p": (True, 1.0, 1.0, 0),  # the seeds' production setting: T = 1, top-p 1.0 (pure sampling)
}

SELECTION_KNOBS = (  # shared with the conformer-pipeline scenario: the same molecules for both
    Knob("min_heavy_atoms", int, 0, "only molecules with at least this many heavy atoms (drug-sized: 20)", minimum=0),
    Knob("max_heavy_atoms", int, 0, "only molecules with at most this many heavy atoms (0 = no bound; drug-sized: 50)",
         minimum=0),
    Knob("assign_stereo", bool, False, "give unspecified stereocentres and double bonds a configuration (RDKit's first "
         "enumerated isomer), so stereo agreement is measured; NCI's SMILES specify none"),
)

KNOBS = (
    Knob("num_molecules", int, 1000, "the first N molecules of the file that fit the context", minimum=1),
    Knob("context", int, 2048, "positions a request may use (prompt + longest output), capped by the model's; "
         "2048 = the seeds' checkpoints", minimum=16),
    Knob("num_conformers", int, 2, "conformers (requests) per molecule, K", minimum=1),
    Knob("max_requests", int, 0, "measure only the first this many requests (molecule order); 0 = all N x K",
         minimum=0),
    Knob("batch_size", int, 32, "requests per generate call", minimum=1),
    Knob("sampling", str, "top-p", "greedy, or top-p 1.0 at temperature 1.0", choices=tuple(SAMPLINGS)),
    Knob("profile", str, "v3-fixed4", "conformer format profile",
         choices=("v3-fixed4", "v3-stripped", "v2-fixed4", "v2-stripped")),
    Knob("sort_by_length", bool, True, "batch requests of similar length, longest first (the seeds' PR #11)"),
    Knob("molecules_file", str, "", "a .smi/.csv of molecules ('' = RDKit's NCI first_5K.smi)"),
    *SELECTION_KNOBS,
    Knob("dtype", str, "bfloat16", "weights and activations", choices=("bfloat16", "float16", "float32")),
    Knob("tokenizer", str, "", "tokenizer folder for building a preset model ('' = the preset's own)"),
    Knob("warmup_steps", int, 16, "decode steps of each warm-up call (every shape kept); 0 = full length",
         minimum=0),
    *common_knobs(min_repeats=1, min_duration_s=0.0, warmup=1, repeats_help="timed passes over the measured requests"),
)


def measured_requests(c: dict[str, Any]) -> int:
    total = c["num_molecules"] * c["num_conformers"]
    return min(c["max_requests"], total) if c["max_requests"] else total


def molecule_selection(c: dict[str, Any]):
    from inferlab.bench.scenarios.constrained_inputs import MoleculeSelection

    return MoleculeSelection(c["min_heavy_atoms"], c["max_heavy_atoms"], c["assign_stereo"])


def validate_selection(c: dict[str, Any]) -> None:
    if c["max_heavy_atoms"] and c["max_heavy_atoms"] < c["min_heavy_atoms"]:
        raise ConfigError(f"max_heavy_atoms={c['max_heavy_atoms']} is below min_heavy_atoms={c['min_heavy_atoms']}; "
                          "raise it, or set 0 for no upper bound")


def validate(cell: Cell) -> None:
    c = cell.config
    validate_selection(c)
    measured = measured_requests(c)
    if measured % c["batch_size"]:
        raise ConfigError(
            f"{measured} measured requests (num_molecules x num_conformers, or max_requests) is not a multiple of "
            f"batch_size={c['batch_size']}: a short last batch changes shapes (a static cache recompiles) inside the "
            "timed loop; set max_requests to a multiple of batch_size")
    if c["warmup"] < 1:
        raise ConfigError("warmup=0: the first call carries compile and lazy initialisation; use warmup >= 1")
    assert cell.model is not None
    model_refs.check_text_model(cell.model, c["tokenizer"], "constrained")


def estimate_s(cell: Cell, accelerator: bool) -> float:
    """Rough seconds. GPU, HF baseline: ~12 s process, load and molecule set-up, a compile guess for static
    caches (~35 s for the Qwen3-0.6B shape), then the decode steps: a length-sorted batch runs as long as
    its longest row, ~520 steps for 32 NCI molecules and more for larger batches (x1.35 per doubling), at
    ~12 ms + 0.06 ms per row per step (BENCHMARKING.md: ~1,800 tok/s at batch 32 dynamic, ~10,000 at 256).
    GPU, the engine: ~45 s of process, molecules, engine start-up and warm-up, then the tokens (~24 per
    heavy atom; ~27 atoms for drug-sized selections, ~16 for NCI at large) at ~38k tok/s, one pass more
    for constraint=off (its untimed constrained pass). CPU (tiny models): ~4 ms + 0.3 ms per row per step."""
    from inferlab.bench.backends import backend_estimate_s

    own = backend_estimate_s(cell, accelerator)
    if own is not None:
        return own
    c = cell.config
    if accelerator and cell.backend == "inferlab":
        atoms = 27 if c["min_heavy_atoms"] >= 20 else 16
        passes = c["min_repeats"] + (c.get("constraint") == "off")
        return 45.0 + passes * measured_requests(c) * atoms * 24 / 38_000
    batches = measured_requests(c) // c["batch_size"]
    rows = c["batch_size"]
    steps = 520 * (1 + 0.35 * max(0.0, math.log2(rows / 32)))
    static = c.get("kv_cache") == "static"
    if accelerator:
        step_ms = (6.0 if static else 12.0) + 0.06 * rows
        fixed = 12.0 + (35.0 if c.get("compile") else 0.0)
    else:
        step_ms = 4.0 + 0.3 * rows
        fixed = 8.0
    return fixed + (batches * c["min_repeats"] * steps + 2 * c["warmup_steps"]) * step_ms / 1000


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    from inferlab.bench.scenarios.constrained_run import measure_constrained

    c = cell.config
    return measure_constrained(cell, ctx, SAMPLINGS[c["sampling"]], molecule_selection(c), measured_requests(c))


SCENARIO = Scenario(
    name="constrained",
    description="conformers of NCI molecules under the conformer constraint: tok/s, molecules/s, validity",
    knobs=KNOBS,
    run=run,
    validate=validate,
    estimate_s=estimate_s,
    headline_metric="output_tokens_per_s",
    higher_is_better=True,
    uses_backends=True,
    uses_model=True,
    default_timeout_s=600.0,
    # batch size and cache are serving choices: the baseline's best of them is what is compared
    workload_knobs=("num_molecules", "num_conformers", "max_requests", "sampling", "profile", "molecules_file",
                    "min_heavy_atoms", "max_heavy_atoms", "assign_stereo"),
)
