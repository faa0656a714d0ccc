"""Constrained generation through the Engine on CUDA (Request.constraint inside the captured step).

Conformer templates of small NCI molecules on tiny random checkpoints (the qwen3-chem tokenizer and the
built-in Llama-3-style one), more requests than rows (refills and compaction), greedy / T=1 / top-k +
top-p / min-p, beside unconstrained rows: every constrained output passes the template's strict check and
decodes to its molecule, the unconstrained rows equal an unconstrained-only run, and the greedy
constrained tokens are equal with and without CUDA graphs (cuBLAS in both). Then the same with the
engine's own GEMM plan. Quick: 6 molecules on 4 rows; full: 40 on 16. Its cost against unconstrained
rows: the lab's conformer-engine and conformer-pipeline presets (docs/lab.md).
"""

from __future__ import annotations

import pytest
from gpu_conformers import conformer_cases, invalid_outputs, nci_molecules
from gpu_testkit import CUDA_ONLY, free_device_memory

pytestmark = CUDA_ONLY
SAMPLINGS = [dict(temperature=0.0), dict(temperature=1.0), dict(temperature=1.0, top_k=50, top_p=0.9),
             dict(temperature=0.8, min_p=0.05)]


@pytest.mark.parametrize("preset", ["tiny-qwen3", "tiny"])
def test_constrained_rows_are_valid_beside_untouched_free_rows(preset, size, checkpoint):
    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Request, SamplingParams

    molecules = nci_molecules(size.pick(6, 40), 12)
    greedy = {}
    for graphs in (True, False):
        config = EngineConfig(model=checkpoint(preset), max_slots=size.pick(4, 16), max_seq_len=512,
                              cuda_graphs=graphs, decode_steps_per_sync=8, gemm="cublas")
        with Engine(config) as engine:
            cases = conformer_cases(engine.tokenizer, molecules, 1, SAMPLINGS)
            free = [Request(id=f"f{i}", prompt_ids=(11 + i, 12, 13), sampling=SamplingParams(max_new_tokens=40, seed=i))
                    for i in range(4)]  # fmt: skip
            alone = [r.token_ids for r in engine.generate(free)]
            results = engine.generate([c.request for c in cases[:2]] + free + [c.request for c in cases[2:]])
        free_device_memory()
        by_id = {r.id: r for r in results}
        assert invalid_outputs(results, cases) == [], f"graphs={graphs}"
        assert [by_id[r.id].token_ids for r in free] == alone, f"graphs={graphs}"
        greedy[graphs] = [by_id[c.request.id].token_ids for c in cases if c.request.sampling.temperature == 0.0]
    assert greedy[True] == greedy[False]


def test_constrained_conformers_with_the_engines_own_gemm_plan(size, checkpoint):
    from inferlab.engine import Engine, EngineConfig

    molecules = nci_molecules(size.pick(5, 40), 12) * size.pick(3, 1)
    samplings = [dict(temperature=0.0), dict(temperature=1.0), dict(temperature=1.0, top_k=50, top_p=0.9)]
    with Engine(EngineConfig(model=checkpoint("tiny-qwen3"), max_slots=8, max_seq_len=512)) as engine:
        cases = conformer_cases(engine.tokenizer, molecules, 1, samplings)
        results = engine.generate([c.request for c in cases])
    assert invalid_outputs(results, cases) == []
