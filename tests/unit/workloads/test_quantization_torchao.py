"""Quantization through torchao (workloads/quantization.py): unavailable cases say why; int8 runs where
torchao is installed (CI does not install it: that test is skipped there)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from inferlab.errors import ConfigError, UnsupportedError
from inferlab.workloads.classify import load_classifier
from inferlab.workloads.hf_loading import ModelLoadConfig
from inferlab.workloads.quantization import check_quantization_available, quantize_model

CPU = torch.device("cpu")


def test_unknown_name_is_a_config_error():
    with pytest.raises(ConfigError, match="int4"):
        ModelLoadConfig("x", quantization="int4")


def test_fp8_on_cpu_is_unsupported_with_the_reason():
    with pytest.raises(UnsupportedError, match="compute capability >= 8.9; this run is on cpu"):
        check_quantization_available("fp8", CPU)


def test_missing_torchao_is_unsupported_with_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao", None)  # import torchao now raises ImportError
    monkeypatch.setitem(sys.modules, "torchao.quantization", None)
    with pytest.raises(UnsupportedError, match="pip install torchao"):
        check_quantization_available("int8", CPU)
    check_quantization_available("none", CPU)  # no quantization needs nothing


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed")
def test_int8_weight_only_stays_close_to_full_precision(tiny_checkpoint):
    path = str(tiny_checkpoint("tiny-qwen2-cls"))
    ids = [[1372, 71, 68, 75, 75, 78, 220, 86, 78, 81, 75, 67]]
    full = load_classifier(ModelLoadConfig(path, dtype="float32", device="cpu"))
    int8 = load_classifier(ModelLoadConfig(path, dtype="float32", device="cpu", quantization="int8"))
    assert int8.loaded.quantized_layers == 2 * 7  # q,k,v,o,gate,up,down in each of 2 layers; the 3-label head stays
    (label_full, probs_full), = full.predict(ids)
    (label_int8, probs_int8), = int8.predict(ids)
    assert probs_int8 == pytest.approx(probs_full, abs=0.02)
    assert probs_int8 != probs_full  # the weights really changed


def test_quantize_none_is_a_no_op():
    model = torch.nn.Linear(16, 16)
    before = model.weight.clone()
    assert quantize_model(model, "none", CPU) == 0
    assert torch.equal(model.weight, before)
