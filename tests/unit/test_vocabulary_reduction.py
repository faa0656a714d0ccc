"""Vocabulary reduction on a toy byte-level BPE trained here: the reduced tokenizer cuts every corpus text
into the full tokenizer's tokens (ids mapped), keeps the intermediate tokens of merge paths although no
text ends with them, still encodes text outside the corpus losslessly, and its folder loads through
inferlab's tokenizer loader; a tokenizer that is not byte-level BPE, and ids it does not have, are refused."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from inferlab.errors import InputError, UnsupportedError
from inferlab.models.tokenizer_loading import load_tokenizer
from inferlab.models.vocabulary_reduction import (
    byte_level_alphabet,
    read_source_ids,
    reduce_bpe_tokenizer,
    write_reduced_tokenizer,
)

TRAINING_TEXT = ["the cat sat on the mat", "a catalogue of catamarans", "mathematics matters", "[CONFORMER]<1.25,-0.5>",
                 "concatenate the categories", "attach the hat to the cat"] * 20
CORPUS = ["the cat sat", "catamarans", "[CONFORMER]<1.25,-0.5>"]


@pytest.fixture(scope="module")
def toy() -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<eos>"], show_progress=False)
    tokenizer.train_from_iterator(TRAINING_TEXT, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>")


def used_ids(tokenizer, texts) -> set[int]:
    return {i for text in texts for i in tokenizer(text, add_special_tokens=False)["input_ids"]}


def test_corpus_texts_cut_exactly_and_merge_paths_are_kept(toy):
    reduced = reduce_bpe_tokenizer(json.loads(toy.backend_tokenizer.to_str()), used_ids(toy, CORPUS))
    small = Tokenizer.from_str(json.dumps(reduced.tokenizer_json))
    for text in CORPUS:
        assert [reduced.source_ids[i] for i in small.encode(text, add_special_tokens=False).ids] == \
            toy(text, add_special_tokens=False)["input_ids"]
    vocab = reduced.tokenizer_json["model"]["vocab"]
    assert set(byte_level_alphabet()) <= set(vocab) and len(byte_level_alphabet()) == 256
    full_vocab = toy.get_vocab()
    final = {toy.convert_ids_to_tokens(i) for i in used_ids(toy, CORPUS)}
    intermediate = set(vocab) - final - set(byte_level_alphabet())
    assert intermediate, "the corpus' tokens are made through tokens no text ends with"
    for a, b in reduced.tokenizer_json["model"]["merges"]:  # every merge kept joins kept tokens
        assert a in vocab and b in vocab and a + b in vocab
    assert reduced.size < len(full_vocab)
    rank = {tuple(m): k for k, m in enumerate(json.loads(toy.backend_tokenizer.to_str())["model"]["merges"])}
    ranks = [rank[tuple(m)] for m in reduced.tokenizer_json["model"]["merges"]]
    assert ranks == sorted(ranks)  # the full tokenizer's merges, in their order


def test_without_the_merge_path_the_cut_would_differ(toy):
    """The intermediate tokens are what makes the cut exact: dropping one gives another segmentation."""
    document = json.loads(toy.backend_tokenizer.to_str())
    reduced = reduce_bpe_tokenizer(document, used_ids(toy, CORPUS))
    final = {toy.convert_ids_to_tokens(i) for i in used_ids(toy, CORPUS)}
    broken = json.loads(json.dumps(reduced.tokenizer_json))
    made = {a + b for a, b in broken["model"]["merges"]}
    dropped = next(t for t in broken["model"]["vocab"] if t in made and t not in final)
    broken["model"]["merges"] = [m for m in broken["model"]["merges"] if dropped not in (m[0], m[1], m[0] + m[1])]
    small = Tokenizer.from_str(json.dumps(broken))
    cut = {text: small.encode(text, add_special_tokens=False).ids for text in CORPUS}
    assert any([reduced.source_ids[i] for i in ids] != toy(text, add_special_tokens=False)["input_ids"]
               for text, ids in cut.items())


def test_text_outside_the_corpus_still_round_trips(toy, tmp_path):
    reduced = reduce_bpe_tokenizer(json.loads(toy.backend_tokenizer.to_str()), used_ids(toy, CORPUS))
    folder = write_reduced_tokenizer(tmp_path / "small", reduced, {"tokenizer_class": "PreTrainedTokenizerFast",
                                                                   "eos_token": "<eos>"}, None, "toy")
    small = load_tokenizer(folder)
    assert len(small) == reduced.size and read_source_ids(folder) == list(reduced.source_ids)
    assert reduced.source_ids[small.eos_token_id] == toy.eos_token_id  # an added token keeps its place
    text = "zebras, quokkas and émus: 42"
    ids = small(text, add_special_tokens=False)["input_ids"]
    assert small.decode(ids) == text and len(ids) >= len(toy(text, add_special_tokens=False)["input_ids"])


def test_what_cannot_be_reduced_is_refused(toy):
    document = json.loads(toy.backend_tokenizer.to_str())
    with pytest.raises(InputError, match="not in the tokenizer"):
        reduce_bpe_tokenizer(document, {10**6})
    document["pre_tokenizer"] = {"type": "Whitespace"}
    with pytest.raises(UnsupportedError, match="byte-level BPE"):
        reduce_bpe_tokenizer(document, {0})
