"""HF text generation fallback (workloads/hf_text.py) on the tiny preset: batched, left-padded greedy output
equals transformers' generate on each prompt alone; chat templates, errors, resume and simulated OOM."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from workload_testkit import TEXTS, OomAboveRows, read_jsonl, write_jsonl

from inferlab.jsonl_io import ResumableJsonlWriter, read_jsonl_records
from inferlab.types import SamplingParams
from inferlab.workloads.batching import reorder_jsonl
from inferlab.workloads.hf_loading import ModelLoadConfig, load_hf_model
from inferlab.workloads.hf_text import Generated, HFTextGenerator, HFTextOptions, generate_with_hf, run_hf_generation

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=6)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture(scope="module")
def chat_dir(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint with a chat template added to its tokenizer."""
    path = tmp_path_factory.mktemp("chat") / "tiny-chat"
    shutil.copytree(tiny_checkpoint("tiny"), path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def reference(chat_dir):
    """greedy continuation of one prompt (token ids) through transformers alone, no padding."""
    model = AutoModelForCausalLM.from_pretrained(chat_dir).eval()

    def continue_ids(ids: list[int], max_new: int = GREEDY.max_new_tokens) -> list[int]:
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=max_new, do_sample=False, pad_token_id=0)
        return out[0, len(ids):].tolist()

    return continue_ids


@pytest.fixture(scope="module")
def loaded(chat_dir):
    from transformers import AutoModelForCausalLM

    return load_hf_model(ModelLoadConfig(str(chat_dir), dtype="float32", device="cpu"), AutoModelForCausalLM)


def test_batched_greedy_matches_each_prompt_alone_and_chat_rows_use_the_template(tmp_path, chat_dir, reference):
    tok = AutoTokenizer.from_pretrained(chat_dir)
    messages = [{"role": "user", "content": "hello there"}]
    lines = [{"id": k, "prompt": v} for k, v in TEXTS.items()] + [{"id": "chat", "messages": messages}]
    inp = write_jsonl(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    with ResumableJsonlWriter(out) as writer:
        summary = generate_with_hf(chat_dir, read_jsonl_records(inp), GREEDY, writer, dtype="float32", device="cpu",
                                   options=HFTextOptions(batch_size=3, include_token_ids=True))
    reorder_jsonl(out, summary.ids_in_order)
    rows = read_jsonl(out)
    assert [r["id"] for r in rows] == list(TEXTS) + ["chat"]
    for row in rows[:-1]:
        prompt_ids = tok(TEXTS[row["id"]])["input_ids"]
        assert row["prompt_tokens"] == len(prompt_ids)
        assert row["token_ids"] == reference(prompt_ids)
        assert row["text"] == tok.decode(row["token_ids"], skip_special_tokens=True)
        assert row["finish_reason"] == "length" and row["output_tokens"] == 6
    chat_text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    chat_ids = tok(chat_text, add_special_tokens=False)["input_ids"]
    assert chat_ids.count(tok.bos_token_id) == 1  # the template's BOS only, not a second one
    assert rows[-1]["prompt_tokens"] == len(chat_ids) and rows[-1]["token_ids"] == reference(chat_ids)
    assert summary.output_tokens == 6 * len(rows)


def test_stop_tokens_cut_rows_and_padding_is_never_counted(loaded, reference, tmp_path):
    tok = loaded.tokenizer
    prompt_ids = tok(TEXTS["mid"])["input_ids"]
    expected = reference(prompt_ids, max_new=6)
    stop = expected[2]  # the third greedy token becomes a stop token
    first = expected.index(stop)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=6, stop_token_ids=(stop,))
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "prompt": TEXTS["mid"]}, {"id": "b", "prompt": TEXTS["long"]}])
    with ResumableJsonlWriter(tmp_path / "out.jsonl") as writer:
        run_hf_generation(loaded, read_jsonl_records(inp), sampling, writer, HFTextOptions(include_token_ids=True))
    row = {r["id"]: r for r in read_jsonl(tmp_path / "out.jsonl")}["a"]
    assert row["finish_reason"] == "stop"
    assert row["token_ids"] == expected[: first + 1] and row["output_tokens"] == first + 1
    assert row["text"] == tok.decode(expected[:first], skip_special_tokens=True)  # stop token not in the text


def test_finish_reasons_on_given_tokens(loaded):
    gen = HFTextGenerator(loaded, SamplingParams(temperature=0.0, max_new_tokens=5, stop_token_ids=(7,)))
    eos = gen.eos_ids[0]
    pad = loaded.pad_id
    assert gen._finish([5, eos, pad, pad]) == Generated([5, eos], "eos")
    assert gen._finish([5, 6, 7, 8, 9]) == Generated([5, 6, 7], "stop")
    assert gen._finish([5, 6, 8, 8, 9]) == Generated([5, 6, 8, 8, 9], "length")
    ignoring = HFTextGenerator(loaded, SamplingParams(temperature=0.0, max_new_tokens=5, ignore_eos=True))
    assert ignoring._finish([eos, 1, 2]) == Generated([eos, 1, 2], "length")


def test_bad_rows_become_error_records_and_resume_skips_done_ids(loaded, tmp_path):
    lines = [
        {"id": "ok1", "prompt": "hello"},
        {"id": "empty", "prompt": ""},
        "{oops",
        {"id": "long", "prompt": "x" * 600},  # over the 512 positions of the tiny preset with 6 new tokens
        {"id": "badmsg", "messages": [{"role": "user"}]},
        {"id": "ok2", "prompt": "world"},
    ]
    inp = write_jsonl(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "ok2", "status": "ok", "text": "FROM-EARLIER-RUN"}\n')
    with ResumableJsonlWriter(out) as writer:
        summary = run_hf_generation(loaded, read_jsonl_records(inp), GREEDY, writer)
    rows = {r["id"]: r for r in read_jsonl(out)}
    assert summary.rows_ok == 1 and summary.rows_error == 4 and summary.rows_skipped == 1
    assert rows["ok2"]["text"] == "FROM-EARLIER-RUN"
    assert "empty" in rows["empty"]["error"] and "not valid JSON" in rows["line-3"]["error"]
    assert "over the maximum of 506" in rows["long"]["error"]
    assert "'role', 'content'" in rows["badmsg"]["error"]


def test_simulated_oom_backs_off_and_every_row_is_written_once(loaded, reference, tmp_path):
    prompts = {f"p{i}": "word " * (i % 4 + 1) + str(i) for i in range(13)}
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": k, "prompt": v} for k, v in prompts.items()])
    inner = loaded.model
    wrapper = OomAboveRows(inner, max_rows=2)
    loaded.model = wrapper
    try:
        with ResumableJsonlWriter(tmp_path / "out.jsonl") as writer:
            summary = run_hf_generation(loaded, read_jsonl_records(inp), GREEDY, writer,
                                        HFTextOptions(batch_size=64, include_token_ids=True))
    finally:
        loaded.model = inner
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert sorted(r["id"] for r in rows) == sorted(prompts)  # each exactly once
    assert wrapper.batch_rows[:3] == [13, 6, 3]
    assert summary.backoff.oom_events >= 3 and 1 <= summary.backoff.largest_ok_rows <= 2
    assert summary.rows_ok == 13 and summary.rows_error == 0
    tok = loaded.tokenizer
    for row in rows:
        assert row["token_ids"] == reference(tok(prompts[row["id"]])["input_ids"])


def test_generate_kwargs_set_every_knob_explicitly():
    from inferlab.workloads.hf_text import generate_kwargs

    sampled = generate_kwargs(SamplingParams(temperature=0.7, top_k=0, top_p=0.9, min_p=0.05, max_new_tokens=9,
                                             stop_token_ids=(5,)), eos_ids=[2], pad_id=0)
    assert sampled["do_sample"] is True and sampled["top_k"] == 0  # 0 given, not left to a model default of 50
    assert (sampled["temperature"], sampled["top_p"], sampled["min_p"]) == (0.7, 0.9, 0.05)
    assert sampled["eos_token_id"] == [5, 2] and sampled["repetition_penalty"] == 1.0
    greedy = generate_kwargs(SamplingParams(temperature=0.0, max_new_tokens=4, ignore_eos=True), eos_ids=[2], pad_id=0)
    assert greedy["do_sample"] is False and "top_k" not in greedy
    assert greedy["min_new_tokens"] == 4  # EOS masked to the end instead of passing eos_token_id=None


def test_seeded_sampling_repeats(loaded, tmp_path):
    sampling = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=8, seed=123)
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": k, "prompt": v} for k, v in TEXTS.items()])
    runs = []
    for name, seed in (("a", 123), ("b", 123), ("c", 7)):
        with ResumableJsonlWriter(tmp_path / f"{name}.jsonl") as writer:
            run_hf_generation(loaded, read_jsonl_records(inp), replace(sampling, seed=seed), writer,
                              HFTextOptions(include_token_ids=True))
        runs.append({r["id"]: r["token_ids"] for r in read_jsonl(tmp_path / f"{name}.jsonl")})
    assert runs[0] == runs[1]  # same seed, same batches: same samples
    assert runs[0] != runs[2]  # really sampled: another seed differs
