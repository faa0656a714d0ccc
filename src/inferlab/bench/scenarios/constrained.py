"""Scenario `constrained`: conformers of real molecules generated under the conformer constraint through a
backend (backends of scenario `constrained`: `hf` = the seeds' HF generate + per-token Python LogitsProcessor,
the baseline; `inferlab` = the engine; peers `vllm`, `hf-xgrammar`), measured the same way for every backend.

The scenario owns everything a comparison depends on: the molecules (molecules.py: the first `num_molecules`
of the file that pass the selection and fit the context), K requests per molecule, each carrying its
conformer's constraint (backends/base.py ConformerConstraint) and the sampling settings, the measured prefix
(`max_requests`: the baseline is slow, so its rate may be measured on the first requests; the row says how
many of how many), the batches (longest first with `sort_by_length`). Protocol, as in `generate`: load, then
`prepare` (the backend's host work for every measured request, timed apart), a first call on the first batch
stopped after `warmup_steps` decode steps with every shape kept (compile, capture), its warm twin, then the
timed passes over the measured batches. Tokens are counted per row up to and including the first EOS; every
output of the first pass is decoded and checked strictly against its template (`valid_fraction`).
"""

from __future__ import annotations

import math
from typing import Any

from inferlab.bench import model_refs
from inferlab.bench.cells import Cell
from inferlab.bench.knobs import TOKENIZER_KNOB, Knob, common_knobs, dtype_knob
from inferlab.bench.scenarios.base import CellContext, Scenario, completed
from inferlab.bench.scenarios.molecules import SELECTION_KNOBS, validate_selection
from inferlab.errors import ConfigError

SAMPLINGS = {  # name -> (do_sample, temperature, top_p, top_k)
    "greedy": (False, 1.0, 1.0, 0),
    "top-p": (True, 1.0, 1.0, 0),  # the seeds' production setting: T = 1, top-p 1.0 (pure sampling)
}

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
    Knob("sort_by_length", bool, True, "batch requests of similar length, longest first"),
    Knob("molecules_file", str, "", "a .smi/.csv of molecules ('' = RDKit's NCI first_5K.smi)"),
    *SELECTION_KNOBS,
    dtype_knob(),
    TOKENIZER_KNOB,
    Knob("warmup_steps", int, 16, "decode steps of each warm-up call (every shape kept); 0 = full length",
         minimum=0),
    *common_knobs(min_repeats=1, min_duration_s=0.0, warmup=1, repeats_help="timed passes over the measured requests"),
)


def measured_requests(c: dict[str, Any]) -> int:
    total = c["num_molecules"] * c["num_conformers"]
    return min(c["max_requests"], total) if c["max_requests"] else total


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


class ConformerRequests:
    """K requests per molecule, each molecule's K adjacent (as the seeds batched them), built for each call: ids
    `<call>-<index>` with `call` counting the backend's calls (0: prepare), so an engine that seeds each request
    from its id draws fresh samples on every call. `index` is the request's place in this list."""

    def __init__(self, molecules: Any, num_conformers: int, sampling: Any) -> None:
        from inferlab.bench.backends.base import ConformerConstraint

        self.items = [(m.prompt_ids, ConformerConstraint(m.smiles, m.template, m_index, k), m.max_output_tokens)
                      for m_index, m in enumerate(molecules.molecules)
                      for k in range(num_conformers)]  # (prompt ids, constraint, output bound) per request
        self.sampling = sampling
        self.calls = 0

    def call(self, indices: list[int]) -> list[Any]:
        self.calls += 1
        return self.requests(indices, self.calls)

    def requests(self, indices: list[int], call: int = 0) -> list[Any]:
        from inferlab.types import Request

        return [Request(id=f"{call}-{i}", prompt_ids=self.items[i][0], sampling=self.sampling,
                        constraint=self.items[i][1]) for i in indices]

    def batches(self, count: int, batch_size: int, sort_by_length: bool) -> list[list[int]]:
        """The first `count` requests in consecutive batches of `batch_size`; with sort_by_length, longest output
        bound first (rows of a batch end close together, and the hungriest batch runs first)."""
        order = list(range(count))
        if sort_by_length:
            order.sort(key=lambda i: -self.items[i][2])
        return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


def run(cell: Cell, ctx: CellContext) -> dict[str, Any]:
    import torch

    from inferlab.bench.backends import get_backend
    from inferlab.bench.backends.base import ConstrainedSpec
    from inferlab.bench.compile_watch import compiled_graphs
    from inferlab.bench.devices import peak_memory, reset_peak_memory, resolve_device, torch_dtype
    from inferlab.bench.scenarios.conformer_output_check import check_generations
    from inferlab.bench.scenarios.decode_traffic import count_generated
    from inferlab.bench.scenarios.molecules import load_molecules, model_positions, molecule_file, molecule_selection
    from inferlab.bench.timing import device_synchronizer, measure, timed, warm_up
    from inferlab.models.tokenizer_loading import load_hf_tokenizer
    from inferlab.types import SamplingParams
    from inferlab.workloads.conformers.chemistry.profiles import get_profile

    c = cell.config
    assert ctx.model_path is not None and cell.backend is not None
    device = resolve_device(c["device"])
    sync = device_synchronizer(device)
    profile = get_profile(c["profile"])
    tokenizer = load_hf_tokenizer(ctx.model_path)
    do_sample, temperature, top_p, top_k = SAMPLINGS[c["sampling"]]
    sampling = SamplingParams(temperature=temperature if do_sample else 0.0, top_p=top_p, top_k=top_k)
    with timed(sync) as setup:
        molecules = load_molecules(molecule_file(c["molecules_file"]), c["num_molecules"], profile, tokenizer,
                                   min(c["context"], model_positions(ctx.model_path)), molecule_selection(c))
        requests = ConformerRequests(molecules, c["num_conformers"], sampling)
    measured = measured_requests(c)
    batches = requests.batches(measured, c["batch_size"], c["sort_by_length"])
    backend = get_backend(cell.backend, "constrained").create(dict(c), ConstrainedSpec(c["seed"], profile.name))
    reset_peak_memory(device)
    with timed(sync) as load:
        backend.load(ctx.model_path, device, torch_dtype(c["dtype"]))
    with timed(sync) as prepare:
        backend.prepare(requests.requests(list(range(measured))))
    # A dynamic KV cache meets a new length at every step (cuDNN builds a plan per shape): only a full-length
    # warm-up reaches the steady state there (see generate.py).
    warm_steps = None if c.get("kv_cache") == "dynamic" else (c["warmup_steps"] or None)

    def generate(batch: int, stop_after_steps: int | None = None) -> tuple[list[Any], list[int], list[Any]]:
        sent = requests.call(batches[batch])
        return sent, batches[batch], completed(backend.generate(sent, stop_after_steps))

    with torch.no_grad():
        warmups, warm_short_s = warm_up(lambda: generate(0, warm_steps), c["warmup"], warm_steps is not None, sync)
        order = iter(range(10**9))
        outputs: dict[int, list[int]] = {}  # request index -> its output in the first pass
        tokens_per_call: list[int] = []

        def count(call: tuple[list[Any], list[int], list[Any]]) -> None:
            sent, indices, results = call
            index_of = {r.id: i for r, i in zip(sent, indices)}
            for result in results:
                outputs.setdefault(index_of[result.id], result.token_ids)
            tokens_per_call.append(sum(count_generated([r.token_ids for r in results], backend.eos_token_ids)))

        graphs_before = compiled_graphs()
        m = measure(lambda: generate(next(order) % len(batches)), warmup=0, min_repeats=c["min_repeats"] * len(batches),
                    min_duration_s=c["min_duration_s"], sync=sync, on_result=count)
        compiled_while_timed = compiled_graphs() - graphs_before

    if compiled_while_timed:
        ctx.warn(f"{compiled_while_timed} graph(s) were compiled during the timed calls: the figures include compilation")
    first_pass = [i for batch in batches for i in batch]
    validity = check_generations([(requests.items[i][1], outputs[i]) for i in first_pass], backend.eos_token_ids,
                                 tokenizer, profile)
    steady_s = m.total_s
    rows_timed = m.stats.n * c["batch_size"]
    total = len(requests.items)
    prefix = f"the first {measured} of {total} requests ({c['num_molecules']} molecules x {c['num_conformers']})"
    if measured < total:
        ctx.warn(f"measured on {prefix} (max_requests): compare the rates, not totals")
    output_tokens = sum(tokens_per_call)
    metrics: dict[str, Any] = {
        "output_tokens": output_tokens,
        "output_tokens_per_s": output_tokens / steady_s,
        "requests_per_s": rows_timed / steady_s,
        "molecules_per_s": rows_timed / c["num_conformers"] / steady_s,
        "mean_output_tokens": output_tokens / rows_timed,
        "measured_on": prefix,
        "requests_measured": measured,
        "requests_total": total,
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
    backend.close()
    return metrics


SCENARIO = Scenario(
    "constrained", "conformers of NCI molecules under the conformer constraint: tok/s, molecules/s, validity",
    KNOBS, run, validate, estimate_s, uses_backends=True,
    # batch size and cache are serving choices: the baseline's best of them is what is compared
    workload_knobs=("num_molecules", "num_conformers", "max_requests", "sampling", "profile", "molecules_file",
                    "min_heavy_atoms", "max_heavy_atoms", "assign_stereo"),
)
