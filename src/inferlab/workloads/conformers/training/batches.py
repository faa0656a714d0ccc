"""Training batches: sequences of similar length together, a token budget per batch, a seeded order.

Each epoch shuffles the sequences (numpy's Generator of the run's seed), sorts each window of
WINDOW_BATCHES batches' worth by length and cuts it greedily into batches whose rows x padded length stays
within the budget, then shuffles the batches. Padding stays small (neighbours in a sorted window have
nearly equal lengths) while a batch still mixes molecules; the order depends on the seed and the data
alone, never on the machine. Rows are right-padded: causal attention never lets a real token see a pad,
so no attention mask is needed (the fast SDPA kernels run with is_causal alone) and pads only need
their labels ignored.

Labels: every token after the prompt (the conformer text and EOS, what the model writes at inference);
prompt tokens and pads are IGNORE; a mask marks the stereo-deciding tokens (stereo_tokens.py), which the loss
weights. numpy only; the loop turns arrays into tensors.

Hand pairs (hand_pairs.py) come in batches of their own, from their own seeded stream (the main batches'
order stays the recipe's): a pair's length is the longer of its two texts, a batch holds its right-hand
texts then their reflections in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from inferlab.workloads.conformers.training.token_store import TokenStore

IGNORE = -100  # the label of a token the loss skips (torch's cross_entropy ignore_index)
WINDOW_BATCHES = 16
PAD_MULTIPLE = 8  # padded lengths are multiples of this


def padded_length(longest: int) -> int:
    return -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE


def cut_batches(order: np.ndarray, lengths: np.ndarray, tokens_per_batch: int) -> list[np.ndarray]:
    """`order` (sequence indices sorted by length) cut into consecutive batches within the token budget."""
    batches, start = [], 0
    for end in range(1, len(order) + 1):
        if end - start > 1 and (end - start) * padded_length(int(lengths[order[end - 1]])) > tokens_per_batch:
            batches.append(order[start:end - 1])
            start = end - 1
    if start < len(order):
        batches.append(order[start:])
    return batches


def epoch_batches(lengths: np.ndarray, tokens_per_batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch's batches (arrays of sequence indices), in training order."""
    if int(lengths.max(initial=0)) > tokens_per_batch:
        raise ValueError(f"a sequence of {int(lengths.max())} tokens exceeds the batch budget of {tokens_per_batch}")
    per_window = max(1, int(WINDOW_BATCHES * tokens_per_batch / max(1.0, float(lengths.mean()))))
    shuffled = rng.permutation(len(lengths))
    batches: list[np.ndarray] = []
    for start in range(0, len(shuffled), per_window):
        window = shuffled[start:start + per_window]
        batches += cut_batches(window[np.argsort(lengths[window], kind="stable")], lengths, tokens_per_batch)
    return [batches[i] for i in rng.permutation(len(batches))]


def training_batches(store: TokenStore, tokens_per_batch: int, seed: int) -> Iterator[np.ndarray]:
    """Batches for ever, epoch after epoch (the loop decides when to stop)."""
    rng = np.random.default_rng(seed)
    lengths = store.lengths
    while True:
        yield from epoch_batches(lengths, tokens_per_batch, rng)


def evaluation_batches(store: TokenStore, tokens_per_batch: int) -> list[np.ndarray]:
    """All sequences in length order, every evaluation the same batches."""
    lengths = store.lengths
    return cut_batches(np.argsort(lengths, kind="stable"), lengths, tokens_per_batch)


def batch_arrays(store: TokenStore, rows: np.ndarray, pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input ids, labels, stereo mask), each [len(rows), padded length]: ids and labels int64, right-padded with
    pad_id, labels IGNORE on prompt tokens and pads; the mask bool, True at the stereo-deciding tokens."""
    ids, labels = _padded([(store, int(row)) for row in rows], pad_id)
    stereo = np.zeros(ids.shape, dtype=bool)
    for r, row in enumerate(rows):
        stereo[r, store.stereo_tokens(int(row))] = True
    return ids, labels, stereo


def pair_lengths(pairs: TokenStore, store: TokenStore) -> np.ndarray:
    """[pairs] the longer of each pair's two texts (`pairs`: a hand pair store of `store`'s split)."""
    return np.maximum(pairs.lengths, store.lengths[pairs.pair_rows])


def pair_training_batches(pairs: TokenStore, store: TokenStore, tokens_per_batch: int,
                          seed: int) -> Iterator[np.ndarray]:
    """Batches of pair indices for ever; a batch's two sides together hold at most tokens_per_batch padded tokens."""
    rng = np.random.default_rng([seed, 1])
    lengths = pair_lengths(pairs, store)
    while True:
        yield from epoch_batches(lengths, tokens_per_batch // 2, rng)


def pair_evaluation_batches(pairs: TokenStore, store: TokenStore, tokens_per_batch: int) -> list[np.ndarray]:
    lengths = pair_lengths(pairs, store)
    return cut_batches(np.argsort(lengths, kind="stable"), lengths, tokens_per_batch // 2)


def pair_batch_arrays(pairs: TokenStore, store: TokenStore, indices: np.ndarray,
                      pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(input ids, labels), each [2 * len(indices), padded length]: the pairs' right-hand texts (rows of
    `store`), then their reflections (rows of `pairs`) in the same order."""
    rights = [(store, int(pairs.pair_rows[i])) for i in indices]
    return _padded(rights + [(pairs, int(i)) for i in indices], pad_id)


def _padded(sequences: list[tuple[TokenStore, int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    lengths = [int(store.lengths[row]) for store, row in sequences]
    width = padded_length(max(lengths))
    ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    labels = np.full((len(sequences), width), IGNORE, dtype=np.int64)
    for r, ((store, row), length) in enumerate(zip(sequences, lengths)):
        sequence = store.sequence(row)
        ids[r, :length] = sequence
        prompt = int(store.prompt_lengths[row])
        labels[r, prompt:length] = sequence[prompt:]
    return ids, labels
