"""`build-data`: the reference model's data, on the CPU, resumable, in worker processes.

1. Molecules (seconds): the three source lists (molecule_sources.py) -> candidates (molecule_selection.py)
   -> split labels (scaffold_split.py). The list is recorded in the work folder; a rerun that would make
   another list (other sources, other code) is refused instead of mixing two.
2. Texts (the long part: ETKDG): chunks of molecules, each a file of the work folder written when the chunk
   is done (conformer_texts.py, in `workers` processes; a molecule's stereo variants with it, no new
   embedding); a rerun makes only the missing chunks.
3. Tokens: every prompt, conformer text and probe text cut by qwen3-chem; the reduced tokenizer made of the
   tokens they use (models/vocabulary_reduction.py) and written to OUT/tokenizer; every text cut again by
   the reduced tokenizer, loaded from that folder, must give qwen3-chem's ids exactly (mapped), or the
   build fails; then the train and validation token stores (each molecule's texts, then its variants'),
   the split file and the data manifest (variant texts counted apart, and the stereo check of every text).

OUT holds what training needs (and nothing else, so it can be carried to the device): tokenizer/,
train.npz.xz, validation.npz.xz, split.tsv, data_manifest.json. The work folder is OUT.work beside it.
"""

from __future__ import annotations

import json
import logging
import lzma
import math
import time
from collections import Counter
from concurrent.futures import as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rdkit

from inferlab.errors import InputError
from inferlab.outputs.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from inferlab.workloads.conformers.training import conformer_texts
from inferlab.workloads.conformers.training.conformer_texts import MoleculeTexts
from inferlab.workloads.conformers.training.data_layout import HELD_OUT_FILE, MANIFEST, SPLIT_FILE
from inferlab.workloads.conformers.training.molecule_selection import MAX_ATOMS, MIN_ATOMS, select_molecules
from inferlab.workloads.conformers.training.molecule_sources import read_sources, source_digests, source_paths
from inferlab.workloads.conformers.training.scaffold_split import (
    LARGE_GROUP_SHARE,
    SHARES,
    SPLITS,
    SplitRow,
    assign_splits,
    group_key,
    held_out_smi_text,
    split_text,
)
from inferlab.workloads.conformers.training.stereo_variants import KINDS
from inferlab.workloads.conformers.training.token_build import build_tokens

log = logging.getLogger(__name__)

SEED = 27  # the recipe's seed: split hash, ETKDG seeds, probe coordinates
CHUNK_MOLECULES = 48
POOL_ATTEMPTS = 3  # pools started before a build gives up on workers that keep dying


@dataclass(frozen=True)
class BuildConfig:
    out: Path
    workers: int = 2
    seed: int = SEED
    limit: int | None = None  # only the first `limit` candidates of each split (tests, trials)

    @property
    def work(self) -> Path:
        return self.out.with_name(self.out.name + ".work")


def build_data(config: BuildConfig) -> dict[str, Any]:
    """Build (or finish building) the data in config.out; returns the manifest."""
    started = time.perf_counter()
    paths = source_paths()
    candidates, dropped = select_molecules(read_sources(paths))
    splits = assign_splits([group_key(c.canonical_smiles, c.scaffold) for c in candidates], config.seed)
    if config.limit is not None:  # a trial: the first molecules of each split, labelled as in the whole list
        first = [i for split in SPLITS for i in [k for k, s in enumerate(splits) if s == split][: config.limit]]
        candidates, splits = [candidates[i] for i in sorted(first)], [splits[i] for i in sorted(first)]
    rows = [(c.id, c.canonical_smiles, split) for c, split in zip(candidates, splits)]
    _record_molecule_list(config, rows)
    log.info("%d candidate molecules (%s)", len(rows), _counts(Counter(splits)))

    texts = _make_texts(config, rows)
    kept = [t for t in texts if t.dropped_at is None]
    dropped.update(f"texts: {t.dropped_at}" for t in texts if t.dropped_at is not None)
    dropped.update(f"variants: {v['kind']}: {v['at']}" for t in kept for v in t.variants_left_out)
    by_id = {c.id: c for c in candidates}
    split_rows = [SplitRow(t.id, by_id[t.id].source, t.canonical_smiles, by_id[t.id].num_atoms,
                           by_id[t.id].scaffold, t.split) for t in kept]

    tokens = build_tokens(kept, config.out)
    write_text_atomic(config.out / SPLIT_FILE, split_text(split_rows))
    write_text_atomic(config.out / HELD_OUT_FILE, held_out_smi_text(split_rows))
    manifest = {
        "recipe": {"seed": config.seed, "profile": conformer_texts.PROFILE,
                   "conformers_per_molecule": conformer_texts.NUM_CONFORMERS, "atoms": [MIN_ATOMS, MAX_ATOMS],
                   "split_shares": SHARES, "large_group_share": LARGE_GROUP_SHARE, "stereo_variants": list(KINDS),
                   "limit": config.limit},
        "rdkit": rdkit.__version__,
        "sources": {name: {"file": path.name, "sha256": digest}
                    for (name, path), digest in zip(paths.items(), source_digests(paths).values())},
        "molecules": {split: sum(1 for r in split_rows if r.split == split) for split in SPLITS},
        "dropped": dict(sorted(dropped.items(), key=lambda kv: -kv[1])),
        "dropped_molecules": [{"id": t.id, "at": t.dropped_at, "why": t.error} for t in texts if t.dropped_at],
        "dropped_variants": [{"id": t.id, **v} for t in kept for v in t.variants_left_out],
        "stereo_agreement": _stereo_agreement(kept),
        **tokens,
        "build_s": round(time.perf_counter() - started, 1),
    }
    write_json_atomic(config.out / MANIFEST, manifest)
    log.info("data in %s: %s molecules; %s", config.out, _counts(manifest["molecules"]),
             ", ".join(f"{k} {v}" for k, v in tokens["sequences"].items()))
    return manifest


def _stereo_agreement(kept: list[MoleculeTexts]) -> dict[str, Any]:
    """Per kind of text (the molecules' own, each variant kind): [texts with their prompt's stereo, texts whose
    prompt specifies stereo], by the pipeline's check; a variant text without is not in the data."""
    totals: dict[str, list[int]] = {}
    for molecule in kept:
        for kind, (agreeing, judged) in molecule.stereo.items():
            counts = totals.setdefault(kind, [0, 0])
            counts[0] += agreeing
            counts[1] += judged
    return {"texts": {kind: totals.get(kind, [0, 0]) for kind in (conformer_texts.OWN, *KINDS)},
            "rule": "[agreeing, judged] conformer texts of train and validation molecules: chemistry/stereo.py on "
                    "the text decoded by its template, against the prompt's specified stereo"}


def _counts(counter) -> str:
    return ", ".join(f"{split} {counter.get(split, 0)}" for split in SPLITS)


def _record_molecule_list(config: BuildConfig, rows: list[tuple[str, str, str]]) -> None:
    record = {"seed": config.seed, "profile": conformer_texts.PROFILE,
              "conformers_per_molecule": conformer_texts.NUM_CONFORMERS, "chunk_molecules": CHUNK_MOLECULES,
              "stereo_variants": list(KINDS), "molecules": rows}  # chunks made before the variants are refused
    path = config.work / "molecules.json"
    config.work.mkdir(parents=True, exist_ok=True)
    if path.exists():
        if json.loads(path.read_text()) != json.loads(json.dumps(record)):
            raise InputError(f"{config.work} was started for another molecule list or recipe; remove it (and "
                             f"{config.out}) to start over, or build into another --out")
        return
    write_json_atomic(path, record)


def _chunk_path(config: BuildConfig, index: int) -> Path:
    return config.work / "texts" / f"{index:05d}.json.xz"


def _make_texts(config: BuildConfig, rows: list[tuple[str, str, str]]) -> list[MoleculeTexts]:
    chunks = [rows[i:i + CHUNK_MOLECULES] for i in range(0, len(rows), CHUNK_MOLECULES)]
    missing = _missing(config, len(chunks))
    log.info("texts: %d of %d chunks of %d molecules to make (%d workers)", len(missing), len(chunks),
             CHUNK_MOLECULES, config.workers)
    progress = _Progress(len(missing), sum(len(chunks[k]) for k in missing))
    if config.workers == 0 and missing:
        _init_worker(config.seed)
        for k in missing:
            _write_chunk(config, k, _make_chunk(chunks[k]))
            progress.done(len(chunks[k]))
    for attempt in range(1, POOL_ATTEMPTS + 1):
        missing = _missing(config, len(chunks))
        if not missing:
            break
        try:
            _make_in_pool(config, chunks, missing, progress)
        except BrokenProcessPool:  # a worker killed from outside (the OOM killer of a shared machine)
            log.warning("a text worker died (attempt %d of %d); the chunks written are kept", attempt, POOL_ATTEMPTS)
    missing = _missing(config, len(chunks))
    if missing:
        raise InputError(f"{len(missing)} chunks of conformer texts could not be made (workers kept dying); "
                         "rerun the same command to resume")
    texts = []
    for k in range(len(chunks)):
        texts += [MoleculeTexts.from_json(entry)
                  for entry in json.loads(lzma.decompress(_chunk_path(config, k).read_bytes()))]
    return texts


def _missing(config: BuildConfig, chunks: int) -> list[int]:
    return [k for k in range(chunks) if not _chunk_path(config, k).exists()]


def _make_in_pool(config: BuildConfig, chunks: list, missing: list[int], progress: _Progress) -> None:
    from inferlab.child_processes import spawn_pool

    with spawn_pool(config.workers, _init_worker, (config.seed,)) as pool:
        futures = {pool.submit(_make_chunk, chunks[k]): k for k in missing}
        for future in as_completed(futures):
            _write_chunk(config, futures[future], future.result())
            progress.done(len(chunks[futures[future]]))


def _write_chunk(config: BuildConfig, index: int, texts: list[dict[str, Any]]) -> None:
    write_bytes_atomic(_chunk_path(config, index), lzma.compress(json.dumps(texts).encode()))


class _Progress:
    def __init__(self, chunks: int, molecules: int) -> None:
        self.chunks, self.molecules = chunks, molecules
        self.chunks_done = self.molecules_done = 0
        self.started = time.perf_counter()

    def done(self, molecules: int) -> None:
        self.chunks_done += 1
        self.molecules_done += molecules
        elapsed = time.perf_counter() - self.started
        rate = self.molecules_done / elapsed
        eta = (self.molecules - self.molecules_done) / rate if rate else math.inf
        log.info("texts: chunk %d of %d, %d of %d molecules, %.2f molecules/s, %.0f s elapsed, ETA %.0f s",
                 self.chunks_done, self.chunks, self.molecules_done, self.molecules, rate, elapsed, eta)


_MAKER: conformer_texts.TextMaker | None = None  # one per worker process, set by its initializer


def _init_worker(seed: int) -> None:
    global _MAKER
    import torch

    from inferlab.constraints.token_automaton import grammar_set_for
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir
    from inferlab.models.tokenizer_loading import load_tokenizer

    torch.set_num_threads(1)
    tokenizer = load_tokenizer(qwen3_chem_tokenizer_dir())
    _MAKER = conformer_texts.TextMaker(tokenizer, grammar_set_for(tokenizer), seed)


def _make_chunk(rows: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    assert _MAKER is not None, "the worker initializer did not run"
    return [_MAKER.make(molecule_id, smiles, split).to_json() for molecule_id, smiles, split in rows]

