"""Constraint pressure on CUDA (engine/constraints/pressure.py): the compiled kernels against the float64
reference with the hardware logarithm and bf16 logits at the qwen3-chem vocabulary, the same tokens as
without it; then its cost inside the captured decode step, which the issue bounds at 2%:

    python -m pytest -q -s -m gpu tests/gpu/test_constraint_pressure_gpu.py [--gpu-size full]

prints, for each row count (quick: 256; full: 256 and 1024) and sampling (T = 1 top-p 1.0, the fused race;
top-p 0.9, the mask kernel), the graph replay's device time with pressure and without (two engines on the
same random qwen3-0.6b checkpoint, timed in alternation) and the difference as a share of the step. The
rows are conformer rows frozen half in a coordinate hole, half in a copy run (DecodeStepProbe
`constraints`), over 330 positions of context."""

from __future__ import annotations

import torch
from gpu_testkit import CUDA_ONLY, alternated_step_ms, free_device_memory

pytestmark = CUDA_ONLY
CONTEXT, MAX_SEQ_LEN = 330, 400


def test_pressure_kernels_on_cuda_equal_the_float64_reference():
    """bf16 logits over 151,936 ids; rows in holes and copies; the fused race (same tokens as without) and
    the mask kernel + its combining launch."""
    check_kernels("cuda", steps=24)


def check_kernels(device: str, steps: int) -> None:
    """The kernels on `device` (cpu: through TRITON_INTERPRET=1, a few steps, to try this file without a GPU)."""
    from pressure_reference import conformer_like_programs, pressing_logits, reference_pressure
    from transformers import AutoTokenizer

    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.engine.constraints import step_kernels
    from inferlab.engine.constraints.pressure import PressureBuffers
    from inferlab.engine.constraints.runtime import ConstraintRuntime
    from inferlab.engine.sampler import FILTER_NONE
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(str(qwen3_chem_tokenizer_dir()))
    rows, vocab = 8, 151936
    programs = conformer_like_programs(tokenizer, rows - 1, atoms=2)
    host = ConstraintRuntime(grammar_set_for(tokenizer), rows, 512, vocab, "cpu", mask_impl="torch")
    cuda = ConstraintRuntime(grammar_set_for(tokenizer), rows, 512, vocab, device, mask_impl="triton")
    for runtime in (host, cuda):
        runtime.assign_rows(list(range(rows)), programs + [None])
    buffers = PressureBuffers.allocate(rows, torch.device(device))
    g = torch.Generator().manual_seed(0)
    temperature, seeds = torch.ones(rows, device=device), torch.arange(rows, device=device)
    live, finished = (torch.ones(rows, dtype=torch.bool, device=device),
                      torch.zeros(rows, dtype=torch.bool, device=device))
    for n in range(steps):
        logits = pressing_logits(rows, vocab, host, g, torch.bfloat16)
        expected = torch.tensor([p if p is not None else 0.0 for p in reference_pressure(logits.float(), host)])
        measured = host.active.clone()
        on = logits.to(device)
        index = torch.full((rows,), n, dtype=torch.int64, device=device)
        plain = cuda.fused_race(FILTER_NONE)(on, temperature, seeds, index, None)
        drawn = cuda.fused_race(FILTER_NONE, buffers)(on, temperature, seeds, index, None)
        assert torch.equal(drawn, plain), n
        assert torch.allclose(buffers.now.cpu()[measured], expected[measured], atol=1e-5), n
        step_kernels.mask_step(cuda, on.clone(), None, buffers)
        assert torch.allclose(buffers.now.cpu()[measured], expected[measured], atol=1e-5), n
        tokens = cuda.emit(drawn, live, finished, None, buffers)
        host.advance(tokens.cpu())


def test_pressure_costs_at_most_two_percent_of_the_captured_step(size, checkpoint):
    from inferlab.constraints.program import compile_program
    from inferlab.constraints.segments import Copy, EndOfSequence, Hole
    from inferlab.engine import DecodeStepProbe, Engine, EngineConfig
    from inferlab.types import SamplingParams

    path, most = checkpoint("qwen3-0.6b"), size.pick(256, 1024)
    engines = {on: Engine(EngineConfig(model=path, max_slots=most, max_seq_len=MAX_SEQ_LEN, constraint_pressure=on))
               for on in (True, False)}  # fmt: skip
    try:
        hole_first = [Hole("coord3-fixed4"), Copy(">[C]<"), Hole("coord3-fixed4"), Copy(">"), EndOfSequence()]
        copy_first = [Copy("[CONFORMER][C]<"), Hole("coord3-fixed4"), Copy(">[/CONFORMER]"), EndOfSequence()]
        table, worst = [], 0.0
        for rows in size.pick([256], [256, 1024]):
            for name, sampling in (("T=1 (fused race)", SamplingParams(temperature=1.0)),
                                   ("top-p 0.9 (mask kernel)", SamplingParams(temperature=1.0, top_p=0.9))):
                probes = {}
                for on, engine in engines.items():
                    programs = [compile_program(s, engine.tokenizer) for s in (hole_first, copy_first)]
                    probes[on] = DecodeStepProbe(engine, rows, CONTEXT, sampling, seed=1, constraints=programs)
                try:
                    step_ms = alternated_step_ms(probes)
                finally:
                    for probe in probes.values():
                        probe.close()
                with_ms, without_ms = step_ms[True], step_ms[False]
                share = (with_ms - without_ms) / without_ms
                worst = max(worst, share)
                table.append(f"{rows:5d} rows, {name:24s}: {with_ms:7.3f} ms with pressure, {without_ms:7.3f} ms "
                             f"without: {100 * share:+.2f}% of the step")
        print("\nconstraint pressure inside the captured step (qwen3-0.6b, context 330):\n" + "\n".join(table))
        assert worst <= 0.02, "\n".join(table)
    finally:
        for engine in engines.values():
            engine.close()
        free_device_memory()
