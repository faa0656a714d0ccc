"""The build's last stage: the reduced tokenizer, the proof that it cuts every text as qwen3-chem does, and
the token stores.

Texts are cut by the tokenizers' own transformers objects, as the pipeline cuts them: a prompt with
add_special_tokens=True (template.prompt_ids), a generation text (conformer or probe) without; a molecule's
stereo variants (stereo_variants.py) are texts like its own, in its split, right after it; its form with
stereo assigned (the quality preset's prompt) gives a prompt and probe texts, cut for the vocabulary and
the proof only. Pass 1 cuts
every text with qwen3-chem to learn the tokens used; the reduced tokenizer is written and loaded back
from its folder (the loader the engine uses); pass 2 cuts every text with both and compares the ids, the
reduced ones mapped through the id map. One difference fails the build. Each conformer text's stereo-deciding
tokens (stereo_tokens.py) are found from qwen3-chem's character offsets, the same cut. Texts go in batches, as
numpy, so memory stays bounded (tens of millions of tokens).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from inferlab.errors import InputError
from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir
from inferlab.models.tokenizer_loading import load_tokenizer
from inferlab.models.vocabulary_reduction import reduce_bpe_tokenizer, write_reduced_tokenizer
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.training.conformer_texts import PROFILE, MoleculeTexts
from inferlab.workloads.conformers.training.data_layout import (
    TOKENIZER_DIR,
    TRAIN_HAND_PAIRS,
    TRAIN_TOKENS,
    VALIDATION_HAND_PAIRS,
    VALIDATION_TOKENS,
)
from inferlab.workloads.conformers.training.hand_pairs import wrong_hand_text
from inferlab.workloads.conformers.training.scaffold_split import HELD_OUT, TRAIN, VALIDATION
from inferlab.workloads.conformers.training.stereo_tokens import block_token_positions, deciding_atoms
from inferlab.workloads.conformers.training.stereo_variants import KINDS
from inferlab.workloads.conformers.training.token_store import hand_pair_store, token_store, write_token_store

log = logging.getLogger(__name__)

STORES = {TRAIN: TRAIN_TOKENS, VALIDATION: VALIDATION_TOKENS}
PAIR_STORES = {TRAIN: TRAIN_HAND_PAIRS, VALIDATION: VALIDATION_HAND_PAIRS}
SOURCE_TOKENIZER = "qwen3-chem"
_BATCH = 1024  # texts per tokenizer call


def build_tokens(kept: list[MoleculeTexts], out: Path) -> dict[str, Any]:
    """Write OUT/tokenizer and the token stores; return the manifest's token figures."""
    source_dir = qwen3_chem_tokenizer_dir()
    full = load_tokenizer(source_dir)
    # (split, variant kind or None, texts): each molecule, then its stereo variants, then its assign_stereo
    # form's prompt and probes (no conformer texts: the vocabulary's, never training data)
    sources = [(t.split, kind, source) for t in kept
               for kind, source in [(None, t), *((v.kind, v) for v in t.variants),
                                    *([] if t.enumerated is None else [(None, t.enumerated)])]]
    prompts = [source.prompt for _, _, source in sources]
    generations = [text for _, _, source in sources for text in source.conformers + source.probes]
    wrong = _wrong_hand_texts(sources)  # (source index, conformer index) -> the reflected text (hand_pairs.py)

    used = {full.eos_token_id}
    for ids in _cut(full, prompts, True):
        used.update(ids)
    for ids in _cut(full, generations + list(wrong.values()), False):
        used.update(ids)
    reduced = reduce_bpe_tokenizer(json.loads(full.backend_tokenizer.to_str()), used)
    folder = write_reduced_tokenizer(out / TOKENIZER_DIR, reduced, _json(source_dir / "tokenizer_config.json"),
                                     _json(source_dir / "special_tokens_map.json"), SOURCE_TOKENIZER)
    small = load_tokenizer(folder)
    source_ids = np.asarray(reduced.source_ids, dtype=np.int64)
    if len(small) != reduced.size or source_ids[small.eos_token_id] != full.eos_token_id:
        raise InputError(f"the tokenizer loaded from {folder} is not the one written ({len(small)} tokens, "
                         f"{reduced.size} written); check the transformers version")
    log.info("reduced vocabulary: %d of %d tokens, %d merges", reduced.size, len(full),
             len(reduced.tokenizer_json["model"]["merges"]))

    prompt_ids = _exact_cuts(full, small, source_ids, prompts, True)
    generation_ids = iter(_exact_cuts(full, small, source_ids, generations, False))
    wrong_ids = dict(zip(wrong, _exact_cuts(full, small, source_ids, list(wrong.values()), False)))
    pairs: dict[str, tuple[list[int], list[np.ndarray]]] = {TRAIN: ([], []), VALIDATION: ([], [])}  # rows, texts
    sequences: dict[str, list[np.ndarray]] = {TRAIN: [], VALIDATION: []}
    prompt_lengths: dict[str, list[int]] = {TRAIN: [], VALIDATION: []}
    stereo_positions: dict[str, list[list[int]]] = {TRAIN: [], VALIDATION: []}
    variant_counts = {kind: {"prompts": {TRAIN: 0, VALIDATION: 0}, "sequences": {TRAIN: 0, VALIDATION: 0},
                             "tokens": {TRAIN: 0, VALIDATION: 0}} for kind in KINDS}
    longest_probe = 0
    eos = np.array([small.eos_token_id], dtype=np.uint16)
    for source_index, ((split, kind, source), prompt) in enumerate(zip(sources, prompt_ids)):
        counts = variant_counts.get(kind)
        if counts is not None:
            counts["prompts"][split] += 1
        for text_index, positions in enumerate(_stereo_positions(full, source.canonical_smiles, source.conformers)):
            generation = next(generation_ids)
            reflected = wrong_ids.get((source_index, text_index))
            if reflected is not None:
                pairs[split][0].append(len(sequences[split]))
                pairs[split][1].append(np.concatenate([prompt, reflected, eos]))
            sequences[split].append(np.concatenate([prompt, generation, eos]))
            prompt_lengths[split].append(len(prompt))
            stereo_positions[split].append([len(prompt) + k for k in positions])
            if counts is not None:
                counts["sequences"][split] += 1
                counts["tokens"][split] += len(sequences[split][-1])
        for _ in source.probes:
            longest_probe = max(longest_probe, len(prompt) + len(next(generation_ids)) + 1)

    files = {}
    for split, name in STORES.items():
        write_token_store(out / name, token_store(sequences[split], prompt_lengths[split], stereo_positions[split]))
        files[name] = hashlib.sha256((out / name).read_bytes()).hexdigest()
    for split, name in PAIR_STORES.items():
        rows, texts = pairs[split]
        wrong_store = token_store(texts, [int(prompt_lengths[split][r]) for r in rows])
        write_token_store(out / name, hand_pair_store(wrong_store, rows))
        files[name] = hashlib.sha256((out / name).read_bytes()).hexdigest()
    lengths = {split: [len(s) for s in rows] for split, rows in sequences.items()}
    return {
        "sequences": {split: len(rows) for split, rows in lengths.items()},  # stereo variants' included
        "tokens": {split: int(sum(rows)) for split, rows in lengths.items()},
        "stereo_variants": variant_counts,  # of those, the variants' (stereo_variants.py), per kind
        "stereo_tokens": {split: int(sum(len(p) for p in rows)) for split, rows in stereo_positions.items()},
        "hand_pairs": {split: len(rows) for split, (rows, _) in pairs.items()},  # hand_pairs.py
        "longest_sequence": max(max(rows, default=0) for rows in lengths.values()),
        "longest_probe_sequence": longest_probe,  # held-out molecules included
        "vocabulary": {"source": SOURCE_TOKENIZER, "source_size": len(full), "reduced_size": reduced.size,
                       "merges": len(reduced.tokenizer_json["model"]["merges"])},
        "exactness": {"prompts": len(prompts), "generation_texts": len(generations), "differences": 0,
                      "held_out_molecules": sum(1 for t in kept if t.split == HELD_OUT),
                      "rule": "the reduced tokenizer's ids, mapped through vocabulary_map.json, equal qwen3-chem's "
                              "for every prompt, conformer text and probe text of every kept molecule, of "
                              "its stereo variants and of its form with stereo assigned (assign_stereo)"},
        "files": files,
    }


def _json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _wrong_hand_texts(sources: list[tuple[str, str | None, Any]]) -> dict[tuple[int, int], str]:
    """(source index, conformer index) -> the conformer text reflected (hand_pairs.py), for every training and
    validation conformer text whose prompt specifies a tetrahedral centre and whose reflection differs from it
    in the hand alone."""
    profile = get_profile(PROFILE)
    wrong = {}
    for k, (_, _, source) in enumerate(sources):
        if "@" not in source.canonical_smiles or not source.conformers:
            continue
        template = build_template(source.canonical_smiles, profile)
        for j, text in enumerate(source.conformers):
            reflected = wrong_hand_text(template, text, profile)
            if reflected is not None:
                wrong[(k, j)] = reflected
    log.info("hand pairs: %d conformer texts reflected", len(wrong))
    return wrong


def _cut(tokenizer, texts: list[str], special: bool) -> Iterator[list[int]]:
    for start in range(0, len(texts), _BATCH):
        batch = tokenizer(texts[start:start + _BATCH], add_special_tokens=special, return_attention_mask=False)
        yield from batch["input_ids"]


def _stereo_positions(tokenizer, canonical_smiles: str, texts: list[str]) -> list[list[int]]:
    """Per text, the indices of its stereo-deciding tokens among its generation tokens."""
    atoms, num_atoms = deciding_atoms(canonical_smiles)
    if not atoms or not texts:
        return [[] for _ in texts]
    cuts = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return [block_token_positions(text, offsets, atoms, num_atoms) for text, offsets in zip(texts, cuts)]


def _exact_cuts(full, small, source_ids: np.ndarray, texts: list[str], special: bool) -> list[np.ndarray]:
    """The reduced tokenizer's ids of each text; InputError at the first text qwen3-chem cuts otherwise."""
    cuts = []
    for k, (want, got) in enumerate(zip(_cut(full, texts, special), _cut(small, texts, special))):
        got = np.asarray(got, dtype=np.int64)
        if len(got) != len(want) or not np.array_equal(source_ids[got], want):
            raise InputError(f"the reduced tokenizer cuts text {k} differently from {SOURCE_TOKENIZER}: "
                             f"{texts[k][:120]!r}...; the vocabulary reduction is wrong for this tokenizer")
        cuts.append(got.astype(np.uint16))
    return cuts
