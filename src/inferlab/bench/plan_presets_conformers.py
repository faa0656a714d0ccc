"""Named plans for the conformer job as users run it (estimates on one H100; `inferlab bench --list`):

- conformer-pipeline (~14-16 min: run it as two or three device calls, below): drug-sized molecules (the first
  400 NCI first_5K molecules with 20-50 heavy atoms, stereo assigned where NCI leaves it open so stereo
  agreement is measured), K = 8 (3,200 conformers, ~2.1M tokens), qwen3-0.6b random weights with the
  qwen3-chem tokenizer, top-p 1.0 at T = 1:
  (a) `inferlab conformers generate` end to end (scenario conformer-pipeline, a subprocess timed by its
      wall clock, `--max-slots 256` as the engine-alone cells), twice per cell (the second run into a
      fresh output shows the start-up cache), with the bf16 and the fp8 KV cache (--kv-dtype fp8;
      without the fp8 cache in the build that cell is an `unavailable` row);
  (b) the engine alone on the same molecules (scenario constrained, backend inferlab, 256 rows, all
      3,200 requests in one call): constrained, and unconstrained at the constrained pass's lengths;
  (c) the CLI with its defaults (`--max-num-seqs auto`, `--kv-dtype auto`: no speed flag) and the engine
      alone at its best measured settings (FP8 KV, 1024 rows, constrained);
  (d) the engine alone with forced tokens in bulk (forced_run_tokens 4: engine/forced_runs.py) at 256 rows
      bf16 (budgets of an eighth, the default, and a quarter of the rows) and at 1024 rows FP8, beside (b)
      and (c)'s one token per step;
  (the fp8 cache's own speed: preset engine-speed; its error against the bf16 cache: tests/gpu/test_fp8_cache_gpu.py).
  Split into device calls of < 9 minutes with `--only`:
      inferlab bench --preset conformer-pipeline --only scenario=conformer-pipeline   # ~6 min
      inferlab bench --preset conformer-pipeline --only scenario=constrained          # ~6 min
  (both into the same run directory: a rerun skips finished cells).
- conformer-soak (~2 min on qwen3-chem-mini, below): the
  constraint under load, 20,000 constrained conformers of drug-sized molecules (all 1,250 NCI first_5K
  molecules with 20-50 heavy atoms, K = 8) at top-p 1.0, half at T = 1 and half at T = 1.5 (a hotter
  model tries harder to break out), through the CLI; each cell reads its SDF and JSONL back
  independently: `invalid_total` (strict-invalid rows, unreadable records, graph mismatches, missing
  rows or records) must be 0; stereo agreement is reported. The model is `qwen3-chem-mini` (qwen3-0.6b's
  vocabulary, tokenizer and heads in 4 narrow layers): the constraint sees the same programs and the
  same logits width and only the logits' source is smaller, so 20,000 conformers cost ~1 device minute
  instead of ~7 (`--model qwen3-0.6b` runs the same soak on the big shape).
- scale-out (~5 min, on a machine with two GPUs: nvidia-h100-x2 / h200-x2): the CLI scaled out with
  `--gpus 1` and `--gpus 2` (one worker process per GPU, inferlab.scale) on 384 drug-sized molecules x 8:
  end-to-end and steady (the slowest worker's generation) rates; 2 over 1 GPU is the scaling. A worker
  killed and the rerun: tests/gpu/test_scale_gpu.py.
- conformer-quality (~11 min on an H200 by the lab's estimates, 15 cells): the reference model's quality,
  system by system (scenario conformer-quality): the engine constrained with the bf16 and the fp8 KV cache
  (bf16 also with the pipeline's remedies for a wrong-stereo conformer: its mirror image, the CLI's default,
  free; and the mirror with 3 stereo retries, at their cost),
  the engine unconstrained, transformers unconstrained and with the seeds' Python processor (on the first 16
  molecules: its per-row loop is the slowest system; the other rows also report those 16), and ETKDG with
  other seeds (the ceiling), each at 3 sampling seeds, at T = 1 top-p 1.0 and at the seeds' T = 1 top-k 50;
  the first 100 molecules of <= 30 heavy atoms of the reference model's held-out molecules (reference_model/
  held_out.smi: NCI and the two ChEMBL lists in turn), stereo assigned where the SMILES leaves it open (so
  that every stereocentre is scored), K = 8 ETKDG references (seed 1001), 16 generations each. The model is
  the reference checkpoint (src/inferlab/workloads/conformers/reference_model; a checkout or wheel without
  its weights falls back to qwen3-chem-mini's random weights and RDKit's NCI set: a smoke run, in which only
  the constrained systems write valid conformers); `--model PATH` runs any checkpoint.
"""

from __future__ import annotations

from typing import Any

_DRUG_SIZED = {"min_heavy_atoms": 20, "max_heavy_atoms": 50, "assign_stereo": True, "profile": "v3-fixed4",
               "dtype": "bfloat16"}
_JOB = {**_DRUG_SIZED, "num_molecules": 400, "num_conformers": 8}
_CLI = {"scenario": "conformer-pipeline", "model": "qwen3-0.6b"}
_ENGINE = {"scenario": "constrained", "model": "qwen3-0.6b", "backend": "inferlab"}
# all 3,200 requests in one Engine.generate call on 256 rows (refilled continuously), one timed pass
_ENGINE_SET = {**_JOB, "sampling": "top-p", "max_requests": 0, "batch_size": 3200, "slots": 256, "min_repeats": 1}


CONFORMER_PIPELINE: dict[str, Any] = {
    "name": "conformer-pipeline",
    "description": "400 drug-sized NCI molecules x 8 on qwen3-0.6b: the CLI end to end (bf16 and fp8 KV, two runs "
                   "each for the start-up cache) beside the engine alone, constrained and unconstrained",
    "timeout_s": 540,
    "sweep": [
        # 256 rows as the engine-alone cells, so the two differ by the pipeline around the engine only
        {**_CLI, "set": {**_JOB, "temperature": 1.0, "top_p": 1.0, "runs": 2, "max_slots": 256,
                         "kv_dtype": ["auto", "fp8"]}},
        {**_ENGINE, "set": {**_ENGINE_SET, "constraint": ["on", "off"]}},
        # the CLI with no speed flag (--max-num-seqs auto, --kv-dtype auto) beside the engine alone at the best
        # the engine alone at its best measured settings (FP8 KV, 1024 rows): what the defaults are compared with
        {**_CLI, "set": {**_JOB, "temperature": 1.0, "top_p": 1.0, "runs": 2, "max_slots": 0, "kv_dtype": "auto"}},
        {**_ENGINE, "set": {**_ENGINE_SET, "constraint": "on", "slots": 1024, "kv_dtype": "fp8"}},
        # forced tokens in bulk (engine/forced_runs.py) beside one token per step, at 256 rows bf16 and the best
        {**_ENGINE, "set": {**_ENGINE_SET, "constraint": "on", "forced_run_tokens": 4,
                            "forced_run_budget": [0.25, 0.125]}},
        {**_ENGINE, "set": {**_ENGINE_SET, "constraint": "on", "slots": 1024, "kv_dtype": "fp8",
                            "forced_run_tokens": 4}},
    ],
}

CONFORMER_SOAK: dict[str, Any] = {
    "name": "conformer-soak",
    "description": "20,000 constrained conformers (1,250 drug-sized NCI molecules x 8, at T=1 and T=1.5) through the "
                   "CLI, every output read back independently: invalid_total must be 0",
    "timeout_s": 540,
    "sweep": [
        {**_CLI, "model": "qwen3-chem-mini",
         "set": {**_DRUG_SIZED, "num_molecules": 1250, "num_conformers": 8, "temperature": [1.0, 1.5],
                         "top_p": 1.0, "runs": 1, "verify_sdf": True}},
    ],
}

SCALE_OUT: dict[str, Any] = {
    "name": "scale-out",
    "description": "384 drug-sized NCI molecules x 8 on qwen3-0.6b through the CLI on 1 and on 2 GPUs (--gpus): "
                   "end-to-end and steady rates (needs two GPUs)",
    "timeout_s": 420,
    "sweep": [
        {**_CLI, "set": {**_JOB, "num_molecules": 384, "temperature": 1.0, "top_p": 1.0, "runs": 1, "max_slots": 256,
                         "gpus": [1, 2]}},
    ],
}

def _quality_model() -> str:
    from inferlab.workloads.conformers.reference_model import FOLDER

    return str(FOLDER) if (FOLDER / "model.safetensors").is_file() else "qwen3-chem-mini"


def _quality_molecules() -> str:
    from inferlab.workloads.conformers.reference_model import HELD_OUT_FILE

    return str(HELD_OUT_FILE) if HELD_OUT_FILE.is_file() else ""  # '' = RDKit's NCI first_5K.smi


_QUALITY = {"scenario": "conformer-quality", "model": _quality_model()}
_QUALITY_SET = {"num_molecules": 100, "molecules_file": _quality_molecules(), "max_heavy_atoms": 30,
                "assign_stereo": True,
                "num_references": 8, "reference_seed": 1001, "seed": 1, "num_seeds": 3, "subset_molecules": 16,
                "temperature": 1.0, "top_p": 1.0, "top_k": [0, 50], "dtype": "bfloat16", "profile": "v3-fixed4"}

CONFORMER_QUALITY: dict[str, Any] = {
    "name": "conformer-quality",
    "description": "conformer quality (COV-R/P, AMR-R/P at 0.75 and 1.25 A, validity, stereo; 3 seeds) of the engine "
                   "constrained (bf16, fp8 KV) and unconstrained, transformers with and without the seeds' processor, "
                   "and ETKDG, on 100 molecules x 16 against 8 ETKDG references",
    "timeout_s": 540,
    "sweep": [  # most telling first: a budget that runs out leaves the slow transformers cells for the next call
        {**_QUALITY, "backend": "inferlab", "set": {**_QUALITY_SET, "constraint": "on", "kv_dtype": "auto"}},
        {**_QUALITY, "backend": "inferlab", "set": {**_QUALITY_SET, "constraint": "off"}},
        {**_QUALITY, "backend": "inferlab", "set": {**_QUALITY_SET, "constraint": "on", "kv_dtype": "fp8"}},
        # the pipeline's remedies for the model's stereo (its default --stereo-mirror, free; with --stereo-retries
        # 3, at their cost): what a user gets
        {**_QUALITY, "backend": "inferlab", "set": {**_QUALITY_SET, "constraint": "on", "kv_dtype": "auto",
                                                    "stereo_mirror": True, "stereo_retries": [0, 3]}},
        {**_QUALITY, "backend": "etkdg", "set": {**_QUALITY_SET, "top_k": 0}},
        # no warm-up call (a full-length call of transformers): its first seed's speed includes lazy initialisation
        {**_QUALITY, "backend": "hf", "set": {**_QUALITY_SET, "processor": "none", "warmup": 0}},
        {**_QUALITY, "backend": "hf", "set": {**_QUALITY_SET, "processor": "python", "on_subset_only": True,
                                              "warmup": 0}},
    ],
}
