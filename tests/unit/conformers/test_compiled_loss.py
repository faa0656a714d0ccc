"""The trial lever `train --compile` (compiled_loss.py): the model's causal attention without a mask gives the
eager model's logits on a padded batch, and the step traced by dynamo gives the eager loss sums (backend
"eager" here: dynamo's trace of transformers' model is what these check; inductor's kernels are the
device's to check with `training probe --compile`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import Qwen3ForCausalLM

from inferlab.workloads.conformers.training.batches import IGNORE
from inferlab.workloads.conformers.training.compiled_loss import CAUSAL_ATTENTION, compiled, use_causal_attention
from inferlab.workloads.conformers.training.model_shape import ModelShape, model_config
from inferlab.workloads.conformers.training.train_loop import RECIPE, loss_tensors, train

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

TINY = ModelShape(hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16, intermediate=64)


def padded_batch():
    """Two rows, the second padded at its end (pad id 0, labels IGNORE there)."""
    torch.manual_seed(0)
    ids = torch.randint(1, 60, (2, 14))
    ids[1, 9:] = 0
    labels = ids.clone()
    labels[:, :3] = IGNORE
    labels[1, 9:] = IGNORE
    return ids, labels


def test_the_causal_attention_gives_the_eager_models_logits_where_the_loss_reads_them():
    ids, _ = padded_batch()
    torch.manual_seed(1)
    model = Qwen3ForCausalLM(model_config(TINY, 60, 0)).eval()
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        use_causal_attention(model)
        assert model.config._attn_implementation == CAUSAL_ATTENTION
        got = model(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-5)


def test_the_traced_step_gives_the_eager_loss_sums_and_gradients():
    ids, labels = padded_batch()
    stereo = torch.zeros_like(ids, dtype=torch.bool)
    stereo[0, 6:8] = True
    torch.manual_seed(1)
    eager = Qwen3ForCausalLM(model_config(TINY, 60, 0))
    traced = Qwen3ForCausalLM(model_config(TINY, 60, 0))
    traced.load_state_dict(eager.state_dict())
    use_causal_attention(traced)
    expected = loss_tensors(eager, ids, labels, stereo)
    got = compiled(loss_tensors, backend="eager")(traced, ids, labels, stereo)
    for a, b in zip(got, expected):
        assert torch.allclose(a.float(), b.float(), rtol=1e-5)
    expected[0].backward()
    got[0].backward()
    for (name, a), b in zip(traced.named_parameters(), eager.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-6), name


def test_a_compiled_run_trains_and_records_the_lever(monkeypatch):
    import numpy as np

    from inferlab.workloads.conformers.training import train_loop
    from inferlab.workloads.conformers.training.token_store import token_store

    monkeypatch.setattr(train_loop, "compiled", lambda fn: compiled(fn, backend="eager"))
    rng = np.random.default_rng(0)
    stores = [token_store([rng.integers(1, 60, size=k) for k in rng.integers(30, 90, size=n)], [10] * n)
              for n in (16, 4)]
    config = replace(RECIPE, steps=2, tokens_per_batch=1024, warmup_steps=1, eval_every=2, log_every=1,
                     compile=True)
    torch.manual_seed(config.seed)
    model = Qwen3ForCausalLM(model_config(TINY, 60, 0))
    result = train(model, *stores, config, torch.device("cpu"), 0, lambda row: None)
    assert result.steps == 2 and result.validation_loss is not None
    assert config.to_json()["compile"] is True and RECIPE.to_json()["compile"] is False
