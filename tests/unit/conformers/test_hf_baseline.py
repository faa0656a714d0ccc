"""The seeds-style baseline processor: its templates, its masks, and HF generate on a tiny random model."""

from __future__ import annotations

import pytest
import torch
from rdkit import Chem
from rdkit.Geometry import Point3D
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor

from inferlab.errors import InputError
from inferlab.models.builtin_tokenizer import build_builtin_tokenizer
from inferlab.workloads.conformers.chemistry.encode import encode_conformer
from inferlab.workloads.conformers.evaluation.hf_baseline_processor import (
    COPY,
    FREE_FIRST,
    FREE_LAST,
    SeedsStyleConformerProcessor,
    SeedsVocabMasks,
    build_baseline_template,
    build_baseline_templates,
)
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.evaluation.hf_baseline_run import run_baseline_batch

PROFILE = get_profile("v3-fixed4")
MOLECULES = ["CCO", "CC(=O)Nc1ccc(O)cc1", "C[C@H](N)C(=O)O", "[NH4+].[Cl-]"]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Full-vocabulary row ops are several times faster on one thread on the 2-core test machines."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def qwen_tokenizer(qwen3_chem_dir):
    return AutoTokenizer.from_pretrained(str(qwen3_chem_dir))


@pytest.fixture(scope="module")
def qwen_masks(qwen_tokenizer):
    return SeedsVocabMasks.build(qwen_tokenizer, 151936, "cpu")


def token_text(tokenizer, token_id: int) -> str:
    return tokenizer.decode([token_id])


def test_allowlist_is_the_seeds_fifteen_tokens(qwen_tokenizer, qwen_masks):
    texts = sorted(token_text(qwen_tokenizer, i) for i in qwen_masks.allowed_ids)
    assert texts == sorted(list("0123456789.,-") + [",-", "-."])
    comma = qwen_tokenizer.convert_tokens_to_ids(",")
    dash = qwen_tokenizer.convert_tokens_to_ids("-")
    assert qwen_masks.blocked[FREE_FIRST, comma] and not qwen_masks.blocked[FREE_FIRST, dash]
    assert qwen_masks.blocked[FREE_LAST, comma] and qwen_masks.blocked[FREE_LAST, dash]
    assert not qwen_masks.blocked[FREE_LAST, qwen_tokenizer.convert_tokens_to_ids("7")]


def test_allowlist_with_grouped_digits():
    tokenizer = build_builtin_tokenizer()
    masks = SeedsVocabMasks.build(tokenizer, len(tokenizer), "cpu")
    texts = {token_text(tokenizer, i) for i in masks.allowed_ids}
    assert {"770", "12", "-.", ",-", "0"} <= texts
    assert not {"..", "--"} & texts


@pytest.mark.parametrize("smiles", MOLECULES)
def test_template_marks_exactly_the_placeholder_tokens_free(qwen_tokenizer, smiles):
    template = build_baseline_template(smiles, PROFILE, qwen_tokenizer)
    reference = build_template(smiles, PROFILE)
    text = "".join(token_text(qwen_tokenizer, i) for i in template.ref_ids)
    assert text == reference.fill(["0.0000,0.0000,0.0000"] * reference.num_atoms)
    free_text = "".join(token_text(qwen_tokenizer, i) for i, k in zip(template.ref_ids, template.kinds) if k != COPY)
    assert free_text == "0.0000,0.0000,0.0000" * reference.num_atoms
    # Per block: 20 FREE tokens with this tokenizer, first marked, last two marked.
    blocks, run = [], []
    for k in template.kinds:
        if k == COPY:
            if run:
                blocks.append(run)
            run = []
        else:
            run.append(k)
    assert len(blocks) == reference.num_atoms
    assert all(len(b) == 20 and b[0] == FREE_FIRST and b[-2:] == [FREE_LAST, FREE_LAST] for b in blocks)


def test_invalid_smiles_is_an_input_error(qwen_tokenizer):
    with pytest.raises(InputError, match="C1CC"):
        build_baseline_templates(["CCO", "C1CC"], PROFILE, qwen_tokenizer)


def simulate(processor, templates, prompt_length, pick, vocab=151936, steps=None):
    """Drive the processor like generate does: scores per step, token = pick(step scores)."""
    rows = len(templates)
    input_ids = torch.zeros(rows, prompt_length, dtype=torch.long)
    steps = steps or max(len(t) for t in templates) + 1
    for step in range(steps):
        scores = processor(input_ids, pick.scores(rows, vocab, step))
        input_ids = torch.cat([input_ids, scores.argmax(dim=1, keepdim=True)], dim=1)
    return input_ids[:, prompt_length:]


class PreferToken:
    """Scores that rank one token first and the rest at random."""

    def __init__(self, token_ids_per_step):
        self.token_ids_per_step = token_ids_per_step
        self.gen = torch.Generator().manual_seed(0)

    def scores(self, rows, vocab, step):
        s = torch.randn(rows, vocab, generator=self.gen)
        for r in range(rows):
            s[r, self.token_ids_per_step(r, step)] = 100.0
        return s


def test_model_writing_the_placeholder_gives_a_valid_conformer(qwen_tokenizer, qwen_masks):
    templates = build_baseline_templates(MOLECULES, PROFILE, qwen_tokenizer)
    eos = qwen_tokenizer.eos_token_id
    processor = SeedsStyleConformerProcessor(templates, qwen_masks, eos)
    want = lambda r, step: templates[r].ref_ids[step] if step < len(templates[r]) else eos  # noqa: E731
    out = simulate(processor, templates, prompt_length=5, pick=PreferToken(want))
    for r, t in enumerate(templates):
        assert out[r, : len(t)].tolist() == list(t.ref_ids) and out[r, len(t)] == eos
        text = qwen_tokenizer.decode(out[r, : len(t)].tolist())
        build_template(MOLECULES[r], PROFILE).check(text, PROFILE)


def test_random_scores_only_ever_produce_allowed_tokens(qwen_tokenizer, qwen_masks):
    templates = build_baseline_templates(MOLECULES, PROFILE, qwen_tokenizer)
    eos = qwen_tokenizer.eos_token_id
    processor = SeedsStyleConformerProcessor(templates, qwen_masks, eos)
    junk = qwen_tokenizer.convert_tokens_to_ids("a")
    out = simulate(processor, templates, prompt_length=3, pick=PreferToken(lambda r, s: junk))
    allowed = set(qwen_masks.allowed_ids)
    for r, t in enumerate(templates):
        for pos, (ref, kind) in enumerate(zip(t.ref_ids, t.kinds)):
            token = int(out[r, pos])
            assert token == ref if kind == COPY else (token in allowed and not qwen_masks.blocked[kind, token])
        assert int(out[r, len(t)]) == eos


@pytest.mark.parametrize("sampling", [{"do_sample": False}, {"do_sample": True, "top_k": 0, "top_p": 1.0,
                                                              "temperature": 1.0}])
def test_hf_generate_on_a_tiny_random_qwen3(tiny_checkpoint, qwen_tokenizer, qwen_masks, sampling):
    path = tiny_checkpoint("tiny-qwen3")
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    smiles = ["CCO", "C[C@H](N)C(=O)O"]  # small: each step writes full-vocabulary rows on the CPU
    templates = build_baseline_templates(smiles, PROFILE, qwen_tokenizer)
    torch.manual_seed(0)
    rows = run_baseline_batch(model, qwen_tokenizer, templates, qwen_masks, **sampling)
    allowed = set(qwen_masks.allowed_ids)
    valid = 0
    for row, template, s in zip(rows, templates, smiles):
        assert row.ended_with_eos and len(row.token_ids) == len(template) + 1
        for token, ref, kind in zip(row.token_ids, template.ref_ids, template.kinds):
            assert token == ref if kind == COPY else token in allowed
        reference = build_template(s, PROFILE)
        # The structure is always the template's; the blocks are only as good as the random weights.
        assert row.text.startswith("[CONFORMER]") and row.text.endswith("[/CONFORMER]")
        try:
            reference.check(row.text, PROFILE)
            valid += 1
        except InputError as e:
            assert "coord3-fixed4" in str(e)  # only the coordinate grammar can fail, never the structure
    assert 0 <= valid <= len(rows)


class Teacher(LogitsProcessor):
    """Stands in for a trained model: at generation step t it strongly prefers targets[row][t]."""

    def __init__(self, targets: list[list[int]]) -> None:
        self.targets = targets
        self.prompt_length = None

    def __call__(self, input_ids, scores):
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        step = input_ids.shape[1] - self.prompt_length
        for row, target in enumerate(self.targets):
            if step < len(target):
                scores[row, target[step]] += 1000.0
        return scores


def conformer_of_ethanol(xyz) -> Chem.Mol:
    mol = Chem.MolFromSmiles("CCO")
    conformer = Chem.Conformer(3)
    for i, p in enumerate(xyz):
        conformer.SetAtomPosition(i, Point3D(*p))
    conformer.Set3D(True)
    mol.AddConformer(conformer)
    return mol


def test_hf_generate_reproduces_a_model_whose_blocks_fit_the_placeholder_and_cuts_longer_ones(
    tiny_checkpoint, qwen_tokenizer, qwen_masks
):
    """The seeds' design end to end through HF generate: a model writing real coordinates gets exactly
    them when every block has the placeholder's 20 tokens; a negative first value needs 21, and the
    forced `>` cuts the block's last digit (the truncation the study found)."""
    model = AutoModelForCausalLM.from_pretrained(str(tiny_checkpoint("tiny-qwen3")), dtype=torch.float32).eval()
    fits = conformer_of_ethanol([(1.25, 2.5, 3.0625), (4.0, 5.5, 6.25), (7.125, 8.0, 9.9375)])  # exact in binary
    too_long = conformer_of_ethanol([(-1.25, 2.5, 3.0625), (4.0, 5.5, 6.25), (7.125, 8.0, 9.9375)])
    texts = [encode_conformer(m, PROFILE).generation_text(PROFILE) for m in (fits, too_long)]
    eos = qwen_tokenizer.eos_token_id
    targets = [qwen_tokenizer(t, add_special_tokens=False)["input_ids"] + [eos] for t in texts]
    templates = build_baseline_templates(["CCO", "CCO"], PROFILE, qwen_tokenizer)
    rows = run_baseline_batch(model, qwen_tokenizer, templates, qwen_masks, processors_before=[Teacher(targets)],
                              do_sample=False)
    template = build_template("CCO", PROFILE)
    assert rows[0].text == texts[0]
    decoded = template.check(rows[0].text, PROFILE)
    assert list(decoded.mol.GetConformer().GetAtomPosition(0)) == [1.25, 2.5, 3.0625]
    first_block = rows[1].text.split("<")[1].split(">")[0]
    assert first_block == "-1.2500,2.5000,3.062"  # the last digit of z never made it
    with pytest.raises(InputError, match="coord3-fixed4"):
        template.check(rows[1].text, PROFILE)
