"""The engine on CUDA: Triton kernels vs torch references in bf16, graph replay vs eager, bf16 vs transformers.

Deselected by default (marker gpu); scripts/gpu/engine_check.py runs the same checks at full size with
timings. Run on the device: `python -m pytest -q -m gpu tests/gpu/test_engine_gpu.py`.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
CUDA = torch.device("cuda")


def hf_dtype(dtype: torch.dtype) -> dict:
    """from_pretrained's dtype keyword: `dtype` since transformers 4.56, `torch_dtype` before."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def _rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def test_decode_rope_attention_kernel_matches_reference_in_bf16():
    from inferlab.engine.attention import decode_rope_attention_torch
    from inferlab.engine.kernels.triton_attention import decode_rope_attention
    from inferlab.models.rope import RotaryTables
    from inferlab.models.rope_spec import RopeSpec

    g = torch.Generator(device=CUDA).manual_seed(0)
    for rows, kv_heads, head_dim, max_len, qk_norm in [(16, 8, 64, 2048, False), (200, 8, 64, 1100, False),
                                                       (5, 2, 128, 777, True)]:  # fmt: skip
        heads = 2 * kv_heads
        tables = RotaryTables.build(RopeSpec(theta=500000.0), head_dim, max_len, torch.device(CUDA))
        caches = [torch.randn(rows + 3, kv_heads, max_len, head_dim, generator=g, device=CUDA).bfloat16()
                  for _ in range(2)]  # fmt: skip
        qkv = torch.randn(rows, (heads + 2 * kv_heads) * head_dim, generator=g, device=CUDA).bfloat16()
        norms = [torch.randn(head_dim, generator=g, device=CUDA).bfloat16() if qk_norm else None for _ in range(2)]
        slots = torch.randperm(rows + 3, generator=g, device=CUDA)[:rows]
        positions = torch.randint(0, max_len, (rows,), generator=g, device=CUDA)
        args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
        counters = torch.zeros((rows + 3) * kv_heads, dtype=torch.int32, device=CUDA)
        ref_caches = [c.clone() for c in caches]
        ref = decode_rope_attention_torch(*args, *ref_caches, slots, heads, head_dim**-0.5)
        for splits in (None, 1, 7):
            out = decode_rope_attention(*args, *caches, slots, heads, head_dim**-0.5, counters, splits=splits)
            assert _rel(out, ref) < 2**-6
            assert max(_rel(c, r) for c, r in zip(caches, ref_caches)) < 2**-6
            assert not counters.any()


def test_fp8_cache_kernels_match_the_reference_in_bf16():
    """The fp8 rope write (prefill) and decode kernel on the GPU: the rope write stores the reference's e4m3
    bytes and scales up to rope rounding; the decode output is within bf16 noise of the dequantizing
    reference, over splits; positions past a row's own are never read."""
    from inferlab.engine import torch_ops
    from inferlab.engine.attention import decode_rope_attention_torch
    from inferlab.engine.kernels.triton_attention import decode_rope_attention
    from inferlab.engine.kernels.triton_rope import rope_qkv
    from inferlab.engine.kv_quant import dequantize, quantize
    from inferlab.models.rope import RotaryTables
    from inferlab.models.rope_spec import RopeSpec

    g = torch.Generator(device=CUDA).manual_seed(3)
    rows, kv_heads, head_dim, max_len, heads = 40, 8, 128, 700, 16
    tables = RotaryTables.build(RopeSpec(theta=1000000.0), head_dim, max_len, torch.device(CUDA))
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * head_dim, generator=g, device=CUDA).bfloat16()
    norms = [torch.randn(head_dim, generator=g, device=CUDA).bfloat16() for _ in range(2)]
    slots = torch.randperm(rows + 3, generator=g, device=CUDA)[:rows]
    positions = torch.randint(0, max_len, (rows,), generator=g, device=CUDA)
    args = (qkv, positions, tables.cos, tables.sin, *norms, 1e-6)
    raw = [torch.randn(rows + 3, kv_heads, max_len, head_dim, generator=g, device=CUDA).bfloat16() for _ in range(2)]
    stored = [quantize(x) for x in raw]
    ours = [t.clone() for pair in stored for t in pair]  # k8, k_scale, v8, v_scale
    ref = [t.clone() for pair in stored for t in pair]
    rope_qkv(*args, ours[0], ours[2], slots, heads, return_kv=False, k_scale=ours[1], v_scale=ours[3])
    torch_ops.rope_qkv(*args, ref[0], ref[2], slots, heads, return_kv=False, k_scale=ref[1], v_scale=ref[3])
    for (q8, scale), (r8, rscale) in ((ours[0:2], ref[0:2]), (ours[2:4], ref[2:4])):
        assert _rel(dequantize(q8, scale), dequantize(r8, rscale)) < 2**-4  # one e4m3 step where rope rounding differs
    counters = torch.zeros((rows + 3) * kv_heads, dtype=torch.int32, device=CUDA)
    want = decode_rope_attention_torch(*args, ref[0], ref[2], slots, heads, head_dim**-0.5, k_scale=ref[1],
                                       v_scale=ref[3])  # fmt: skip
    for splits in (None, 1, 5):
        got = decode_rope_attention(*args, ours[0], ours[2], slots, heads, head_dim**-0.5, counters, splits=splits,
                                    k_scale=ours[1], v_scale=ours[3])  # fmt: skip
        assert _rel(got, want) < 2**-6 and not counters.any()


def test_radix_thresholds_match_the_sort_at_full_vocabulary():
    from inferlab.engine.kernels.triton_filter import filter_threshold as radix
    from inferlab.engine.sampler import FILTER_TOP_K, FILTER_TOP_P, filter_threshold, float_key

    g = torch.Generator(device=CUDA).manual_seed(1)
    base = torch.randn(64, 128256, generator=g, device=CUDA) * 3
    t = torch.rand(64, generator=g, device=CUDA) + 0.5
    k = torch.tensor([0, 1, 50, 5000], device=CUDA).repeat(16)
    p = torch.tensor([0.9, 1.0, 0.3, 0.99], device=CUDA).repeat_interleave(16)
    m = torch.zeros(64, device=CUDA)
    for logits in (base.bfloat16(), base):
        keys = float_key(logits.float())
        for level, top_k in ((FILTER_TOP_P, torch.zeros_like(k)), (FILTER_TOP_K, k)):
            ours = radix(logits, t, top_k, p, m, level)
            ref = filter_threshold(logits.float(), t, top_k, p, m, level)
            assert (keys >= ours[:, None]).eq(keys >= ref[:, None]).all(dim=1).float().mean().item() >= 0.98


def test_skinny_gemm_matches_a_fp32_matmul_in_bf16():
    from inferlab.engine import torch_ops
    from inferlab.engine.kernels.triton_gemm import SkinnyConfig, skinny_linear

    g = torch.Generator(device=CUDA).manual_seed(2)
    for n, k, swiglu in [(2048, 1024, False), (1024, 4096, True)]:
        w = (torch.randn(n, k, generator=g, device=CUDA) * 0.05).bfloat16()
        for rows in (1, 16, 64):
            x = torch.randn(rows, 2 * k if swiglu else k, generator=g, device=CUDA).bfloat16()
            ref = (torch_ops.silu_mul(x) if swiglu else x).float() @ w.float().T
            for config in (SkinnyConfig(32, 64, 1), SkinnyConfig(64, 64, 4)):
                assert _rel(skinny_linear(x, w, config, swiglu=swiglu), ref) < 2**-6


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from inferlab.models.checkpoint_init import init_checkpoint

    return init_checkpoint("llama-380m", tmp_path_factory.mktemp("gpu") / "llama-380m", dtype="bfloat16")


def _requests(vocab: int):
    from inferlab.types import Request, SamplingParams

    g = torch.Generator().manual_seed(0)
    settings = [
        dict(temperature=0.0),
        dict(temperature=1.0, top_p=0.9),
        dict(temperature=0.7, min_p=0.1),
        dict(temperature=1.0, top_k=20),
    ]
    return [
        Request(
            id=f"r{i}",
            prompt_ids=tuple(torch.randint(10, 1000, (5 + 7 * i,), generator=g).tolist()),
            sampling=SamplingParams(max_new_tokens=40 + 3 * i, seed=i, **settings[i % 4]),
        )
        for i in range(10)
    ]


def test_graph_replay_gives_the_eager_tokens(llama):
    from inferlab.engine import Engine, EngineConfig

    outputs = []
    for graphs in (True, False):
        engine = Engine(EngineConfig(model=llama, max_slots=4, max_seq_len=256, cuda_graphs=graphs, gemm="cublas"))
        outputs.append([r.token_ids for r in engine.generate(_requests(engine.spec.vocab_size))])
        del engine
        torch.cuda.empty_cache()
    assert outputs[0] == outputs[1]


def test_bf16_logits_are_as_close_to_fp32_as_transformers_bf16(llama):
    from transformers import AutoModelForCausalLM

    from inferlab.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(model=llama, max_slots=2, max_seq_len=128, cuda_graphs=False))
    hf32 = AutoModelForCausalLM.from_pretrained(llama, **hf_dtype(torch.float32)).to(CUDA).eval()
    hf16 = AutoModelForCausalLM.from_pretrained(llama, **hf_dtype(torch.bfloat16)).to(CUDA).eval()
    prompt = list(range(100, 148))
    with torch.inference_mode():
        ours = engine.runner.model.prefill(
            torch.tensor([prompt], device=CUDA),
            torch.tensor([48], device=CUDA),
            torch.tensor([0], device=CUDA),
            engine.runner.cache,
        )[0]
        ids = torch.tensor([prompt], device=CUDA)
        ref32, ref16 = hf32(ids).logits[0, -1].float(), hf16(ids).logits[0, -1].float()
    ours_err = (ours - ref32).abs().max().item()
    hf_err = (ref16 - ref32).abs().max().item()
    assert ours_err <= 2 * hf_err + 1e-3 * ref32.abs().max().item()


def test_constrained_conformers_on_the_device(tmp_path):
    """Constrained generation in CUDA graphs with the tuned GEMMs: every output a valid conformer."""
    from inferlab.constraints.program import compile_program
    from inferlab.engine import Engine, EngineConfig
    from inferlab.models.checkpoint_init import init_checkpoint
    from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir
    from inferlab.types import Request, SamplingParams
    from inferlab.workloads.conformers.chemistry.decode import decode_generation
    from inferlab.workloads.conformers.chemistry.profiles import get_profile
    from inferlab.workloads.conformers.chemistry.smiles import canonical_smiles
    from inferlab.workloads.conformers.chemistry.template import build_template

    path = init_checkpoint("tiny-qwen3", tmp_path / "q", dtype="bfloat16", tokenizer_dir=qwen3_chem_tokenizer_dir())
    engine = Engine(EngineConfig(model=path, max_slots=8, max_seq_len=512))
    profile = get_profile("v3-fixed4")
    molecules = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "C[C@H](N)C(=O)O", "OCC(N)C(=O)O"] * 3
    settings = [dict(temperature=0.0), dict(temperature=1.0), dict(temperature=1.0, top_k=50, top_p=0.9)]
    requests, templates = [], []
    for i, smiles in enumerate(molecules):
        template = build_template(smiles, profile)
        program = compile_program(template.segments, engine.tokenizer)
        sampling = SamplingParams(seed=i, **settings[i % 3])
        requests.append(
            Request(
                id=str(i),
                prompt_ids=tuple(template.prompt_ids(engine.tokenizer)),
                constraint=program,
                sampling=sampling,
            )
        )
        templates.append(template)
    for smiles, template, result in zip(molecules, templates, engine.generate(requests)):
        assert result.finish_reason == "eos", result.error
        template.check(result.text, profile)
        assert decode_generation(result.text, profile).canonical_smiles == canonical_smiles(smiles)


def test_steered_and_collecting_graphs_equal_eager_with_a_capture_between_chunks(llama):
    """Steered / collecting variants captured on first use, here while a just-admitted row is live (one slot
    per request wave), give the eager engine's tokens and activations."""
    import dataclasses

    from inferlab.engine import Engine, EngineConfig
    from inferlab.types import Collect, Steer

    vector = torch.randn(1024, generator=torch.Generator().manual_seed(5))
    plain = _requests(128256)[:4]
    hooks = [dict(), dict(steering=(Steer(6, vector, 4.0),)), dict(collect=Collect((3, -1), "mean")),
             dict(steering=(Steer(-1, vector, -2.0),), collect=Collect((6,), "all"))]
    requests = [dataclasses.replace(r, **t) for r, t in zip(plain, hooks)]
    outputs = []
    for graphs in (True, False):
        engine = Engine(EngineConfig(model=llama, max_slots=2, max_seq_len=256, cuda_graphs=graphs, gemm="cublas"))
        outputs.append(engine.generate(requests))
        del engine
        torch.cuda.empty_cache()
    for ours, eager in zip(*outputs):
        assert ours.ok and ours.token_ids == eager.token_ids, ours.id
        assert (ours.activations is None) == (eager.activations is None)
        for layer, value in (ours.activations or {}).items():
            assert _rel(value, eager.activations[layer]) < 1e-3, (ours.id, layer)


COLD_START_CHILD = """
import json, sys
from inferlab.engine import Engine, EngineConfig
from inferlab.types import Request, SamplingParams
engine = Engine(EngineConfig(model=sys.argv[1], max_slots=16, max_seq_len=256))
results = engine.generate([Request(id=str(i), prompt_ids=(5, 6, 7 + i), sampling=SamplingParams(max_new_tokens=8))
                           for i in range(4)])
stats = engine.stats.as_dict()
stats["all_ok"] = all(r.ok for r in results)
print(json.dumps(stats))
"""


def test_a_fresh_machine_compiles_the_warm_up_beside_the_weights(llama, tmp_path):
    """A process with empty Triton and start-up caches (a fresh machine): the background precompile compiles
    every kernel the warm-up launches, so the warm-up compiles none on the critical path."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton"), INFERLAB_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", COLD_START_CHILD, str(llama)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    assert stats["all_ok"] and stats["precompile_error"] == "", stats["precompile_error"]
    assert stats["precompile_kernels"] >= 10 and stats["warmup_compiles"] == 0, stats
    assert stats["gemm_plan_source"] in ("shipped", "timed")
