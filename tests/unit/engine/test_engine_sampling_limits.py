"""Sampling settings are finite and in range wherever they enter (SamplingParams checks every value, so the
CLI flags, the JSONL lines and the Python API refuse alike), and a constrained request stays valid at every
setting accepted: the extremes of each range are driven through the CPU engine with the conformer
constraint, each output checked by the template and by RDKit."""

from __future__ import annotations

import math

import pytest
from test_engine_constrained import _assert_valid, _conformer_request, small_nci_molecules

from inferlab.engine import Engine, EngineConfig
from inferlab.errors import ConfigError
from inferlab.types import MAX_TEMPERATURE, MIN_TEMPERATURE, SamplingParams

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

EXTREMES = [
    dict(temperature=MIN_TEMPERATURE, seed=1),
    dict(temperature=MAX_TEMPERATURE, seed=2),
    dict(temperature=MAX_TEMPERATURE, top_k=1, seed=3),
    dict(temperature=MIN_TEMPERATURE, top_p=1e-9, seed=4),
    dict(temperature=MAX_TEMPERATURE, top_p=1e-9, min_p=0.999999, seed=5),
    dict(temperature=MAX_TEMPERATURE, top_k=2**31 - 1, top_p=1.0, seed=6),
]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e-45, MIN_TEMPERATURE / 2, MAX_TEMPERATURE * 2,
                                   -1.0, "0.5", True])
def test_a_temperature_outside_the_range_is_refused_by_name(value):
    with pytest.raises(ConfigError, match="temperature="):
        SamplingParams(temperature=value)


@pytest.mark.parametrize("field, value", [("top_p", math.nan), ("top_p", math.inf), ("min_p", math.nan),
                                          ("top_k", 2**40), ("top_k", 1.5), ("max_new_tokens", 2.0),
                                          ("stop_token_ids", (2**40,)), ("seed", "7"), ("ignore_eos", 1)])
def test_other_settings_outside_their_range_are_refused_by_name(field, value):
    with pytest.raises(ConfigError, match=f"{field}="):
        SamplingParams(**{field: value})


def test_a_constrained_request_is_valid_at_the_extremes_of_every_accepted_setting(tiny_checkpoint):
    llama_engine = Engine(EngineConfig(model=tiny_checkpoint("tiny"), max_slots=4, max_seq_len=512,
                                       decode_steps_per_sync=8))
    molecules = small_nci_molecules(12, len(EXTREMES))
    cases = [_conformer_request(llama_engine, f"x{i}", smiles, **EXTREMES[i]) for i, smiles in enumerate(molecules)]
    for smiles, (_, template), result in zip(molecules, cases, llama_engine.generate([r for r, _ in cases])):
        _assert_valid(llama_engine, result, template, smiles)
