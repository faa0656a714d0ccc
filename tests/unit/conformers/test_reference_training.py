"""The reference model's training on CPU: the schedule; the loop on a tiny model, twice from one seed with
identical weights, and stopped (and marked) by its wall-clock budget; the trainer's modules import no
RDKit (the device has none); and, end to end on a trial build of 3 molecules (their stereo variants
counted apart), a checkpoint that transformers loads and the engine runs, writing valid constrained
conformers."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from transformers import Qwen3ForCausalLM

from inferlab.workloads.conformers.training.model_shape import ModelShape, model_config
from inferlab.workloads.conformers.training.token_store import token_store
from inferlab.workloads.conformers.training.train_loop import RECIPE, learning_rate, train

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

TINY = ModelShape(hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16, intermediate=64)
TINY_RUN = replace(RECIPE, steps=4, tokens_per_batch=2048, warmup_steps=2, eval_every=2, log_every=1)


def test_the_learning_rate_warms_up_then_decays_to_its_final_share():
    config = replace(RECIPE, steps=1000, warmup_steps=100, peak_lr=1e-3, final_lr_share=0.1)
    assert learning_rate(0, config) == pytest.approx(1e-5) and learning_rate(99, config) == pytest.approx(1e-3)
    rates = [learning_rate(s, config) for s in range(100, 1000)]
    assert all(a >= b for a, b in zip(rates, rates[1:])) and learning_rate(1000, config) == pytest.approx(1e-4)


def tiny_model_and_batch(rows: int, length: int, prompt: int):
    """A tiny random model and a batch of random ids whose first `prompt` labels are IGNORE."""
    from inferlab.workloads.conformers.training.batches import IGNORE

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(model_config(TINY, 60, 0))
    ids = torch.randint(1, 60, (rows, length))
    labels = ids.clone()
    labels[:, :prompt] = IGNORE
    return model, ids, labels


def test_the_loss_is_the_cross_entropy_of_the_tokens_after_the_prompt():
    from inferlab.workloads.conformers.training.batches import IGNORE
    from inferlab.workloads.conformers.training.train_loop import token_loss_sums

    model, ids, labels = tiny_model_and_batch(3, 12, 4)
    labels[2, 9:] = IGNORE
    with torch.no_grad():
        sums = token_loss_sums(model, ids, labels)
        loss, count = sums.total, sums.tokens
        logits = model(input_ids=ids).logits
        expected = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                     labels[:, 1:].reshape(-1), ignore_index=IGNORE,
                                                     reduction="sum")
    assert int(count) == 3 * 8 - 3 and float(loss) == pytest.approx(float(expected), rel=1e-5)


def test_the_stereo_deciding_tokens_weigh_stereo_weight_times_the_others_in_the_objective():
    from inferlab.workloads.conformers.training.train_loop import token_loss_sums

    model, ids, labels = tiny_model_and_batch(2, 10, 3)
    stereo = torch.zeros(2, 10, dtype=torch.bool)
    stereo[0, 5:7] = True
    stereo[1, 2] = True  # a prompt position: never counted
    with torch.no_grad():
        sums = token_loss_sums(model, ids, labels, stereo)
        log_p = model(input_ids=ids).logits[:, :-1].float().log_softmax(-1)
    nll = -log_p.gather(-1, ids[:, 1:, None])[..., 0]  # [2, 9]: label t + 1 at position t
    assert int(sums.stereo_tokens) == 2 and float(sums.stereo_total) == pytest.approx(float(nll[0, 4:6].sum()), rel=1e-5)
    plain = float(nll[:, 2:].sum()) / 14
    assert float(sums.objective(1.0)) == pytest.approx(plain, rel=1e-5)
    weighted = (float(nll[:, 2:].sum()) + 3 * float(nll[0, 4:6].sum())) / (14 + 3 * 2)
    assert float(sums.objective(4.0)) == pytest.approx(weighted, rel=1e-5)


def synthetic_stores(seed: int = 0):
    rng = np.random.default_rng(seed)
    def store(n):
        lengths = rng.integers(30, 200, size=n)
        return token_store([rng.integers(1, 60, size=k) for k in lengths], [10] * n)
    return store(64), store(8)


def trained_weights(config=TINY_RUN) -> tuple[list[torch.Tensor], list[dict], object]:
    train_store, validation_store = synthetic_stores()
    torch.manual_seed(config.seed)
    model = Qwen3ForCausalLM(model_config(TINY, 60, 0))
    rows: list[dict] = []
    result = train(model, train_store, validation_store, config, torch.device("cpu"), 0, rows.append)
    return [p.detach().clone() for p in model.parameters()], rows, result


def test_two_runs_from_one_seed_end_with_identical_weights():
    first, rows, result = trained_weights()
    second, _, _ = trained_weights()
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and "val_loss" in rows[1] and "val_loss" in rows[3]
    assert result.steps == 4 and not result.stopped_by_budget and result.loss_tokens == rows[-1]["tokens"]
    other, _, _ = trained_weights(replace(TINY_RUN, seed=TINY_RUN.seed + 1))  # the seed orders the data
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


def test_the_budget_stops_a_run_and_says_so():
    _, rows, result = trained_weights(replace(TINY_RUN, budget_s=0.0))
    assert result.stopped_by_budget and result.steps == 0 and rows[-1]["stopped_by_budget"] is True
    assert result.validation_loss == pytest.approx(rows[-1]["val_loss"], abs=1e-5) and result.train_loss is None


@pytest.mark.slow
def test_the_trainer_imports_no_rdkit():
    code = ("import sys; import inferlab.workloads.conformers.training.reference_training, "
            "inferlab.workloads.conformers.training.__main__; "
            "assert not [m for m in sys.modules if m.startswith('rdkit')], 'rdkit imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def trial_checkpoint(tmp_path_factory):
    """A trial build (the first molecule of each split) and a tiny model trained on it for 3 steps."""
    from inferlab.workloads.conformers.training.data_build import BuildConfig, build_data
    from inferlab.workloads.conformers.training.reference_training import train_reference

    root = tmp_path_factory.mktemp("reference")
    manifest = build_data(BuildConfig(root / "data", workers=0, limit=1))
    summary = train_reference(root / "data", root / "ckpt", replace(TINY_RUN, steps=3), TINY, device="cpu")
    return root / "ckpt", manifest, summary


@pytest.mark.slow
def test_a_reproduction_is_identical_only_when_every_weight_is(trial_checkpoint, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from inferlab.workloads.conformers.training.reproduction import compare_checkpoints

    ckpt = trial_checkpoint[0]
    same = compare_checkpoints(ckpt, ckpt)
    assert same["identical"] and same["tensors_differing"] == 0 and same["runs"]["new"]["steps"] == 3
    other = tmp_path / "other"
    shutil.copytree(ckpt, other)
    tensors = load_file(other / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] += 0.5
    save_file(tensors, other / "model.safetensors", metadata={"format": "pt"})
    changed = compare_checkpoints(other, ckpt)
    assert not changed["identical"] and list(changed["differing"]) == [name]
    assert changed["max_abs_difference"] == pytest.approx(0.5, abs=0.01)


@pytest.mark.slow
def test_the_trial_checkpoint_is_complete_and_transformers_loads_it(trial_checkpoint):
    from transformers import AutoModelForCausalLM

    from inferlab.models.checkpoint_check import check_engine_checkpoint

    ckpt, manifest, summary = trial_checkpoint
    assert manifest["molecules"] == {"train": 1, "validation": 1, "held_out": 1}
    assert manifest["exactness"]["differences"] == 0 and manifest["exactness"]["held_out_molecules"] == 1
    for split in ("train", "validation"):  # each molecule's own texts, then its stereo variants' (counted apart)
        variants = sum(kind["sequences"][split] for kind in manifest["stereo_variants"].values())
        assert manifest["sequences"][split] == manifest["recipe"]["conformers_per_molecule"] + variants
    assert all(agreeing == judged for agreeing, judged in manifest["stereo_agreement"]["texts"].values())
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
                 "vocabulary_map.json", "split.tsv", "held_out.smi", "data_manifest.json", "training_log.jsonl", "loss_curve.png",
                 "training.json", "README.md"):
        assert (ckpt / name).exists(), name
    assert summary["steps"] == 3 and json.loads((ckpt / "training.json").read_text())["steps"] == 3
    config = json.loads((ckpt / "config.json").read_text())
    assert config["vocab_size"] % 64 == 0 and config["vocab_size"] >= manifest["vocabulary"]["reduced_size"]
    assert config["tie_word_embeddings"] is True
    check_engine_checkpoint(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    card = (ckpt / "README.md").read_text()
    assert model.dtype == torch.bfloat16 and "nan" not in card and "mirror image" in card


@pytest.mark.slow
def test_the_engine_writes_valid_constrained_conformers_with_the_trial_checkpoint(trial_checkpoint, tmp_path):
    from inferlab.workloads.conformers.pipeline.config import PipelineConfig
    from inferlab.engine import EngineConfig
    from inferlab.workloads.conformers.pipeline.generate import generate_conformers

    ckpt, _, _ = trial_checkpoint
    held_out = [line.split("\t") for line in (ckpt / "split.tsv").read_text().splitlines()[1:]]
    smiles = next(row[2] for row in held_out if row[5] == "held_out")
    (tmp_path / "in.smi").write_text(f"{smiles} held\nCCO ethanol\n")
    config = PipelineConfig(num_conformers=2, seed=1, workers=0, judge_workers=0)
    engine = EngineConfig(model=str(ckpt), max_slots=4, max_seq_len=1200, device="cpu")
    summary = generate_conformers(engine, tmp_path / "in.smi", tmp_path / "out.sdf", config)
    assert summary.conformers_ok == 4 and summary.valid_fraction == 1.0 and summary.graph_matches == 4


@pytest.mark.slow
def test_a_data_folder_built_before_the_stereo_variants_is_refused_before_training(trial_checkpoint, tmp_path):
    import shutil

    from inferlab.errors import InputError
    from inferlab.workloads.conformers.training.reference_training import train_reference

    data = tmp_path / "data"
    shutil.copytree(trial_checkpoint[0].parent / "data", data)
    manifest = json.loads((data / "data_manifest.json").read_text())
    del manifest["recipe"]["stereo_variants"]
    (data / "data_manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="before the stereo variants"):
        train_reference(data, tmp_path / "ckpt", replace(TINY_RUN, steps=1), TINY, device="cpu")
    assert not (tmp_path / "ckpt").exists()  # refused before anything was written
