"""Scenario `conformer-pipeline`: `inferlab conformers generate` end to end, run as a user runs it.

The cell picks its molecules exactly as the `constrained` scenario does (constrained_inputs.py: the
first `num_molecules` of the file that pass the selection and fit the context, e.g. NCI's drug-sized
molecules with stereo assigned), writes them as a .smi file, and runs the CLI on it in a subprocess
(`python -m inferlab.cli conformers generate ... --summary-json`): the command's wall clock gives the
end-to-end figures (tok/s, molecules/s), its summary the engine's own (start-up, prefill share of the
generation, generation-phase tok/s, validity, graph match, stereo agreement, time the engine waited for
the pipeline). With `runs=2` the same job runs again into a fresh output: its engine start-up
(`rerun_engine_start_s`) shows what the start-up cache saves. With `verify_sdf` the first run's files
are read back independently (conformer_output_check.py): K rows per molecule, strict-invalid rows, SDF
records readable and of the input's graph, stereo of the written coordinates; `invalid_total` must be 0.
With `gpus` N the command scales out (`--gpus N`, one worker per GPU, inferlab.scale): the figures then
come from the run's scale report (conformer_pipeline_scale.py): end to end and steady (the slowest
worker's run) rates; the `scale-out` preset compares 1 and 2 GPUs.

The engine alone on the same molecules is the `constrained` scenario with backend `inferlab` (the
`conformer-pipeline` preset puts both in one run).
"""

from __future__ import annotations

from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.bench.scenarios.constrained import SELECTION_KNOBS, validate_selection
from inferlab.errors import ConfigError

TOKENS_PER_HEAVY_ATOM = 24  # a fixed4 conformer with the qwen3-chem tokenizer (CONFORMERS.md: ~640 for drug-sized)
GPU_TOKENS_PER_S = 38_000.0  # the engine on this job, qwen3-0.6b on an H100 (issue 11: 35.9k engine-only)

KNOBS = (
    Knob("num_molecules", int, 400, "the first N molecules of the file that pass the selection and fit", minimum=1),
    Knob("num_conformers", int, 8, "conformers per molecule, K (--num-conformers)", minimum=1),
    Knob("context", int, 2048, "positions a molecule's prompt + longest conformer may use (selection)", minimum=16),
    Knob("molecules_file", str, "", "a .smi/.csv of molecules ('' = RDKit's NCI first_5K.smi)"),
    *SELECTION_KNOBS,
    Knob("temperature", float, 1.0, "sampling temperature (--temperature); 0 = greedy", minimum=0.0),
    Knob("top_p", float, 1.0, "nucleus sampling (--top-p)", minimum=0.0),
    Knob("profile", str, "v3-fixed4", "conformer format profile",
         choices=("v3-fixed4", "v3-stripped", "v2-fixed4", "v2-stripped")),
    Knob("dtype", str, "bfloat16", "weights and activations (--dtype)", choices=("bfloat16", "float16", "float32")),
    Knob("kv_dtype", str, "auto", "KV cache (--kv-dtype; fp8 needs a build and GPU with the fp8 cache)",
         choices=("auto", "fp8")),
    Knob("max_slots", int, 0, "engine rows (--max-slots); 0 = as memory allows", minimum=0),
    Knob("gpus", int, 0, "--gpus N: workers with one GPU each (inferlab.scale); 0 = one process, no scale-out",
         minimum=0),
    Knob("stereo_retries", int, 0, "--stereo-retries", minimum=0),
    Knob("runs", int, 2, "1, or 2: the same job again into a fresh output (start-up with the cache)", choices=(1, 2)),
    Knob("verify_sdf", bool, True, "read the first run's SDF and JSONL back independently (validity, graph, stereo)"),
    Knob("tokenizer", str, "", "tokenizer folder for building a preset model ('' = the preset's own)"),
    Knob("device", str, "auto", "--device", choices=("auto", "cuda", "cpu")),
    Knob("seed", int, 0, "--seed", minimum=0),
    Knob("cpu_threads", int, 0, "torch threads of the CLI process (OMP_NUM_THREADS; 0 = torch's default)", minimum=0),
)


def validate(cell: Cell) -> None:
    c = cell.config
    validate_selection(c)
    if not 0.0 < c["top_p"] <= 1.0:
        raise ConfigError(f"top_p={c['top_p']} must be in (0, 1]; use 1.0 to disable top-p")
    if c["stereo_retries"] and c["temperature"] == 0:
        raise ConfigError("stereo_retries with temperature=0 (greedy) would redraw the same conformer; "
                          "set a temperature > 0 or stereo_retries=0")
    assert cell.model is not None
    model_refs.check_text_model(cell.model, c["tokenizer"], "conformer-pipeline")


def estimate_s(cell: Cell, accelerator: bool) -> float:
    """Rough seconds. GPU: ~10 s for the cell and its molecule selection, per run ~8 s of CLI start and
    ~20 s of engine start-up (less with a start-up cache) plus the tokens at ~38k tok/s (drug-sized
    molecules, ~27 heavy atoms, ~24 tokens each; qwen3-chem-mini, 4 narrow layers, ~10x that, where judging
    by two processes at ~2 ms per conformer sets the pace); the independent check ~2 ms per conformer. CPU
    (tiny models): ~250 tokens/s."""
    c = cell.config
    atoms = 27 if c["min_heavy_atoms"] >= 20 else 12
    tokens = c["num_molecules"] * c["num_conformers"] * atoms * TOKENS_PER_HEAVY_ATOM * (1 + 0.5 * bool(c["stereo_retries"]))
    conformers = c["num_molecules"] * c["num_conformers"]
    rate, start = (GPU_TOKENS_PER_S * (10 if cell.model == "qwen3-chem-mini" else 1), 28.0) if accelerator else (250.0, 15.0)
    check = 0.002 * conformers if c["verify_sdf"] else 0.0
    return 10.0 + c["runs"] * (start + max(tokens / rate, conformers * 0.001)) + check


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    from inferlab.bench.scenarios.conformer_pipeline_run import measure_pipeline

    return measure_pipeline(cell, ctx)


SCENARIO = Scenario(
    name="conformer-pipeline",
    description="`inferlab conformers generate` end to end (a subprocess, wall clock): tok/s, molecules/s, start-up, "
                "validity, stereo agreement, and an independent reading of the SDF",
    knobs=KNOBS,
    run=run,
    validate=validate,
    estimate_s=estimate_s,
    headline_metric="output_tokens_per_s",
    higher_is_better=True,
    uses_backends=False,
    uses_model=True,
    default_timeout_s=540.0,
    workload_knobs=("num_molecules", "num_conformers", "molecules_file", "min_heavy_atoms", "max_heavy_atoms",
                    "assign_stereo", "temperature", "top_p", "profile", "stereo_retries"),
)
