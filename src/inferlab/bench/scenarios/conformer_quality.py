"""Scenario `conformer-quality`: do the fast paths give the conformers the model's own sampling gives? One cell
is one system (a backend and its knobs: the engine constrained with the bf16 or the FP8 KV cache, the engine
unconstrained, transformers unconstrained or with the seeds' Python processor, ETKDG itself as the ceiling),
scored on the same molecules against the same references, at several sampling seeds.

Protocol (../shared/docs/CONFORMERS.md, "Quality anchors": torsional-diffusion's):
1. Molecules: the first `num_molecules` of `molecules_file` that pass the selection and fit the context
   (molecules.py, as the other conformer scenarios), each once (by canonical SMILES).
2. References: K = `num_references` ETKDGv3 conformers per molecule with `reference_seed` (not the training
   data's seed), embedded once per run directory and shared by every cell (conformer_quality_references.py);
   a molecule RDKit cannot embed is left out of every cell alike, and listed.
3. Generation: `num_generations` (0: 2K) per molecule and seed, each request with its own seed (a function of
   the sampling seed and the request) and output bound (molecules.py's: the template's skeleton plus each
   hole's longest), at `temperature` / `top_p` / `top_k`. An untimed warm-up call on the first molecule first,
   then one timed call per seed over every molecule (the backend batches as it does best).
4. Scoring, in a process pool over (seed, molecule) (conformer_quality_scores.py): every output read strictly
   (ConformerTemplate.check); the valid ones' stereo against the input's specified stereo; the heavy-atom RMSD
   matrix (GetBestRMS) against the references, read at every threshold and the curve's grid in one pass:
   COV-R / COV-P strictly below each threshold, AMR-R / AMR-P; an invalid output is a miss (COV-P counts
   every generation asked for), a molecule with no valid output has coverage 0.
5. Figures per seed (means and medians over molecules), and per figure its spread over seeds (mean, std,
   min, max): the row's `quality`. With `subset_molecules` the same over the first N molecules
   (`quality_on_subset`): the set a slow system runs on (`on_subset_only`), so every system can be compared
   with it on the same molecules. The valid conformers of each seed are written to
   RUN_DIR/conformer-quality/<cell key>/seed-<s>.sdf (`inferlab conformers evaluate` reads them against the
   references' SDF).
"""

from __future__ import annotations

import zlib
from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import TOKENIZER_KNOB, Knob, dtype_knob
from inferlab.bench.scenarios.base import CellContext, Scenario
from inferlab.bench.scenarios.conformer_quality_scores import CURVE_THRESHOLDS, molecule_tasks, summarise
from inferlab.bench.scenarios.molecules import SELECTION_KNOBS, validate_selection
from inferlab.errors import ConfigError, InputError

NAME = "conformer-quality"
TOKENS_PER_HEAVY_ATOM = 24  # a fixed4 conformer with the qwen3-chem tokenizer (CONFORMERS.md)

KNOBS = (
    Knob("num_molecules", int, 100, "the first N molecules of the file that pass the selection and fit", minimum=1),
    Knob("molecules_file", str, "", "a .smi/.csv of molecules ('' = RDKit's NCI first_5K.smi)"),
    *SELECTION_KNOBS,
    Knob("context", int, 2048, "positions a molecule's prompt + longest conformer may use (selection)", minimum=16),
    Knob("num_references", int, 8, "K: ETKDG reference conformers per molecule", minimum=1),
    Knob("num_generations", int, 0, "generations per molecule and seed (0 = 2K)", minimum=0),
    Knob("reference_seed", int, 1001, "ETKDG seed of the references (another than the training data's)", minimum=0),
    Knob("seed", int, 1, "the first sampling seed", minimum=0),
    Knob("num_seeds", int, 3, "sampling seeds seed, seed + 1, ...: every figure's spread is over these", minimum=1),
    Knob("temperature", float, 1.0, "sampling temperature (0 = greedy)", minimum=0.0),
    Knob("top_p", float, 1.0, "nucleus sampling threshold (1.0 disables)", minimum=0.0),
    Knob("top_k", int, 0, "top-k filter (0 disables; the seeds sampled with 50)", minimum=0),
    Knob("thresholds", str, "0.75,1.25", "coverage thresholds in Angstrom, comma-separated (RMSD strictly below)"),
    Knob("subset_molecules", int, 0, "also summarise the first N molecules, the set a slow system runs on (0 = none)",
         minimum=0),
    Knob("on_subset_only", bool, False, "generate for the first subset_molecules molecules only (a slow system)"),
    Knob("stereo_mirror", bool, False, "a conformer of the wrong hand is scored as its mirror image where that has "
         "the input's stereo (the pipeline's --stereo-mirror; False: the model's own stereo)"),
    Knob("stereo_retries", int, 0, "times a valid conformer of the wrong stereo is sampled again with another seed "
         "(the pipeline's --stereo-retries; the last attempt is kept)", minimum=0),
    Knob("profile", str, "v3-fixed4", "conformer format profile",
         choices=("v3-fixed4", "v3-stripped", "v2-fixed4", "v2-stripped")),
    dtype_knob(),
    TOKENIZER_KNOB,
    Knob("workers", int, 0, "processes for ETKDG and scoring (0 = one per CPU core)", minimum=0),
    Knob("warmup", int, 1, "untimed calls on the first molecule before the timed ones", minimum=0),
    Knob("device", str, "auto", "where to run: auto picks cuda when available", choices=("auto", "cuda", "cpu")),
    Knob("cpu_threads", int, 0, "torch intra-op threads (0 = torch's default)", minimum=0),
)


def thresholds_of(c: dict[str, Any]) -> tuple[float, ...]:
    """The `thresholds` knob as Angstrom values; ConfigError naming the knob for a bad one."""
    try:
        values = tuple(float(part) for part in c["thresholds"].split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or not all(v > 0 for v in values):
        raise ConfigError(f"thresholds={c['thresholds']!r}: give Angstrom values > 0, comma-separated, e.g. "
                          "--set thresholds=0.75,1.25")
    return values


def generations_of(c: dict[str, Any]) -> int:
    return c["num_generations"] or 2 * c["num_references"]


def molecules_run(c: dict[str, Any]) -> int:
    """How many molecules the cell generates for (at most: a molecule RDKit cannot embed is left out)."""
    return c["subset_molecules"] if c["on_subset_only"] else c["num_molecules"]


def validate(cell: Cell) -> None:
    c = cell.config
    validate_selection(c)
    thresholds_of(c)
    if not 0.0 < c["top_p"] <= 1.0:
        raise ConfigError(f"top_p={c['top_p']} must be in (0, 1]; use 1.0 to disable top-p")
    if c["temperature"] == 0 and c["num_seeds"] > 1:
        raise ConfigError("temperature=0 (greedy) gives every seed the same conformers; set a temperature > 0 or "
                          "num_seeds=1")
    if c["subset_molecules"] > c["num_molecules"]:
        raise ConfigError(f"subset_molecules={c['subset_molecules']} is above num_molecules={c['num_molecules']}; "
                          "the subset is the first molecules of the set")
    if c["on_subset_only"] and not c["subset_molecules"]:
        raise ConfigError("on_subset_only needs subset_molecules=N (the first N molecules)")
    if c["stereo_retries"] and (cell.backend == "etkdg" or c["temperature"] == 0):
        raise ConfigError("stereo_retries samples a wrong-stereo conformer again: it needs a model (not etkdg) and a "
                          "temperature > 0")
    if c["stereo_mirror"] and cell.backend == "etkdg":
        raise ConfigError("stereo_mirror repairs a model's wrong-handed conformer; ETKDG embeds the input's stereo: "
                          "leave stereo_mirror off for etkdg")
    if cell.backend == "etkdg" and c["seed"] <= c["reference_seed"] < c["seed"] + c["num_seeds"]:
        raise ConfigError(f"the etkdg system's seeds {c['seed']}..{c['seed'] + c['num_seeds'] - 1} include "
                          f"reference_seed={c['reference_seed']}: it would score the references against themselves")
    assert cell.model is not None
    model_refs.check_text_model(cell.model, c["tokenizer"], NAME)


def system_label(backend: str | None, config: dict[str, Any]) -> str:
    """What a row's system is, in words (rows of every status: the report names unavailable ones too)."""
    if backend == "inferlab":
        if config.get("constraint") == "off":
            return "engine, unconstrained"
        kv = "fp8" if config.get("kv_dtype") == "fp8" else {"bfloat16": "bf16", "float16": "fp16"}.get(
            config.get("dtype"), config.get("dtype"))
        mirror = " + mirror" if config.get("stereo_mirror") else ""
        retries = f" + {config['stereo_retries']} stereo retries" if config.get("stereo_retries") else ""
        return f"engine, constrained, {kv} KV{mirror}{retries}"
    if backend == "hf":
        mirror = " + mirror" if config.get("stereo_mirror") else ""
        return ("transformers + the seeds' Python processor" if config.get("processor") == "python"
                else "transformers, unconstrained") + mirror
    if backend == "etkdg":
        return "ETKDG, another seed (the ceiling)"
    return str(backend)


def estimate_s(cell: Cell, accelerator: bool) -> float:
    """Rough seconds (budgets, not figures). Per cell ~12 s of process, imports, molecules and references;
    scoring ~1.5 ms per output read and ~0.2 ms per RMSD pair, over 16 cores (2 here). GPU: the engine ~15 s
    of start-up, then ~300k tok/s (a ~10M-parameter model on 256 rows); transformers ~10 ms per decode step
    plus ~6 us per row (its cache grows by concatenation) and, with the Python processor, ~60 us per row and
    step (its loop and a device read per row; the committed H200 rows of qwen3-0.6b gave 60-250 us with the
    full vocabulary), each call as long as its longest row (the output bound, ~1.6x a conformer, when a row
    never writes EOS; the processor's skeleton otherwise); ETKDG ~40 ms per conformer per core. CPU (tiny
    models): ~250 tok/s for the engine and transformers alike."""
    c = cell.config
    molecules, generations = molecules_run(c), generations_of(c)
    atoms = 16 if 0 < c["max_heavy_atoms"] <= 30 else 27 if c["min_heavy_atoms"] >= 20 else 20
    per_seed = molecules * generations
    requests = per_seed * c["num_seeds"] + generations * c["warmup"]
    cores = 16 if accelerator else 2
    scoring = 3.0 + requests * (c["num_references"] * 2e-4 + 1.5e-3) / cores
    fixed = 12.0 + scoring
    if cell.backend == "etkdg":
        return fixed + requests * 0.04 / cores
    tokens = requests * atoms * TOKENS_PER_HEAVY_ATOM
    if c["stereo_retries"]:  # ~4 ms per output judged in the cell's process; retries ~half the tokens again
        fixed += requests * 4e-3
        tokens *= 1.5
    if not accelerator:
        return fixed + 5.0 + tokens / 250.0
    if cell.backend == "inferlab":
        return fixed + 15.0 + tokens / 300_000.0
    rows = c.get("batch_size") or per_seed
    calls = -(-per_seed // rows) * c["num_seeds"] + c["warmup"]
    python = c.get("processor") == "python"
    steps = (1.4 if python else 1.6) * atoms * TOKENS_PER_HEAVY_ATOM  # the longest row of a call
    step_s = 0.010 + rows * (6e-6 + (60e-6 if python else 0.0))
    return fixed + 5.0 + calls * steps * step_s


def request_seed(seed: int, request_id: str) -> int:
    """A request's own sampling seed: the cell's sampling seed and the request, mixed."""
    return zlib.crc32(f"{seed}/{request_id}".encode()) | (seed << 32)


def quality_requests(molecules: list[Any], generations: int, sampling: Any, seed: int, tag: str = "") -> list[Any]:
    """`generations` requests per molecule, ids `<tag>s<seed>/<molecule>#<j>`, each with its own seed and the
    molecule's output bound."""
    import dataclasses

    from inferlab.bench.backends.base import ConformerConstraint
    from inferlab.types import Request

    out = []
    for index, m in enumerate(molecules):
        for j in range(generations):
            rid = f"{tag}s{seed}/{index}#{j}"
            out.append(Request(id=rid, prompt_ids=m.prompt_ids, constraint=ConformerConstraint(m.smiles, m.template, index, j),
                               sampling=dataclasses.replace(sampling, max_new_tokens=m.max_output_tokens,
                                                            seed=request_seed(seed, rid))))
    return out


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    import torch

    from inferlab.bench.backends import get_backend
    from inferlab.bench.backends.base import QualitySpec
    from inferlab.bench.devices import peak_memory, reset_peak_memory, resolve_device, torch_dtype
    from inferlab.bench.scenarios.base import completed
    from inferlab.bench.scenarios.conformer_quality_references import reference_set
    from inferlab.bench.scenarios.conformer_quality_scores import score_all
    from inferlab.bench.scenarios.decode_traffic import count_generated
    from inferlab.bench.scenarios.molecules import load_molecules, model_positions, molecule_file, molecule_selection
    from inferlab.bench.timing import device_synchronizer, timed
    from inferlab.models.tokenizer_loading import load_hf_tokenizer
    from inferlab.types import SamplingParams
    from inferlab.workloads.conformers.chemistry.profiles import get_profile

    c = cell.config
    assert ctx.model_path is not None and cell.backend is not None
    if c["cpu_threads"]:
        torch.set_num_threads(c["cpu_threads"])
    device = resolve_device(c["device"])
    sync = device_synchronizer(device)
    profile = get_profile(c["profile"])
    tokenizer = load_hf_tokenizer(ctx.model_path)
    thresholds, generations = thresholds_of(c), generations_of(c)
    found = load_molecules(molecule_file(c["molecules_file"]), c["num_molecules"], profile, tokenizer,
                           min(c["context"], model_positions(ctx.model_path)), molecule_selection(c))
    unique = _first_of_each(found.molecules)
    references = reference_set(ctx.run_dir, unique, c["num_references"], c["reference_seed"], c["workers"])
    evaluated = [m for m in unique if m.template.canonical_smiles in references.conformers]
    subset = evaluated[: c["subset_molecules"]] if c["subset_molecules"] else []
    run_on = subset if c["on_subset_only"] else evaluated
    if not run_on:
        raise InputError(f"RDKit could not embed references for any of the {len(unique)} molecules "
                         f"({'; '.join(list(references.failed.values())[:2])}); choose other molecules")

    sampling = SamplingParams(temperature=c["temperature"], top_p=c["top_p"], top_k=c["top_k"])
    backend = get_backend(cell.backend, NAME).create(dict(c), QualitySpec(profile.name))
    reset_peak_memory(device)
    with timed(sync) as load:
        backend.load(ctx.model_path, device, torch_dtype(c["dtype"]))
    with timed(sync) as prepare:
        backend.prepare(quality_requests(run_on, 1, sampling, 0))
    seeds = list(range(c["seed"], c["seed"] + c["num_seeds"]))
    warmups, calls, outputs = [], [], {}
    with torch.no_grad():
        for _ in range(c["warmup"]):
            with timed(sync) as t:
                completed(backend.generate(quality_requests(run_on[:1], generations, sampling, seeds[0], "warm-")))
            warmups.append(t.seconds)
        for seed in seeds:
            requests = quality_requests(run_on, generations, sampling, seed)
            with timed(sync) as t:
                results = completed(backend.generate(requests))
                by_id = {r.id: r for r in results}
                outputs[seed] = [by_id[r.id].token_ids for r in requests]
                retried = _stereo_retries(backend, requests, outputs[seed], run_on, generations, c, tokenizer, profile,
                                          seed)
            tokens = sum(count_generated(outputs[seed], backend.eos_token_ids))
            calls.append({"seed": seed, "generate_s": t.seconds, "output_tokens": tokens,
                          "output_tokens_per_s": tokens / t.seconds, "generations_per_s": len(requests) / t.seconds,
                          **retried})
    extra = _backend_extra(ctx, backend)
    memory = peak_memory(device)
    backend.close()

    with timed(sync) as scoring:
        tasks = [task for seed in seeds
                 for task in molecule_tasks(seed, run_on, outputs[seed], generations, references.conformers, tokenizer,
                                            backend.eos_token_ids, profile.name, thresholds + CURVE_THRESHOLDS,
                                            c["stereo_mirror"])]
        scores = score_all(tasks, c["workers"])
    files = _write_generated(ctx.run_dir / NAME / cell.key, seeds, run_on, scores)
    metrics: dict[str, Any] = {  # the backend's own figures first: the scenario's win
        **extra,
        **memory,
        "system": system_label(cell.backend, c),
        "molecules_requested": c["num_molecules"],
        "molecules_evaluated": len(evaluated),
        "molecules_run": len(run_on),
        "run_on": (f"the first {len(run_on)} of the {len(evaluated)} molecules (on_subset_only)" if c["on_subset_only"]
                   else f"all {len(evaluated)} molecules"),
        "molecules_duplicate": len(found.molecules) - len(unique),
        "molecules_without_references": sorted(references.failed),
        "molecules_source": found.source,
        "molecules_selection": found.selection.describe(),
        "mean_heavy_atoms": sum(m.template.num_atoms for m in run_on) / max(len(run_on), 1),
        "references_per_molecule": c["num_references"],
        "generations_per_molecule": generations,
        "thresholds": list(thresholds),
        "seeds": seeds,
        "sampling": {"temperature": c["temperature"], "top_p": c["top_p"], "top_k": c["top_k"]},
        "references_file": str(references.path),
        "references_embed_s": references.embed_s,
        "generated_files": files,
        "load_s": load.seconds,
        "prepare_s": prepare.seconds,
        "warmup_s": warmups,
        "calls": calls,
        "scoring_s": scoring.seconds,
        "invalid_examples": [reason for s in scores for reason in s.reasons][:3],
        **summarise(scores, seeds, list(range(len(run_on))), thresholds, calls),
    }
    if subset and not c["on_subset_only"]:
        metrics["quality_on_subset"] = summarise(scores, seeds, list(range(len(subset))), thresholds, calls)["quality"]
        metrics["subset_molecules"] = len(subset)
    if c["on_subset_only"]:
        ctx.warn(f"run on the first {len(run_on)} of {len(evaluated)} molecules (on_subset_only): compare it with the "
                 "other systems' quality_on_subset")
    if references.failed:
        ctx.warn(f"{len(references.failed)} molecule(s) left out: RDKit could not embed their references")
    return metrics


def _stereo_retries(backend: Any, requests: list[Any], outputs: list[list[int]], molecules: list[Any],
                    generations: int, c: dict[str, Any], tokenizer: Any, profile: Any, seed: int) -> dict[str, Any]:
    """Up to c["stereo_retries"] rounds: each valid output of the wrong stereo sampled again (request id
    `<id>@retry<n>`, its own seed), its output replaced by the new attempt's (the last attempt stays, as the
    pipeline keeps it). `outputs` is updated in place; returns the rounds' counts ({} without retries). The
    call's seconds include the retries (its rate is what the system costs); its output tokens count the kept
    attempts, stereo_retry_output_tokens the retries' own."""
    import dataclasses

    from inferlab.bench.scenarios.base import completed
    from inferlab.bench.scenarios.conformer_quality_scores import wrong_stereo
    from inferlab.bench.scenarios.decode_traffic import count_generated

    if not c["stereo_retries"]:
        return {}
    attempts, retry_tokens = [], 0
    judged = range(len(outputs))  # each round judges the outputs the last one replaced
    for round_ in range(1, c["stereo_retries"] + 1):
        wrong = [i for i in judged
                 if wrong_stereo(molecules[i // generations].template, outputs[i], tokenizer, backend.eos_token_ids,
                                 profile.name, c["stereo_mirror"])]
        if not wrong:
            break
        again = []
        for i in wrong:
            rid = f"{requests[i].id}@retry{round_}"
            again.append(dataclasses.replace(requests[i], id=rid, sampling=dataclasses.replace(
                requests[i].sampling, seed=request_seed(seed, rid))))
        by_id = {r.id: r for r in completed(backend.generate(again))}
        for i, request in zip(wrong, again):
            outputs[i] = by_id[request.id].token_ids
        attempts.append(len(wrong))
        retry_tokens += sum(count_generated([outputs[i] for i in wrong], backend.eos_token_ids))
        judged = wrong
    return {"stereo_retry_attempts": attempts, "stereo_retry_output_tokens": retry_tokens}


def _first_of_each(molecules: Any) -> list[Any]:
    """Each molecule once (by canonical SMILES), in file order."""
    seen: set[str] = set()
    unique = []
    for m in molecules:
        if m.template.canonical_smiles not in seen:
            seen.add(m.template.canonical_smiles)
            unique.append(m)
    return unique


def _backend_extra(ctx: CellContext, backend: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    ctx.add_backend_metrics(extra, backend)
    return extra


def _write_generated(folder: Any, seeds: list[int], molecules: list[Any], scores: list[Any]) -> list[str]:
    """The valid conformers of each seed as an SDF (keyed like the references): seed-<s>.sdf."""
    import shutil

    from rdkit import Chem

    from inferlab.workloads.conformers.chemistry.sdf import ConformerSdfWriter

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    paths = []
    for seed in seeds:
        path = folder / f"seed-{seed}.sdf"
        with ConformerSdfWriter(path) as writer:
            for s in scores:
                if s.seed == seed:
                    m = molecules[s.molecule]
                    for k, binary in enumerate(s.conformers):
                        writer.write(Chem.Mol(binary), m.id, m.template.canonical_smiles, k)
        if not path.exists():
            path.write_text("")
        paths.append(str(path))
    return paths


SCENARIO = Scenario(
    NAME, "conformer quality of a system against ETKDG references (COV-R/P, AMR-R/P at several thresholds, "
    "validity, stereo) over several sampling seeds",
    KNOBS, run, validate, estimate_s, uses_backends=True,
    headline_metric="coverage_recall", higher_is_better=True, default_timeout_s=540.0, recommendable=False,
    workload_knobs=("num_molecules", "molecules_file", "min_heavy_atoms", "max_heavy_atoms", "assign_stereo",
                    "num_references", "num_generations", "reference_seed", "temperature", "top_p", "top_k",
                    "thresholds", "subset_molecules", "on_subset_only", "profile"),
)
