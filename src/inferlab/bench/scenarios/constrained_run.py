"""The measured part of the `constrained` scenario (child process only): inputs -> backend -> timed
passes -> counted tokens, validity and the row's figures. See constrained.py for the protocol."""

from __future__ import annotations

import json
from typing import Any

from inferlab.bench.cells import Cell
from inferlab.bench.scenarios.base import CellContext


def _max_positions(model_dir: Any) -> int:
    config = json.loads((model_dir / "config.json").read_text())
    return int(config.get("text_config", config)["max_position_embeddings"])


def _check_outputs(requests: list, outputs: list[list[int]], eos: frozenset[int], tokenizer, profile) -> dict[str, Any]:
    """Validity of each output, decoded up to its first EOS, read twice: strictly by the template's check
    (`valid_fraction`), and by the plain decoder that knows nothing of the input, whose RDKit molecule must
    have the input's canonical SMILES, stereo included, with one block per atom (`graph_match_fraction`).
    Valid outputs of inputs with specified stereo also say whether their coordinates have it
    (`stereo_agreement`, workloads/conformers/chemistry/stereo.py). Keeps the first texts (cut to 300 characters)
    and the first reasons for the reader."""
    from inferlab.errors import InferlabError
    from inferlab.workloads.conformers.chemistry.decode import decode_generation
    from inferlab.workloads.conformers.pipeline.judge import stereo_fields

    valid, graph_matches, ended, reasons, samples = 0, 0, 0, [], []
    stereo_checked = stereo_matches = 0
    for request, ids in zip(requests, outputs):
        end = next((i for i, t in enumerate(ids) if t in eos), None)
        ended += end is not None
        text = tokenizer.decode(ids[:end] if end is not None else ids, skip_special_tokens=False)
        if len(samples) < 2:
            samples.append(text[:300])
        try:
            mol = request.template.check(text, profile).mol
            valid += 1
            stereo = stereo_fields(mol)["stereo_ok"]
            stereo_checked += stereo is not None
            stereo_matches += stereo is True
        except InferlabError as e:
            if len(reasons) < 3:
                reasons.append(f"{request.smiles}: {e}")
        try:
            graph_matches += decode_generation(text, profile).canonical_smiles == request.template.canonical_smiles
        except InferlabError:
            pass
    n = len(requests)
    return {"valid_fraction": valid / n, "valid_rows": valid, "checked_rows": n, "graph_match_fraction": graph_matches / n,
            "graph_match_rows": graph_matches, "ended_with_eos_fraction": ended / n,
            "stereo_checked": stereo_checked, "stereo_matches": stereo_matches,
            "stereo_agreement": stereo_matches / stereo_checked if stereo_checked else None,
            "invalid_examples": reasons, "sample_outputs": samples}


def measure_constrained(cell: Cell, ctx: CellContext, sampling: tuple[bool, float, float, int], selection: Any,
                        measured_count: int) -> dict[str, Any]:
    """`selection`: the MoleculeSelection; `measured_count`: how many of the requests (molecule order) are timed."""
    import torch
    from inferlab.models.tokenizer_loading import load_hf_tokenizer

    from inferlab.bench.backends import get_backend
    from inferlab.bench.backends.base import close_backend
    from inferlab.bench.backends.constrained_base import ConstrainedSpec
    from inferlab.bench.compile_watch import compiled_graphs
    from inferlab.bench.devices import peak_memory, reset_peak_memory, resolve_device, torch_dtype
    from inferlab.bench.scenarios.constrained_inputs import build_requests, load_molecules, molecule_file, plan_batches
    from inferlab.bench.scenarios.generate_traffic import count_generated
    from inferlab.bench.timing import device_synchronizer, measure, timed, warm_up
    from inferlab.workloads.conformers.chemistry.profiles import get_profile

    c = cell.config
    assert ctx.model_path is not None and cell.backend is not None
    device = resolve_device(c["device"])
    sync = device_synchronizer(device)
    profile = get_profile(c["profile"])
    tokenizer = load_hf_tokenizer(ctx.model_path)
    with timed(sync) as setup:
        molecules = load_molecules(molecule_file(c["molecules_file"]), c["num_molecules"], profile, tokenizer,
                                   min(c["context"], _max_positions(ctx.model_path)), selection)
        requests = build_requests(molecules, c["num_conformers"])
    measured = requests[:measured_count]
    bounds = [m.max_output_tokens for m in molecules.molecules]
    batches = plan_batches(measured, bounds, c["batch_size"], c["sort_by_length"])
    do_sample, temperature, top_p, top_k = sampling
    spec = ConstrainedSpec(do_sample, temperature, top_p, top_k, c["seed"], profile.name)
    backend = get_backend(cell.backend, "constrained").create(dict(c), spec)
    reset_peak_memory(device)
    with timed(sync) as load:
        backend.load(ctx.model_path, device, torch_dtype(c["dtype"]))
    with timed(sync) as prepare:
        backend.prepare(measured)
    # A dynamic KV cache meets a new length at every step (cuDNN builds a plan per shape): only a full-length
    # warm-up reaches the steady state there (see generate.py).
    warm_steps = None if c.get("kv_cache") == "dynamic" else (c["warmup_steps"] or None)

    with torch.no_grad():
        warmups, warm_short_s = warm_up(lambda: backend.generate(batches[0], stop_after_steps=warm_steps),
                                        c["warmup"], warm_steps is not None, sync)
        order = iter(range(10**9))
        outputs: list[list[int]] = []  # the first pass, in `batches` order
        tokens_per_call: list[int] = []

        def one_call() -> Any:
            return backend.generate(batches[next(order) % len(batches)])

        def count(out: list[list[int]]) -> None:
            if len(outputs) < len(measured):
                outputs.extend(out)
            tokens_per_call.append(sum(count_generated(out, backend.eos_token_ids)))

        graphs_before = compiled_graphs()
        m = measure(one_call, warmup=0, min_repeats=c["min_repeats"] * len(batches),
                    min_duration_s=c["min_duration_s"], sync=sync, on_result=count)
        compiled_while_timed = compiled_graphs() - graphs_before

    if compiled_while_timed:
        ctx.warn(f"{compiled_while_timed} graph(s) were compiled during the timed calls: the figures include compilation")
    first_pass = [r for batch in batches for r in batch]
    validity = _check_outputs(first_pass, outputs, backend.eos_token_ids, tokenizer, profile)
    steady_s = m.total_s
    rows_timed = m.stats.n * c["batch_size"]
    prefix = f"the first {len(measured)} of {len(requests)} requests ({c['num_molecules']} molecules x {c['num_conformers']})"
    if len(measured) < len(requests):
        ctx.warn(f"measured on {prefix} (max_requests): compare the rates, not totals")
    output_tokens = sum(tokens_per_call)
    metrics: dict[str, Any] = {
        "output_tokens": output_tokens,
        "output_tokens_per_s": output_tokens / steady_s,
        "requests_per_s": rows_timed / steady_s,
        "molecules_per_s": rows_timed / c["num_conformers"] / steady_s,
        "mean_output_tokens": output_tokens / rows_timed,
        "measured_on": prefix,
        "requests_measured": len(measured),
        "requests_total": len(requests),
        "setup_s": setup.seconds,  # reading molecules, templates, prompts (scenario side)
        "load_s": load.seconds,
        "prepare_s": prepare.seconds,  # the backend's host work (templates, constraints), apart
        "first_call_s": warmups[0],
        "first_call_steps": warm_steps,
        "first_call_extra_s": warmups[0] - (warm_short_s if warm_short_s is not None else m.stats.median),
        "warmup_s": warmups,
        "warm_short_call_s": warm_short_s,
        "steady_s": steady_s,
        "steady_calls": m.stats.n,
        "call_s_stats": m.stats.to_dict(),
        "latency_ms": m.stats.scaled(1000.0).latency_dict(),  # a request's latency = its batch call's
        "spread": m.stats.spread,
        "graphs_compiled_while_timed": compiled_while_timed,
        "molecules_skipped_too_long": molecules.skipped_too_long,
        "molecules_skipped_unreadable": molecules.skipped_unreadable,
        "molecules_source": molecules.source,
        "molecules_selection": molecules.selection.describe(),
        "molecules_skipped_by_size": molecules.skipped_by_size,
        "device": str(device),
        **validity,
        **peak_memory(device),
    }
    ctx.add_backend_metrics(metrics, backend)
    close_backend(backend)
    return metrics
