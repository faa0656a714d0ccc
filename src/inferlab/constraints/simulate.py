"""Generation without a model, to test and measure the constraint runtime: a reference decode loop
(logits -> mask -> sample -> choose -> advance) in plain torch, adversarial logits, synthetic
conformer-like programs, and an output check that uses only Python's `re` and the tokenizer.

Owns none of the engine: the sampler here is a small reference (temperature, top-k, top-p in the order of
transformers, inverse-CDF sampling); the engine has its own. Used by the unit tests, the device tests
(tests/gpu/test_constraint_runtime_gpu.py) and the lab's micro-benchmark of the runtime alone.
"""

from __future__ import annotations

import bisect
import random
import re
from dataclasses import dataclass
from typing import Protocol

import torch

from inferlab.constraints.program import ConstraintProgram
from inferlab.constraints.segments import Copy, EndOfSequence, Hole


@dataclass(frozen=True)
class ReferenceSampling:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off


def sample_tokens(
    logits: torch.Tensor,
    sampling: ReferenceSampling,
    generator: torch.Generator | None = None,
    uniform: torch.Tensor | None = None,
) -> torch.Tensor:
    """logits [B, V] fp32 (may hold -inf) -> token ids [B] int64. The draw uses `uniform` [B, 1] in [0, 1)
    when given (replayable: graph vs eager), else torch.rand on `generator` (None = the default one)."""
    if sampling.temperature == 0.0:
        return logits.argmax(dim=-1)
    logits = logits / sampling.temperature
    if sampling.top_k > 0:  # keep the k best, sorted descending: top-p then works on k values, not V
        logits, ids = logits.topk(min(sampling.top_k, logits.shape[-1]), dim=-1)  # [B, k]
    else:
        logits, ids = logits.sort(dim=-1, descending=True) if sampling.top_p < 1.0 else (logits, None)
    if sampling.top_p < 1.0:
        probs = logits.softmax(dim=-1)  # [B, k or V], descending
        mass_before = probs.cumsum(dim=-1) - probs
        logits = logits.masked_fill(mass_before >= sampling.top_p, float("-inf"))  # keeps the best token
    probs = logits.softmax(dim=-1)
    cdf = probs.cumsum(dim=-1)  # inverse-CDF sampling: a token of probability 0 can never be drawn
    if uniform is None:
        uniform = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device)
    total = cdf[:, -1:]  # [B, 1]
    u = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))  # strictly < total
    choice = torch.searchsorted(cdf, u, right=True)[:, 0]  # [B]: first cdf > u, a token of mass > 0
    return choice if ids is None else ids.gather(1, choice[:, None])[:, 0]


class StepRuntime(Protocol):
    """The torch-path steps of a constraint runtime (the engine's ConstraintRuntime), rows 0..B-1."""

    def mask_logits(self, logits: torch.Tensor) -> torch.Tensor: ...  # [B, V] -> [B, V], -inf where forbidden

    def choose(self, sampled: torch.Tensor) -> torch.Tensor: ...  # [B] -> [B], forced copy tokens in place

    def advance(self, tokens: torch.Tensor) -> None: ...  # [B]: pointer and automaton state


def reference_decode(
    runtime: StepRuntime,
    num_steps: int,
    logits_for_step,
    sampling: ReferenceSampling,
    generator: torch.Generator,
) -> torch.Tensor:
    """Run `num_steps` steps over rows 0..B-1 (already assigned); logits_for_step(step) -> [B, V] fp32.
    Returns the emitted tokens [B, num_steps]."""
    emitted = []
    for step in range(num_steps):
        logits = runtime.mask_logits(logits_for_step(step))
        tokens = runtime.choose(sample_tokens(logits, sampling, generator))
        runtime.advance(tokens)
        emitted.append(tokens)
    return torch.stack(emitted, dim=1)


class AdversarialLogits:
    """step -> logits [B, V] fp32 for reference_decode: a fixed random base, fresh noise every step on
    `varied_ids` (the tokens a hole may choose between), and huge values on a random half of `lure_ids`
    (tokens a constraint must forbid: `>`, `]<`, EOS, padded ids, letters, ...), so that an unmasked
    forbidden token would win. Fresh noise only where choices exist keeps a step cheap at V = 152k."""

    def __init__(self, batch: int, vocab: int, varied_ids, lure_ids, generator: torch.Generator, device) -> None:
        self.generator = generator
        self.base = torch.randn(batch, vocab, generator=generator, device=device) * 3  # [B, V]
        self.varied = torch.as_tensor(sorted(set(varied_ids) | set(lure_ids)), dtype=torch.int64).to(device)
        self.lures = torch.as_tensor(sorted(set(lure_ids)), dtype=torch.int64).to(device)

    def __call__(self, step: int) -> torch.Tensor:
        logits = self.base.clone()
        batch, device = logits.shape[0], logits.device
        noise = torch.randn(batch, self.varied.numel(), generator=self.generator, device=device) * 3
        logits.index_copy_(1, self.varied, noise)
        lured = torch.rand(batch, self.lures.numel(), generator=self.generator, device=device) < 0.5
        logits.index_add_(1, self.lures, torch.where(lured, 1e4, 0.0).to(logits.dtype))
        return logits


_ATOMS = ("C", "c", "N", "n", "O", "o", "S", "Cl", "Br", "F", "C@@H", "C@H", "nH", "NH2+", "O-", "13C", "N+")
_BEFORE_ATOM = ("", "", "", "(", "=", "(=", ")", ")(", "#", "/", "\\", "1", "2", "%10", ".", "1(", "2=")


def synthetic_conformer_segments(num_atoms: int, grammar: str, rng: random.Random) -> list:
    """A conformer-like constraint: `[CONFORMER][atom]<hole>` then per atom `>` + bonds, branches and ring
    digits + `[atom]<hole>`, then `>` + `[/CONFORMER]`, EOS. Not a molecule; a realistic token mix."""
    segments: list = [Copy(f"[CONFORMER][{rng.choice(_ATOMS)}]<"), Hole(grammar)]
    for _ in range(num_atoms - 1):
        segments += [Copy(f">{rng.choice(_BEFORE_ATOM)}[{rng.choice(_ATOMS)}]<"), Hole(grammar)]
    segments += [Copy(">" + rng.choice(("", ")", "1", "2)")) + "[/CONFORMER]"), EndOfSequence()]
    return segments


def program_regex(program: ConstraintProgram) -> re.Pattern:
    """The text a program allows (EOS excluded), written with Python's `re` from its source segments; each
    hole is the named group `hole<i>`."""
    parts, holes = [], 0
    for seg in program.segments:
        if isinstance(seg, Copy):
            parts.append(re.escape(seg.text))
        elif isinstance(seg, Hole):
            parts.append(f"(?P<hole{holes}>{program.patterns[seg.grammar]})")
            holes += 1
    return re.compile("".join(parts))


def check_output(program: ConstraintProgram, token_ids: list[int], tokenizer) -> str | None:
    """None if `token_ids` (one row, possibly with tokens after the first EOS) is a valid output of the
    program, else why not. Valid: one EOS at the end, length within [min, max], text matching
    program_regex, and the tokenizer's own cut of that text has exactly the program's copy tokens outside
    the holes (so the forced ids are what the tokenizer writes for real fills)."""
    eos = tokenizer.eos_token_id
    if eos not in token_ids:
        return f"no EOS in {len(token_ids)} tokens"
    length = token_ids.index(eos) + 1
    if not program.min_new_tokens <= length <= program.max_new_tokens:
        return f"length {length} outside [{program.min_new_tokens}, {program.max_new_tokens}]"
    text = tokenizer.decode(token_ids[: length - 1], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    match = program_regex(program).fullmatch(text)
    if match is None:
        return f"text does not match the program: {text!r}"
    holes = [match.span(name) for name in match.re.groupindex]  # sorted, disjoint (start, end)
    hole_starts = [h0 for h0, _ in holes]
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    copy_ids = []
    for tok, (begin, end) in zip(encoded["input_ids"], encoded["offset_mapping"]):
        near = bisect.bisect_right(hole_starts, begin) - 1  # the last hole starting at or before `begin`
        candidates = holes[max(near, 0) : near + 2]  # a short token can only touch these two
        if any(h0 <= begin and end <= h1 for h0, h1 in candidates):
            continue  # inside a hole
        if any(begin < h1 and end > h0 for h0, h1 in candidates):
            return f"the tokenizer cuts token {tokenizer.decode([tok])!r} across a hole boundary in {text!r}"
        copy_ids.append(tok)
    if copy_ids + [eos] != program.copy_token_ids():
        return f"re-tokenized copy tokens {copy_ids} differ from the program's {program.copy_token_ids()[:-1]}"
    return None
