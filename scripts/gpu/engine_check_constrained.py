"""engine_check parts on constrained generation through the Engine (Request.constraint on the device).

constrained        tiny random checkpoints (qwen3-chem tokenizer and the built-in Llama-3-style one), bf16,
                   CUDA graphs, 16 slots: conformer templates of small NCI molecules (more requests than
                   slots: refills and compaction) with greedy / T=1 / top-k+top-p / min-p, beside
                   unconstrained rows. Every constrained output must pass the template's check and decode
                   with RDKit to the input's graph; the unconstrained rows must equal an unconstrained-only
                   run; greedy constrained tokens must be equal with and without CUDA graphs.
constrained_speed  qwen3-0.6b (qwen3-chem tokenizer), NCI molecules x 2 conformers at batch 256, T=1 and
                   top-p 1.0 (issue 4's acceptance setting): constrained tok/s vs the same engine
                   unconstrained with each request's output length fixed to its constrained length
                   (target >= 0.9x); validity of every output; the one-time constraint set-up and the
                   host-side template + compile time per molecule.
"""

from __future__ import annotations

import os
import time
from typing import Any

PROFILE = "v3-fixed4"


def nci_molecules(count: int, max_atoms: int) -> list[str]:
    """The first `count` molecules of RDKit's NCI set with at most `max_atoms` heavy atoms whose zero-filled
    encoding decodes to the same graph (the format's one ambiguity, a hypervalent [I], is left out)."""
    from rdkit import RDConfig

    from inferlab.errors import InputError, UnsupportedError
    from inferlab.workloads.conformers.chemistry.decode import decode_generation
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.smiles import canonical_smiles
    from inferlab.workloads.conformers.chemistry.template import build_template

    profile, chosen = get_profile(PROFILE), []
    with open(os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")) as f:
        for line in f:
            smiles = line.split()[0]
            try:
                template = build_template(smiles, profile)
            except (InputError, UnsupportedError):
                continue
            filled = template.fill(["0.0000,0.0000,0.0000"] * template.num_atoms)
            if template.num_atoms <= max_atoms and decode_generation(
                filled, profile
            ).canonical_smiles == canonical_smiles(smiles):
                chosen.append(smiles)
                if len(chosen) == count:
                    break
    return chosen


def conformer_requests(engine, molecules: list[str], per_molecule: int, samplings: list[dict]):
    """[(request, template, smiles)], the template compiled once per molecule and shared by its conformers."""
    from inferlab.constraints.program import compile_program
    from inferlab.types import Request, SamplingParams
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.template import build_template

    out = []
    for i, smiles in enumerate(molecules):
        template = build_template(smiles, get_profile(PROFILE))
        program = compile_program(template.segments, engine.tokenizer)
        prompt = tuple(template.prompt_ids(engine.tokenizer))
        for j in range(per_molecule):
            sampling = dict(samplings[(i * per_molecule + j) % len(samplings)], seed=7919 * i + j)
            request = Request(
                id=f"m{i}-{j}", prompt_ids=prompt, constraint=program, sampling=SamplingParams(**sampling)
            )
            out.append((request, template, smiles))
    return out


def check_output(result, template, smiles: str) -> str | None:
    """None when the output is a valid conformer of `smiles`, else why not."""
    from inferlab.workloads.conformers.chemistry.decode import decode_generation
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.smiles import canonical_smiles

    if result.finish_reason != "eos":
        return f"finish_reason {result.finish_reason} ({result.error})"
    try:
        template.check(result.text, get_profile(PROFILE))
        decoded = decode_generation(result.text, get_profile(PROFILE))
    except Exception as e:  # the decoder's InputError names the problem
        return f"{type(e).__name__}: {e}"
    if decoded.canonical_smiles != canonical_smiles(smiles):
        return f"decoded {decoded.canonical_smiles} != {canonical_smiles(smiles)}"
    return None


SAMPLINGS = [
    dict(temperature=0.0),
    dict(temperature=1.0),
    dict(temperature=1.0, top_k=50, top_p=0.9),
    dict(temperature=0.8, min_p=0.05),
]


def part_constrained(ctx) -> dict[str, Any]:
    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Request, SamplingParams

    res: dict[str, Any] = {}
    molecules = nci_molecules(6 if ctx.quick else 40, 12)
    for preset in ("tiny-qwen3", "tiny"):
        path = ctx.checkpoint(preset)
        tokens: dict[bool, list] = {}
        for graphs in [False] if not ctx.cuda else [True, False]:
            engine = Engine(
                EngineConfig(
                    model=path,
                    device=str(ctx.device),
                    max_slots=4 if ctx.quick else 16,
                    max_seq_len=512,
                    cuda_graphs=graphs,
                    decode_steps_per_sync=8,
                    gemm="cublas",
                )  # fmt: skip
            )
            cases = conformer_requests(engine, molecules, 1, SAMPLINGS)
            free = [
                Request(id=f"f{i}", prompt_ids=(11 + i, 12, 13), sampling=SamplingParams(max_new_tokens=40, seed=i))
                for i in range(4)
            ]
            alone = [r.token_ids for r in engine.generate(free)]
            mixed = [c[0] for c in cases[:2]] + free + [c[0] for c in cases[2:]]
            results = {r.id: r for r in engine.generate(mixed)}
            problems = {}
            for request, template, smiles in cases:
                problem = check_output(results[request.id], template, smiles)
                if problem:
                    problems[request.id] = f"{smiles}: {problem}"
            free_equal = [results[r.id].token_ids for r in free] == alone
            tokens[graphs] = [results[c[0].id].token_ids for c in cases if c[0].sampling.temperature == 0.0]
            key = f"{preset} graphs={graphs}"
            res[key] = {
                "constrained": len(cases),
                "invalid": problems,
                "unconstrained_rows_equal": free_equal,
                "row_moves": engine.stats.row_moves,
                "constraint_setup_s": engine.stats.constraint_setup_s,
            }
            ok = not problems and free_equal
            ctx.row(
                "constrained",
                f"{key}: valid of {len(cases)}, free rows equal",
                f"{len(cases) - len(problems)}, {free_equal}",
                "ok" if ok else f"FAIL {list(problems.values())[:1]}",
            )
            engine.close()
            ctx.free()
        if len(tokens) == 2:
            same = tokens[True] == tokens[False]
            res[f"{preset} greedy graph == eager"] = same
            ctx.row("constrained", f"{preset}: greedy tokens, graph == eager", same, "ok" if same else "FAIL")
    return res


def part_constrained_speed(ctx) -> dict[str, Any]:
    from engine_check_speed import timed  # beside this file (engine_check.py puts the folder on sys.path)

    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Request, SamplingParams

    res: dict[str, Any] = {}
    preset = "tiny-qwen3" if ctx.quick else "qwen3-0.6b"
    n_molecules, batch, max_atoms, max_len = (4, 8, 6, 512) if ctx.quick else (128, 256, 30, 1400)
    t0 = time.perf_counter()
    molecules = nci_molecules(n_molecules, max_atoms)
    res["molecule_scan_s"] = time.perf_counter() - t0
    path = ctx.checkpoint(preset)
    engine = Engine(EngineConfig(model=path, device=str(ctx.device), max_slots=batch, max_seq_len=max_len))
    t0 = time.perf_counter()
    cases = conformer_requests(engine, molecules, 2, [dict(temperature=1.0, top_p=1.0)])
    res["template_compile_ms_per_molecule"] = 1e3 * (time.perf_counter() - t0) / len(molecules)
    warm = engine.generate([c[0] for c in cases[:4]])  # builds the constraint runtime and its graphs
    res["constraint_setup_s"] = engine.stats.constraint_setup_s
    res["warm_ok"] = all(r.ok for r in warm)
    requests = [c[0] for c in cases]
    constrained, results = timed(ctx, engine, requests, keep_results=True)
    invalid = [r.id for r, (_, template, smiles) in zip(results, cases) if check_output(r, template, smiles)]
    constrained["invalid"] = len(invalid)
    lengths = [len(r.token_ids) for r in results]
    free = [
        Request(
            id=r.id,
            prompt_ids=r.prompt_ids,
            sampling=SamplingParams(
                temperature=1.0, max_new_tokens=n, min_new_tokens=n, ignore_eos=True, seed=r.sampling.seed
            ),
        )
        for r, n in zip(requests, lengths)
    ]
    unconstrained = timed(ctx, engine, free)
    ratio = constrained["tok_per_s"] / unconstrained["tok_per_s"]
    res |= {
        "constrained": constrained,
        "unconstrained": unconstrained,
        "ratio": ratio,
        "mean_output_tokens": sum(lengths) / len(lengths),
    }
    ctx.row(
        "constrained_speed",
        f"{preset} B={batch} {len(molecules)} molecules x 2: valid",
        f"{len(results) - len(invalid)} of {len(results)}",
        "ok" if not invalid else "FAIL",
    )
    ctx.row(
        "constrained_speed",
        f"{preset} B={batch}: constrained vs unconstrained tok/s",
        f"{constrained['tok_per_s']:,.0f} vs {unconstrained['tok_per_s']:,.0f}",
        ("ok " if ratio >= 0.9 else "FAIL < 0.9 ") + f"({ratio:.3f}x; {constrained['ms_per_step']:.2f} vs "
        f"{unconstrained['ms_per_step']:.2f} ms/step)",
    )
    ctx.row(
        "constrained_speed",
        "constraint set-up s | template+compile ms/molecule",
        f"{res['constraint_setup_s']:.1f} | {res['template_compile_ms_per_molecule']:.1f}",
    )
    engine.close()
    ctx.free()
    return res
