"""The prefill-graph path (prefill_graphs.py) composed with the Gemma forward and with steering / collection,
on CPU: the runner's graph path with a capturer that replays eagerly gives the eager engine's tokens and
activations; and the prefill forwards contain nothing a CUDA-graph capture refuses (a host sync or a
data-dependent shape), checked by a dispatch mode, so the windowed / soft-capped attention of Gemma 2/3 is
capturable as it stands."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from inferlab.engine import Engine, EngineConfig
from inferlab.engine.attention import needs_windowed
from inferlab.engine.collection import CollectPlan
from inferlab.engine.graphs import DecodeGraphs
from inferlab.engine.prefill_graphs import PrefillGraphs, PrefillKey
from inferlab.types import Collect, Request, SamplingParams, Steer
from tests.unit.engine.eager_capturer import EagerCapturer

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def _config(preset_path, **extra):
    return EngineConfig(model=preset_path, max_slots=4, max_seq_len=64, decode_steps_per_sync=3, min_admission=1,
                        **extra)


def _with_graphs(engine: Engine, decode: bool = False) -> EagerCapturer:
    """The runner's graph path (runner.use_graphs) with the eager capturer: prefill graphs, and with `decode`
    the decode graphs too (each (bucket, variant) captured at first need, under live rows)."""
    runner, capturer = engine.runner, EagerCapturer()
    runner.prefill_graphs = PrefillGraphs(runner.model, runner.cache, runner.slots, 4, runner.cache.max_len,
                                          engine.max_prefill_tokens, capturer, runner.hook_tables)
    if decode:
        runner.graphs = DecodeGraphs(runner.sizes, capturer)
    return capturer


def _gemma_requests(vocab: int) -> list[Request]:
    """Prompts shorter than, equal to and longer than the windows (8 / 12), in the 16 and 32 buckets (padded
    past the window), some repeated (shared prompts), greedy and seeded."""
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (20, 27, 5, 8, 13)]
    requests = []  # first admission: the 20-token prompt three times and the 27-token one (bucket 32), then 16
    for i, prompt in enumerate(prompts[:1] * 3 + prompts[1:]):
        sampling = SamplingParams(temperature=0.0 if i % 2 else 1.0, seed=i, max_new_tokens=6 + i % 4)
        requests.append(Request(id=f"g{i}", prompt_ids=tuple(prompt), sampling=sampling))
    return requests


@pytest.mark.parametrize("preset", ["tiny-gemma2", "tiny-gemma3"])
def test_gemma_prefill_through_prefill_graphs_gives_the_eager_tokens(tiny_checkpoint, preset):
    """Windowed (the window cuts into the padded bucket) and soft-capped (Gemma 2) layers, and Gemma 3's
    global layers on the plain path, through the graph path's padded lanes and static logits buffer
    (Gemma 2's final soft-cap applied in place there), shared prompts included."""
    path = tiny_checkpoint(preset)
    eager = Engine(_config(path))
    graphed = Engine(_config(path))
    capturer = _with_graphs(graphed)
    spec = graphed.spec
    assert any(needs_windowed(16, spec.window(i), spec.attn_logit_softcap) for i in range(spec.num_layers))
    requests = _gemma_requests(spec.vocab_size)
    ours = graphed.generate(requests)
    assert all(r.ok for r in ours)
    assert [r.token_ids for r in ours] == [r.token_ids for r in eager.generate(requests)]
    keys = set(graphed.runner.prefill_graphs.graphs)
    assert {key.length for key in keys} >= {16, 32} and capturer.count == len(keys)
    assert graphed.stats.shared_prompt_rows >= 2  # the repeated 20-token prompt: one prefill for three rows


def _steered_collecting_requests(hidden: int, layers: int) -> list[Request]:
    g = torch.Generator().manual_seed(5)
    v = torch.randn(hidden, generator=g)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=5)
    return [
        Request(id="steer", prompt_ids=(5, 6, 7, 8, 9), sampling=greedy, steering=(Steer(0, v, 1.5),)),
        Request(id="plain", prompt_ids=(5, 6, 7, 8, 9), sampling=greedy),
        Request(id="mean", prompt_ids=tuple(range(3, 20)), sampling=greedy, collect=Collect((0, -1), "mean")),
        Request(id="both", prompt_ids=(4, 4, 4), sampling=greedy, steering=(Steer(-1, v, -0.7),),
                collect=Collect((layers - 1,), "all")),
        Request(id="last", prompt_ids=(9, 3), sampling=SamplingParams(temperature=1.0, seed=3, max_new_tokens=4),
                collect=Collect((0,), "last")),
    ]


@pytest.mark.parametrize("preset", ["tiny", "tiny-gemma2"])
def test_steered_and_collecting_prefills_replay_graphs_with_their_residual_hooks(tiny_checkpoint, preset):
    """A batch with steered / collecting rows replays a prefill graph of that kind (residual hooks built over the
    static lane rows and lengths), and its decode chunks the steered / collecting decode variants, captured
    lazily under live rows: tokens and activations of the eager engine; a later request collecting another
    layer grows the buffers and drops the collecting graphs, prefill and decode, which are captured again."""
    path = tiny_checkpoint(preset)
    eager, graphed = Engine(_config(path)), Engine(_config(path))
    capturer = _with_graphs(graphed, decode=True)
    requests = _steered_collecting_requests(graphed.spec.hidden_size, graphed.spec.num_layers)
    ours, ref = graphed.generate(requests), eager.generate(requests)
    assert all(r.ok for r in ours)
    for a, b in zip(ours, ref):
        assert a.token_ids == b.token_ids, a.id
        assert (a.activations is None) == (b.activations is None)
        for layer, value in (a.activations or {}).items():
            torch.testing.assert_close(value, b.activations[layer], atol=1e-5, rtol=1e-5)
    graphs, variants = graphed.runner.prefill_graphs.graphs, graphed.runner.graphs.graphs
    assert any(key.steered for key in graphs) and any(key.collecting for key in graphs)
    assert any(v.steered and v.collecting for _, v in variants) and any(not v.steered for _, v in variants)
    count = capturer.count
    # "all" over 8 tokens (the buffers hold 5) at layers 0 and 1 (tiny-gemma2's held 0 and 2): they grow
    grow = [Request(id="grow", prompt_ids=(7, 8, 9), sampling=SamplingParams(temperature=0.0, max_new_tokens=8),
                    collect=Collect((0, 1), "all"))]
    mine, theirs = graphed.generate(grow)[0], eager.generate(grow)[0]
    assert mine.token_ids == theirs.token_ids and list(mine.activations) == [0, 1]
    for layer, value in mine.activations.items():
        torch.testing.assert_close(value, theirs.activations[layer], atol=1e-5, rtol=1e-5)
    assert graphed.runner.hook_tables.collection.covers(CollectPlan((0, 1), "all", 8))  # grown
    # every collecting graph captured over the old buffers is gone; the new ones were captured for this batch
    assert [key for key in graphs if key.collecting] == [PrefillKey(1, 16, False, True)]
    recaptured = [key for key in variants if key[1].collecting]
    assert recaptured and all(size == 1 for size, _ in recaptured)  # this batch's one row
    assert capturer.count == count + 1 + len(recaptured)


# ---- capturability: what a CUDA-graph capture refuses, caught on CPU -------------------------------------
SYNCING_OPS = {  # reading a device value on the host, or an output shape that depends on tensor values
    "_local_scalar_dense", "item", "is_nonzero", "equal", "nonzero", "masked_select", "masked_scatter",
    "_unique", "_unique2", "unique_dim", "unique_consecutive", "argwhere", "lift_fresh",
}


class _NoHostSync(TorchDispatchMode):
    """Fails on any op that would sync with the host or give a data-dependent shape inside a CUDA graph
    capture: .item() and friends, nonzero / masked_select / unique, boolean-mask indexing, tensor-valued
    repeat_interleave, torch.tensor(...) built from host data (lift_fresh: a pageable host copy)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in SYNCING_OPS or (name == "repeat_interleave" and func._overloadname == "Tensor"
                                   and kwargs.get("output_size") is None):
            raise AssertionError(f"{func} is not capturable (host sync or data-dependent shape)")
        if name in ("index", "index_put", "index_put_", "_index_put_impl_"):
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(t is not None and t.dtype == torch.bool for t in indices):
                raise AssertionError(f"{func} with a boolean mask is not capturable")
        self.ops += 1
        return func(*args, **kwargs)


@pytest.mark.parametrize("preset", ["tiny", "tiny-gemma2", "tiny-gemma3"])
def test_prefill_forwards_have_no_host_sync(tiny_checkpoint, preset):
    """The forward a prefill graph captures (PrefillGraphs._forward: the static block in, the model's prefill
    with the residual hooks, the logits into the static buffer), for a plain and a steered + collecting batch, with
    windows shorter than the padded length, runs without an op a capture refuses."""
    engine = Engine(_config(tiny_checkpoint(preset)))
    capturer = _with_graphs(engine)
    runner, graphs = engine.runner, engine.runner.prefill_graphs
    requests = _steered_collecting_requests(engine.spec.hidden_size, engine.spec.num_layers)[:4]
    assert all(r.ok for r in engine.generate(requests))  # the tables exist and the warm prompts are real
    items = [engine._prepare_request(i, r) for i, r in enumerate(requests)]
    runner.admit(runner.batch_of(range(len(items)), items))
    shape = graphs.bucket(len(items), max(item.prompt_len for item in items))
    block = graphs.host_block(shape, [item.prompt_ids for item in items], list(range(len(items))))
    graphs.inputs[: block.numel()].copy_(block)
    for key in (PrefillKey(*shape), PrefillKey(*shape, True, True)):
        mode = _NoHostSync()
        with torch.inference_mode(), mode:
            graphs._forward(key)
        assert mode.ops > 50  # the forward ran under the mode
    with pytest.raises(AssertionError, match="not capturable"), _NoHostSync():
        torch.arange(6)[torch.arange(6) > 2]  # the mode does catch a boolean mask
    assert capturer.count >= 1


def test_a_bucket_serves_a_batch_only_while_its_padding_is_small():
    """Small batches take their bucket whatever it pads (launch-bound); a large one whose bucket would add
    more than max(GRAPH_PAD_TOKENS, GRAPH_PAD_SHARE of its tokens) runs eagerly (compute-bound)."""
    from inferlab.engine.prefill_graphs import _powers_up_to

    graphs = SimpleNamespace(lane_sizes=_powers_up_to(1, 256), length_sizes=_powers_up_to(16, 1350), max_tokens=8192)
    assert PrefillGraphs.bucket(graphs, 3, 20) == (4, 32)  # 128 tokens for 60: small, the graph wins
    assert PrefillGraphs.bucket(graphs, 5, 600) is None  # 8 x 1024 = 8,192 for 3,000 tokens: eager
    assert PrefillGraphs.bucket(graphs, 7, 1000) == (8, 1024)  # 8,192 for 7,000: 17% padding
    assert PrefillGraphs.bucket(graphs, 7, 1200) is None  # 8 x 1350 > max_tokens


def test_right_padded_places_each_prompt_at_its_lane():
    from inferlab.engine.prefill_graphs import right_padded

    assert right_padded([[5, 6, 7], [8], [9, 10]], 4).tolist() == [5, 6, 7, 0, 8, 0, 0, 0, 9, 10, 0, 0]
    assert right_padded([(1, 2)], 2).tolist() == [1, 2]
