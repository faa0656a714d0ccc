"""Plans from TOML, flags and presets; every refusal names the knob (or model) and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferlab.bench.cells import Cell
from inferlab.bench.knobs import Knob
from inferlab.bench.plan import build_plan, load_toml, plan_from_flags
from inferlab.bench.plan_presets import PLAN_PRESETS, get_plan_preset
from inferlab.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]


def _generate(**settings):
    return {"name": "t", "sweep": [{"scenario": "generate", "model": "tiny", "backend": "hf", "set": settings}]}


def test_toml_plan_expands_axes_in_order(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text("""
name = "mine"
timeout_s = 99
limit_seconds = 300
[defaults.generate]
new_tokens = 8
[[sweep]]
scenario = "generate"
model = "tiny"
backend = "hf"
[sweep.set]
batch_size = [2, 4]
kv_cache = ["dynamic", "static"]
num_prompts = 8
""")
    plan = build_plan(load_toml(path))
    assert plan.name == "mine" and plan.limit_seconds == 300
    combos = [(c.config["batch_size"], c.config["kv_cache"]) for c in plan.cells]
    assert combos == [(2, "dynamic"), (2, "static"), (4, "dynamic"), (4, "static")]
    assert all(c.config["new_tokens"] == 8 and c.timeout_s == 99 for c in plan.cells)
    # derived default: HF compiles exactly the static caches
    assert [c.config["compile"] for c in plan.cells] == [False, True, False, True]


def test_flags_parse_strings_into_knob_types():
    data = plan_from_flags("generate", ["tiny"], ["hf"], {"batch_size": ["2", "4"], "do_sample": ["off"],
                                                           "top_p": ["0.5"], "num_prompts": ["8"]})
    plan = build_plan(data)
    assert [c.config["batch_size"] for c in plan.cells] == [2, 4]
    assert all(c.config["do_sample"] is False and c.config["top_p"] == 0.5 for c in plan.cells)


def test_every_preset_builds_and_the_seed_presets_match_benchmarking_md():
    for name in PLAN_PRESETS:
        assert build_plan(get_plan_preset(name)).cells, name
    gen = build_plan(get_plan_preset("seed-generate")).cells
    assert len(gen) == 11 and {c.model for c in gen} == {"llama-380m"}
    assert {(c.config["batch_size"], c.config["num_prompts"], c.config["new_tokens"], c.config["prompt_tokens"]) for c in gen} == {(16, 64, 1000, 48)}
    variants = {(c.config["attn_implementation"], c.config["sdpa_backend"]) for c in gen}
    assert variants == {("eager", "auto"), ("sdpa", "auto"), ("flash_attention_2", "auto"), ("sdpa", "flash"),
                        ("sdpa", "efficient"), ("sdpa", "cudnn")}
    assert all(c.config["max_duration_s"] == 6.0 and c.config["warmup_steps"] == 16 for c in gen)
    static = build_plan(get_plan_preset("seed-static-cache")).cells
    assert all(c.config["num_prompts"] % c.config["batch_size"] == 0 for c in static)
    assert {c.config["batch_size"] for c in static} == {16, 64, 256}
    # batch 256 is full: at least one whole batch of prompts
    assert all(c.config["num_prompts"] >= c.config["batch_size"] for c in static)
    # the shared cells have the same keys, so one run directory runs them once
    assert len({c.key for c in gen} & {c.key for c in static}) == 2
    attention = build_plan(get_plan_preset("seed-attention")).cells
    shapes = {(c.config["batch_size"], c.config["q_heads"], c.config["q_len"], c.config["head_dim"]) for c in attention}
    assert (4, 16, 2048, 64) in shapes and (16, 32, 512, 64) in shapes and (256, 16, 1, 64) in shapes


def test_overrides_and_only_filters():
    plan = build_plan(get_plan_preset("quick"), overrides={"new_tokens": ["4"]}, only={"scenario": ["generate"], "kv_cache": ["static"]})
    # the engine's cell has no kv_cache knob: the filter does not constrain it
    assert plan.cells and all(c.scenario == "generate" and c.config.get("kv_cache", "static") == "static"
                              and c.config["new_tokens"] == 4 for c in plan.cells)
    with pytest.raises(ConfigError, match="--set bogus matches no knob"):
        build_plan(get_plan_preset("quick"), overrides={"bogus": ["1"]})
    with pytest.raises(ConfigError, match="keeps no cell"):
        build_plan(get_plan_preset("quick"), only={"scenario": ["generate"], "backend": ["hf"], "kv_cache": ["paged"]})
    with pytest.raises(ConfigError, match="--only kvcache is not a knob of any cell"):
        build_plan(get_plan_preset("quick"), only={"kvcache": ["static"]})
    # a filter constrains only the cells that have the knob: one attention cell, one generate cell of
    # transformers' and the engine's (which has none of the hf knobs) here
    three = build_plan(get_plan_preset("quick"), only={"scenario": ["attention-kernels", "generate"], "kernel": ["auto"],
                                                       "q_len": ["1"], "attn_implementation": ["eager"],
                                                       "kv_cache": ["dynamic"], "processor": ["python"]})
    assert [(c.scenario, c.backend) for c in three.cells] == [("attention-kernels", None), ("generate", "hf"),
                                                              ("generate", "inferlab")]


def test_models_can_be_replaced_in_a_preset():
    plan = build_plan(get_plan_preset("seed-generate"), overrides={"new_tokens": ["4"]}, models=["tiny"])
    assert {c.model for c in plan.cells} == {"tiny"} and len(plan.cells) == 11


def test_cells_round_trip_through_json_with_a_stable_key():
    cell = build_plan(_generate(batch_size=2, num_prompts=4)).cells[0]
    again = Cell.from_json(json.loads(json.dumps(cell.to_json())))
    assert again == cell and again.key == cell.key
    other = build_plan(_generate(batch_size=2, num_prompts=8)).cells[0]
    assert other.key != cell.key


@pytest.mark.parametrize("settings, message", [
    ({"batchsize": 4}, r"unknown knob 'batchsize'.*did you mean 'batch_size'"),
    ({"batch_size": "many"}, r"knob batch_size=many: expected an integer"),
    ({"batch_size": 0}, r"knob batch_size=0 is below its minimum 1"),
    ({"kv_cache": "paged"}, r"knob kv_cache=paged is not allowed; choose one of: dynamic, static"),
    ({"do_sample": "maybe"}, r"knob do_sample=maybe: expected a boolean"),
    ({"kv_cache": "dynamic", "compile": True}, r"compile=true with kv_cache=dynamic: HF compiles only static caches"),
    ({"attn_implementation": "eager", "sdpa_backend": "flash"}, r"sdpa_backend=flash needs attn_implementation=sdpa"),
    ({"attn_implementation": "flash_attention_2", "dtype": "float32"}, r"flash_attention_2 runs only bfloat16/float16"),
    ({"batch_size": 16, "num_prompts": 40}, r"num_prompts=40 is not a multiple of batch_size=16"),
    ({"new_tokens": 1000}, r"exceeds the model's max_position_embeddings=512"),
    ({"batch_size": []}, r"knob batch_size has an empty list"),
])
def test_bad_generate_plans_are_refused_with_the_fix(settings, message):
    with pytest.raises(ConfigError, match=message):
        build_plan(_generate(**settings))


def test_refusals_that_are_not_about_one_value(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown knob 'processor'.*belongs to backend hf of scenario generate, not to .*attention-kernels"):
        build_plan({"sweep": [{"scenario": "attention-kernels", "set": {"processor": "python"}}]})
    with pytest.raises(ConfigError, match=r"causal=true needs q_len == kv_len"):
        build_plan({"sweep": [{"scenario": "attention-kernels", "set": {"q_len": 1, "kv_len": 512}}]})
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConfigError, match=r"neither a preset .* nor a checkpoint directory \(no config.json"):
        build_plan({"sweep": [{"scenario": "generate", "model": str(missing), "backend": "hf"}]})
    with pytest.raises(ConfigError, match=r"unknown scenario 'generation'; choose one of"):
        build_plan({"sweep": [{"scenario": "generation"}]})
    with pytest.raises(ConfigError, match=r"unknown backend 'sglang'"):
        build_plan({"sweep": [{"scenario": "generate", "model": "tiny", "backend": "sglang"}]})
    with pytest.raises(ConfigError, match=r"no backend"):
        build_plan({"sweep": [{"scenario": "generate", "model": "tiny"}]})
    with pytest.raises(ConfigError, match=r"takes no model"):
        build_plan({"sweep": [{"scenario": "attention-kernels", "model": "tiny"}]})
    with pytest.raises(ConfigError, match=r"unknown key 'sweeps'"):
        build_plan({"sweeps": []})
    with pytest.raises(ConfigError, match=r"not a causal LM"):
        build_plan({"sweep": [{"scenario": "generate", "model": "tiny-qwen2-cls", "backend": "hf"}]})
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [unclosed")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_toml(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_toml(tmp_path / "absent.toml")


def test_a_checkpoint_directory_is_accepted(tiny_checkpoint):
    plan = build_plan({"sweep": [{"scenario": "generate", "model": str(tiny_checkpoint()), "backend": "hf",
                                  "set": {"num_prompts": 16}}]})
    assert plan.cells[0].model == str(tiny_checkpoint())
    with pytest.raises(ConfigError, match="tokenizer=.* only applies when model is a preset"):
        build_plan({"sweep": [{"scenario": "generate", "model": str(tiny_checkpoint()), "backend": "hf",
                               "set": {"num_prompts": 16, "tokenizer": "/somewhere"}}]})


def test_a_preset_that_wants_qwen3_chem_gets_its_tokenizer(qwen3_chem_dir):
    cell = build_plan({"sweep": [{"scenario": "generate", "model": "tiny-qwen3", "backend": "hf",
                                  "set": {"num_prompts": 16}}]}).cells[0]
    assert cell.config["tokenizer"] == str(qwen3_chem_dir)


def test_knob_coercion_rules():
    k = Knob("n", int, 1, "a count", minimum=0)
    assert k.coerce("7") == 7 and k.coerce(7) == 7
    with pytest.raises(ConfigError):
        k.coerce(True)  # a bool is not an int here
    f = Knob("x", float, 1.0, "a number")
    assert f.coerce(2) == 2.0 and f.coerce(" 0.5 ") == 0.5
    with pytest.raises(ConfigError):
        f.coerce("nan")
    b = Knob("b", bool, False, "a switch")
    assert b.coerce("ON") is True and b.coerce("no") is False


def test_the_example_plan_in_benchmarks_parses():
    plan = build_plan(load_toml(REPO / "benchmarks" / "plans" / "example.toml"))
    assert plan.cells


def test_without_the_qwen3_chem_tokenizer_quick_runs_and_its_cell_is_unavailable(monkeypatch):
    """A fresh clone has no ../shared/tokenizers: `inferlab bench --preset quick` must still run every other
    cell, the constrained one becoming an `unavailable` row that says where the tokenizer goes."""
    from inferlab.bench import model_refs
    from inferlab.bench.launcher import precheck_reason
    from inferlab.errors import InputError
    from inferlab.models import shared_assets

    def nowhere():
        raise InputError("the qwen3-chem tokenizer was not found (looked in: X); set $INFERLAB_QWEN3_CHEM_TOKENIZER")

    monkeypatch.setattr(shared_assets, "qwen3_chem_tokenizer_dir", nowhere)
    plan = build_plan(get_plan_preset("quick"))
    needs = [c for c in plan.cells if c.model == "tiny-qwen3"]
    assert needs and all(c.config["tokenizer"] == model_refs.MISSING_QWEN3_CHEM for c in needs)
    assert precheck_reason(needs[0]) == (
        "preset 'tiny-qwen3' needs the qwen3-chem tokenizer: the qwen3-chem tokenizer was not found (looked in: X); "
        "set $INFERLAB_QWEN3_CHEM_TOKENIZER; or set the knob tokenizer=DIR"
    )
    others = [c for c in plan.cells if c.model != "tiny-qwen3"]
    assert others and all(model_refs.missing_tokenizer(c) is None for c in others)


def test_engine_speed_holds_the_engines_speed_checks():
    """The engine alone: llama-380m per batch and sampling with the cuBLAS A/B, qwen3-0.6b bf16 vs fp8 KV, gemma-2b,
    batching both ways (the decode step's profile is decode-roofline's)."""
    cells = build_plan(get_plan_preset("engine-speed")).cells
    generate = [c for c in cells if c.scenario == "generate"]
    assert all(c.backend == "inferlab" for c in generate)
    llama = {(c.config["batch_size"], c.config["top_p"], c.config["gemm"]) for c in generate if c.model == "llama-380m"}
    assert llama == {(b, p, "auto") for b in (16, 64, 256) for p in (0.9, 1.0)} | {(16, 0.9, "cublas")}
    assert {c.config["kv_dtype"] for c in generate if c.model == "qwen3-0.6b"} == {"auto", "fp8"}
    assert {c.config["do_sample"] for c in generate if c.model == "gemma-2b"} == {False, True}
    assert {c.config["batching"] for c in cells if c.scenario == "batching"} == {"continuous", "static"}
    assert {c.scenario for c in cells} == {"generate", "batching"}


def test_quick_runs_the_engine_beside_transformers_and_says_what_it_leaves_out():
    import importlib

    from inferlab.bench.plan_presets import QUICK_LEAVES_OUT
    from inferlab.bench.scenarios import BUILTIN_MODULES

    builtin = {importlib.import_module(module).SCENARIO.name for module in BUILTIN_MODULES}  # not tests' plugins

    preset = get_plan_preset("quick")
    covered = {(c.scenario, c.backend) for c in build_plan(preset).cells}
    for scenario in ("generate", "classify", "hidden-states", "constrained"):
        assert {(scenario, "hf"), (scenario, "inferlab")} <= covered, scenario
    assert {s for s, _ in covered} | set(QUICK_LEAVES_OUT) == builtin  # each scenario run or named
    assert all(name in preset["description"] for name in QUICK_LEAVES_OUT)
    assert "every scenario" not in preset["description"]
