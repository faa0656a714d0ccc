"""Forced tokens in bulk on CUDA (engine/forced_runs.py: EngineConfig.forced_run_tokens) inside the captured
decode step:

    python -m pytest -q -s -m gpu tests/gpu/test_forced_runs_gpu.py [--gpu-size full]

fp32 (cuBLAS, the packed-rows attention kernel, the Triton constraint runtime): the tokens and the pressure
of one token per step, in fewer decode steps, with graphs and without; bf16 with the fp8 cache: every output
a valid conformer of its molecule. Quick: 6 molecules x 2 on 4 rows; full: 40 x 4 on 16. Prints the decode
steps with and without, the share of steps the forced runs saved. Then what the packed step costs beside
the plain constrained step at qwen3-0.6b (256 rows; full: 1024 too, bf16 and fp8 caches, context 330): its
rows + an eighth more positions through the GEMMs, the packing and the bulk LM head, with no run booked (the
probe's rows are frozen: DecodeStepProbe), at most 4% of the step (the forced runs save ~11% of the steps:
benchmarks/checks/2026-12-04c-forced-run-budget)."""

from __future__ import annotations

import pytest
from gpu_conformers import conformer_cases, invalid_outputs, nci_molecules
from gpu_testkit import CUDA_ONLY, alternated_step_ms, free_device_memory

pytestmark = CUDA_ONLY
SAMPLINGS = [dict(temperature=0.0), dict(temperature=1.0)]


def _generate(checkpoint: str, molecules, repeats: int, rows: int, **config):
    from inferlab.engine import Engine, EngineConfig

    with Engine(EngineConfig(model=checkpoint, max_slots=rows, max_seq_len=512, decode_steps_per_sync=4,
                             gemm="cublas", **config)) as engine:  # fmt: skip
        cases = conformer_cases(engine.tokenizer, molecules, repeats, SAMPLINGS)
        results = engine.generate([c.request for c in cases])
        steps = engine.stats.decode_steps
    free_device_memory()
    return cases, results, steps


@pytest.mark.parametrize("graphs", [True, False])
def test_forced_runs_give_the_tokens_of_one_token_per_step(size, checkpoint, graphs):
    molecules = nci_molecules(size.pick(6, 40), 12)
    repeats, rows = size.pick(2, 4), size.pick(4, 16)
    path = str(checkpoint("tiny-qwen3"))
    _, single, single_steps = _generate(path, molecules, repeats, rows, dtype="float32", cuda_graphs=graphs)
    cases, bulk, bulk_steps = _generate(path, molecules, repeats, rows, dtype="float32", cuda_graphs=graphs,
                                        forced_run_tokens=4)
    print(f"\nforced runs (graphs={graphs}): {bulk_steps} decode steps against {single_steps} "
          f"({1 - bulk_steps / single_steps:.1%} fewer)")
    assert invalid_outputs(bulk, cases) == []
    assert [r.token_ids for r in bulk] == [r.token_ids for r in single]
    for many, one in zip(bulk, single):
        assert many.constraint_pressure.steps == one.constraint_pressure.steps
        assert many.constraint_pressure.mean == pytest.approx(one.constraint_pressure.mean, abs=1e-4)
    assert bulk_steps < single_steps


def test_forced_runs_on_an_fp8_cache_give_valid_conformers(size, checkpoint):
    molecules = nci_molecules(size.pick(6, 40), 12)
    cases, results, _ = _generate(str(checkpoint("tiny-qwen3")), molecules, size.pick(2, 4),
                                  size.pick(4, 16), kv_dtype="fp8", forced_run_tokens=4)
    assert invalid_outputs(results, cases) == []


def test_the_packed_step_costs_little_beside_the_plain_one(size, checkpoint):
    from inferlab.constraints.program import compile_program
    from inferlab.constraints.segments import Copy, EndOfSequence, Hole
    from inferlab.engine import DecodeStepProbe, Engine, EngineConfig
    from inferlab.types import SamplingParams

    path, table, worst = checkpoint("qwen3-0.6b"), [], 0.0
    hole_first = [Hole("coord3-fixed4"), Copy(">[C]<"), Hole("coord3-fixed4"), Copy(">"), EndOfSequence()]
    copy_first = [Copy("[CONFORMER][C]<"), Hole("coord3-fixed4"), Copy(">[/CONFORMER]"), EndOfSequence()]
    for kv_dtype in size.pick(["auto"], ["auto", "fp8"]):
        for rows in size.pick([256], [256, 1024]):
            engines = {f: Engine(EngineConfig(model=path, max_slots=rows, max_seq_len=400, kv_dtype=kv_dtype,
                                              forced_run_tokens=f)) for f in (0, 4)}  # fmt: skip
            probes = {}
            try:
                for f, engine in engines.items():
                    programs = [compile_program(seg, engine.tokenizer) for seg in (hole_first, copy_first)]
                    probes[f] = DecodeStepProbe(engine, rows, 330, SamplingParams(temperature=1.0), seed=1,
                                                constraints=programs)
                step_ms = alternated_step_ms(probes, steps=20)
            finally:
                for probe in probes.values():
                    probe.close()
                for engine in engines.values():
                    engine.close()
                free_device_memory()
            packed, plain = step_ms[4], step_ms[0]
            share = packed / plain - 1
            worst = max(worst, share)
            table.append(f"{rows:5d} rows, kv {kv_dtype}: packed {packed:.3f} ms, plain {plain:.3f} ms ({100 * share:+.2f}%)")
    print("\nthe packed step beside the plain constrained one (qwen3-0.6b, context 330, no run booked):\n"
          + "\n".join(table))
    assert worst <= 0.04, "\n".join(table)
