"""The split of the reference molecules into train / validation / held-out, by scaffold, and its file.

A molecule's group is its Bemis-Murcko scaffold; an acyclic molecule (empty scaffold) is a group of its own,
since "no ring" is not a chemotype and one group of ~14% of the molecules would land in a single split. A
group goes to a split by a hash of the seed and its key (SHA-256: no order, no randomness but the seed's),
except that a group of more than LARGE_GROUP_SHARE of all molecules goes to train: benzene
alone holds ~15%, and hashed into held-out it would nearly double that split and make it mostly benzenes
(the rule of chemprop's balanced scaffold split); the other groups' shares are scaled so that the three
splits still come out near SHARES. Held-out scaffolds are then absent from training:
held-out molecules are new chemistry, not neighbours of training molecules.

The split file (SPLIT_COLUMNS, TSV) is committed beside the reference model, so the evaluation and the
tests know the held-out molecules without rebuilding anything; so is held_out.smi, the held-out molecules
with their sources interleaved (one of each source in turn), so that the first N of it, which an evaluation
of N molecules takes, mix NCI's stereo-free molecules with ChEMBL's stereocentres.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from inferlab.errors import InputError

TRAIN, VALIDATION, HELD_OUT = "train", "validation", "held_out"
SPLITS = (TRAIN, VALIDATION, HELD_OUT)
SHARES = {TRAIN: 0.88, VALIDATION: 0.04, HELD_OUT: 0.08}
LARGE_GROUP_SHARE = 0.01
SPLIT_COLUMNS = ("id", "source", "canonical_smiles", "num_atoms", "scaffold", "split")


@dataclass(frozen=True)
class SplitRow:
    id: str
    source: str
    canonical_smiles: str
    num_atoms: int
    scaffold: str
    split: str


def group_key(canonical_smiles: str, scaffold: str) -> str:
    return scaffold if scaffold else f"acyclic:{canonical_smiles}"


def assign_splits(keys: list[str], seed: int) -> list[str]:
    """The split of each molecule, given its group key (group_key) in the list of all molecules. The hashed
    groups' validation and held-out shares are raised by the share the large groups take, so that the
    splits come out near SHARES."""
    sizes = Counter(keys)
    large = {key for key, size in sizes.items() if size > len(keys) * LARGE_GROUP_SHARE}
    hashed = sum(1 for key in keys if key not in large)
    scale = len(keys) / hashed if hashed else 1.0
    cuts = (1.0 - (SHARES[VALIDATION] + SHARES[HELD_OUT]) * scale, 1.0 - SHARES[HELD_OUT] * scale)
    if cuts[0] < 0:
        raise InputError(f"groups of more than {LARGE_GROUP_SHARE:.0%} of the molecules hold {1 - 1 / scale:.0%} "
                         "of them, too many to leave room for validation and held-out molecules")
    return [TRAIN if key in large else hashed_split(key, seed, cuts) for key in keys]


def hashed_split(key: str, seed: int, cuts: tuple[float, float]) -> str:
    """TRAIN below cuts[0], VALIDATION below cuts[1], else HELD_OUT, by a hash of (seed, key) in [0, 1)."""
    bucket = int.from_bytes(hashlib.sha256(f"{seed}\x00{key}".encode()).digest()[:8], "big") / 2.0**64
    return TRAIN if bucket < cuts[0] else VALIDATION if bucket < cuts[1] else HELD_OUT


def split_text(rows: Iterable[SplitRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, delimiter="\t", lineterminator="\n")
    writer.writerow(SPLIT_COLUMNS)
    for row in rows:
        writer.writerow([getattr(row, column) for column in SPLIT_COLUMNS])
    return out.getvalue()


def held_out_smi_text(rows: Iterable[SplitRow]) -> str:
    """The held-out molecules as a .smi file ("SMILES id" lines), sources taken in turn in the order they
    first appear; within a source, the split file's order."""
    by_source: dict[str, list[SplitRow]] = {}
    for row in rows:
        if row.split == HELD_OUT:
            by_source.setdefault(row.source, []).append(row)
    queues = list(by_source.values())
    lines = [f"{queue[i].canonical_smiles} {queue[i].id}\n"
             for i in range(max(map(len, queues), default=0)) for queue in queues if i < len(queue)]
    return "".join(lines)


def read_split(path: str | Path) -> list[SplitRow]:
    path = Path(path)
    text = path.read_text()
    reader = csv.reader(io.StringIO(text), delimiter="\t")
    header = tuple(next(reader, ()))
    if header != SPLIT_COLUMNS:
        raise InputError(f"{path} is not a split file: its header is {header}, expected {SPLIT_COLUMNS}")
    rows = [SplitRow(r[0], r[1], r[2], int(r[3]), r[4], r[5]) for r in reader]
    unknown = {row.split for row in rows} - set(SPLITS)
    if unknown:
        raise InputError(f"{path} names unknown splits {sorted(unknown)}; expected {', '.join(SPLITS)}")
    return rows
