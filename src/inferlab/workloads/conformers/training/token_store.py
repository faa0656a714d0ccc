"""The training sequences as a compact file the device can be given: token ids (uint16), one offset per
sequence, each sequence's prompt length and the positions of its stereo-deciding tokens (stereo_tokens.py),
in an npz compressed with xz. A hand pair store (hand_pairs.py) is such a store of the reflected texts, each
with the row of its right-hand text in the split's store. numpy only (no torch, no RDKit):
the build writes it on a CPU, the trainer reads it on a machine that has neither RDKit nor the tokenizer.
"""

from __future__ import annotations

import io
import lzma
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from inferlab.errors import InputError
from inferlab.outputs.atomic import write_bytes_atomic


@dataclass(frozen=True)
class TokenStore:
    tokens: np.ndarray  # [T] uint16, the sequences one after another
    offsets: np.ndarray  # [N + 1] int64: sequence i is tokens[offsets[i]:offsets[i + 1]]
    prompt_lengths: np.ndarray  # [N] int32: the first prompt_lengths[i] tokens of sequence i are its prompt
    stereo_positions: np.ndarray  # [S] int32: positions, within their sequence, of the stereo-deciding tokens
    stereo_offsets: np.ndarray  # [N + 1] int64: sequence i's are stereo_positions[stereo_offsets[i]:...[i + 1]]
    pair_rows: np.ndarray | None = None  # [N] int64 in a hand pair store: sequence i reflects that row's text

    def __len__(self) -> int:
        return len(self.prompt_lengths)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def sequence(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]

    def stereo_tokens(self, i: int) -> np.ndarray:
        return self.stereo_positions[self.stereo_offsets[i]:self.stereo_offsets[i + 1]]


def token_store(sequences: Sequence[Sequence[int]], prompt_lengths: Sequence[int],
                stereo_positions: Sequence[Sequence[int]] | None = None) -> TokenStore:
    """The store of `sequences`; `stereo_positions[i]` (default: none) are sequence i's stereo-deciding tokens."""
    if stereo_positions is None:
        stereo_positions = [()] * len(sequences)
    if not len(sequences) == len(prompt_lengths) == len(stereo_positions):
        raise ValueError(f"{len(sequences)} sequences, {len(prompt_lengths)} prompt lengths and "
                         f"{len(stereo_positions)} lists of stereo positions")
    for i, (sequence, positions) in enumerate(zip(sequences, stereo_positions)):
        if any(not prompt_lengths[i] <= p < len(sequence) for p in positions):
            raise ValueError(f"sequence {i}: a stereo position outside its generation tokens")
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    flat = np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences] or [np.zeros(0, np.int64)])
    if flat.size and (flat.min() < 0 or flat.max() > np.iinfo(np.uint16).max):
        raise InputError("token ids outside 0-65535 cannot be stored as uint16; reduce the vocabulary first")
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    stereo = [np.asarray(p, dtype=np.int32) for p in stereo_positions]
    stereo_offsets = np.concatenate([[0], np.cumsum([len(p) for p in stereo], dtype=np.int64)])
    return TokenStore(flat.astype(np.uint16), offsets, np.asarray(prompt_lengths, dtype=np.int32),
                      np.concatenate(stereo or [np.zeros(0, np.int32)]), stereo_offsets)


def hand_pair_store(wrong: TokenStore, rows: Sequence[int]) -> TokenStore:
    """`wrong` (the reflected texts) as a hand pair store: sequence i reflects row rows[i] of its split's store."""
    if len(rows) != len(wrong):
        raise ValueError(f"{len(wrong)} reflected texts and {len(rows)} rows")
    return replace(wrong, pair_rows=np.asarray(rows, dtype=np.int64))


def write_token_store(path: str | Path, store: TokenStore) -> Path:
    buffer = io.BytesIO()
    pairs = {} if store.pair_rows is None else {"pair_rows": store.pair_rows}
    np.savez(buffer, tokens=store.tokens, offsets=store.offsets, prompt_lengths=store.prompt_lengths,
             stereo_positions=store.stereo_positions, stereo_offsets=store.stereo_offsets, **pairs)
    return write_bytes_atomic(path, lzma.compress(buffer.getvalue(), preset=9))


def read_token_store(path: str | Path) -> TokenStore:
    path = Path(path)
    try:
        arrays = np.load(io.BytesIO(lzma.decompress(path.read_bytes())))
        return TokenStore(arrays["tokens"], arrays["offsets"], arrays["prompt_lengths"], arrays["stereo_positions"],
                          arrays["stereo_offsets"], arrays["pair_rows"] if "pair_rows" in arrays else None)
    except (OSError, lzma.LZMAError, ValueError, KeyError) as e:
        raise InputError(f"{path} is not a token store of this version ({e}); rebuild the data (build-data)") from None
