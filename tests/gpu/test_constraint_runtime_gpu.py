"""The constraint runtime alone on the device (no model): validity under adversarial logits, and its step
captured in a CUDA graph against the same steps run eagerly.

- Validity: the reference decode loop (constraints/simulate.py) over adversarial logits that favour lure
  tokens, greedy / T=1 / top-k + top-p / top-p, for the qwen3-chem tokenizer and the built-in
  Llama-3-style one; every constrained row's output is checked with `re` and the tokenizer; one row per
  batch runs unconstrained. Quick: 16 rows of synthetic conformer programs (1-8 atoms); full: 256 rows
  (5-40 atoms).
- Graph: mask -> sample -> choose -> advance captured in one CUDA graph (the Triton mask kernel) against
  the same steps eagerly with the torch mask: equal tokens, pointers and automaton states at every step,
  every output valid, and no host sync inside an eager step (torch.cuda.set_sync_debug_mode).
Its per-step cost: the lab's engine-kernels plan, group constraint-step (docs/lab.md).
"""

from __future__ import annotations

import random
import warnings

import pytest
import torch
from gpu_testkit import CUDA_ONLY

pytestmark = CUDA_ONLY
CUDA = torch.device("cuda")
QWEN3_VOCAB = 151936  # the qwen3-chem models' padded embedding
LURE_TEXTS = [">", ">[", ">(", "]<", "<", "<-", "a", "C", "..", "-.", ",,", " ", "[/CONFORMER]"]


def tokenizer_and_vocab(name: str):
    from transformers import AutoTokenizer

    from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir

    if name == "qwen3-chem":
        return AutoTokenizer.from_pretrained(str(qwen3_chem_tokenizer_dir())), QWEN3_VOCAB
    return build_builtin_tokenizer(), 2048


def programs(tokenizer, count: int, atoms: tuple[int, int], seed: int) -> list:
    from inferlab.constraints.program import compile_program
    from inferlab.constraints.simulate import synthetic_conformer_segments

    rng = random.Random(seed)
    return [compile_program(synthetic_conformer_segments(rng.randint(*atoms), rng.choice(["coord3-fixed4",
                                                                                          "coord3-stripped"]), rng),
                            tokenizer) for _ in range(count)]  # fmt: skip


def adversarial_logits(grammar_set, tokenizer, batch: int, vocab: int, generator):
    from inferlab.constraints.simulate import AdversarialLogits

    varied = {t for info in grammar_set.grammars.values() for t in info.candidate_tokens}
    lures = {i for text in LURE_TEXTS for i in tokenizer(text, add_special_tokens=False).input_ids}
    lures = sorted(lures | {tokenizer.eos_token_id, len(tokenizer), vocab - 1})
    return AdversarialLogits(batch, vocab, varied, lures, generator, CUDA)


def assign(runtime, programs_: list, batch: int) -> list:
    """Rows 0..batch-2 get programs (cycled), the last row runs unconstrained."""
    assigned = [programs_[r % len(programs_)] if r < batch - 1 else None for r in range(batch)]
    for row, program in enumerate(assigned):
        runtime.assign(row, program)
    return assigned


@pytest.mark.parametrize("tokenizer_name", ["qwen3-chem", "builtin"])
def test_reference_decode_on_the_device_gives_valid_outputs(tokenizer_name, size):
    from inferlab.constraints.simulate import ReferenceSampling, check_output, reference_decode
    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.engine.constraints.runtime import ConstraintRuntime

    tokenizer, vocab = tokenizer_and_vocab(tokenizer_name)
    batch, unique, atoms = size.pick((16, 4, (1, 8)), (256, 32, (5, 40)))
    grammar_set = grammar_set_for(tokenizer)
    compiled = programs(tokenizer, unique, atoms, seed=1)
    runtime = ConstraintRuntime(grammar_set, batch, max(p.length for p in compiled), vocab, CUDA)
    samplings = [ReferenceSampling(0.0), ReferenceSampling(1.0), ReferenceSampling(1.0, top_k=50, top_p=0.9),
                 ReferenceSampling(1.0, top_p=0.95)]
    for sampling in samplings:
        assigned = assign(runtime, compiled, batch)
        generator = torch.Generator(device=CUDA).manual_seed(7)
        logits = adversarial_logits(grammar_set, tokenizer, batch, vocab, generator)
        steps = max(p.max_new_tokens for p in compiled) + 2
        tokens = reference_decode(runtime, steps, logits, sampling, generator).cpu()
        errors = [(row, error) for row, p in enumerate(assigned)
                  if p is not None and (error := check_output(p, tokens[row].tolist(), tokenizer)) is not None]
        assert errors == [], (sampling, errors[:3])


def test_captured_constraint_step_equals_eager_steps_without_host_syncs():
    from inferlab.constraints.simulate import ReferenceSampling, check_output, sample_tokens
    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.engine.constraints.runtime import ConstraintRuntime

    tokenizer, vocab = tokenizer_and_vocab("qwen3-chem")
    grammar_set, batch = grammar_set_for(tokenizer), 64
    compiled = programs(tokenizer, 8, (3, 12), seed=2)
    length = max(p.length for p in compiled)
    eager = ConstraintRuntime(grammar_set, batch, length, vocab, CUDA, mask_impl="torch")
    graphed = ConstraintRuntime(grammar_set, batch, length, vocab, CUDA)  # auto: the Triton mask kernel on CUDA
    sampling = ReferenceSampling(1.0, top_k=50, top_p=0.9)

    def step(runtime, logits, uniform):
        tokens = runtime.choose(sample_tokens(runtime.mask_logits(logits), sampling, uniform=uniform))
        runtime.advance(tokens)
        return tokens

    logits_in, uniform_in = torch.zeros(batch, vocab, device=CUDA), torch.zeros(batch, 1, device=CUDA)
    assign(graphed, compiled, batch)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (allocations, lazy initialisation) outside the capture
        for _ in range(3):
            step(graphed, logits_in.clone(), uniform_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tokens_out = step(graphed, logits_in, uniform_in)
    assigned = assign(graphed, compiled, batch)
    assign(eager, compiled, batch)
    generator = torch.Generator(device=CUDA).manual_seed(3)
    source = adversarial_logits(grammar_set, tokenizer, batch, vocab, generator)
    emitted, syncs = [], []
    for i in range(max(p.max_new_tokens for p in compiled) + 2):
        logits, uniform = source(i), torch.rand(batch, 1, generator=generator, device=CUDA)
        logits_in.copy_(logits)
        uniform_in.copy_(uniform)
        graph.replay()
        torch.cuda.set_sync_debug_mode("warn")  # every host sync inside the eager step warns
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                eager_tokens = step(eager, logits, uniform)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        syncs += [str(w.message) for w in caught]
        assert torch.equal(eager_tokens, tokens_out), i
        assert torch.equal(eager.ptr, graphed.ptr) and torch.equal(eager.state, graphed.state), i
        emitted.append(tokens_out.clone())
    assert syncs == []
    tokens = torch.stack(emitted, dim=1).cpu()
    assert [row for row, p in enumerate(assigned)
            if p is not None and check_output(p, tokens[row].tolist(), tokenizer) is not None] == []  # fmt: skip
