"""The training sequences as a compact file the device can be given: token ids (uint16), one offset per
sequence and each sequence's prompt length, in an npz compressed with xz. numpy only (no torch, no RDKit):
the build writes it on a CPU, the trainer reads it on a machine that has neither RDKit nor the tokenizer.
"""

from __future__ import annotations

import io
import lzma
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferlab.errors import InputError
from inferlab.outputs.atomic import write_bytes_atomic


@dataclass(frozen=True)
class TokenStore:
    tokens: np.ndarray  # [T] uint16, the sequences one after another
    offsets: np.ndarray  # [N + 1] int64: sequence i is tokens[offsets[i]:offsets[i + 1]]
    prompt_lengths: np.ndarray  # [N] int32: the first prompt_lengths[i] tokens of sequence i are its prompt

    def __len__(self) -> int:
        return len(self.prompt_lengths)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def sequence(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]


def token_store(sequences: Sequence[Sequence[int]], prompt_lengths: Sequence[int]) -> TokenStore:
    if len(sequences) != len(prompt_lengths):
        raise ValueError(f"{len(sequences)} sequences but {len(prompt_lengths)} prompt lengths")
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    flat = np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences] or [np.zeros(0, np.int64)])
    if flat.size and (flat.min() < 0 or flat.max() > np.iinfo(np.uint16).max):
        raise InputError("token ids outside 0-65535 cannot be stored as uint16; reduce the vocabulary first")
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return TokenStore(flat.astype(np.uint16), offsets, np.asarray(prompt_lengths, dtype=np.int32))


def write_token_store(path: str | Path, store: TokenStore) -> Path:
    buffer = io.BytesIO()
    np.savez(buffer, tokens=store.tokens, offsets=store.offsets, prompt_lengths=store.prompt_lengths)
    return write_bytes_atomic(path, lzma.compress(buffer.getvalue(), preset=9))


def read_token_store(path: str | Path) -> TokenStore:
    path = Path(path)
    try:
        arrays = np.load(io.BytesIO(lzma.decompress(path.read_bytes())))
        return TokenStore(arrays["tokens"], arrays["offsets"], arrays["prompt_lengths"])
    except (OSError, lzma.LZMAError, ValueError, KeyError) as e:
        raise InputError(f"{path} is not a token store ({e}); rebuild the data (build-data)") from None
