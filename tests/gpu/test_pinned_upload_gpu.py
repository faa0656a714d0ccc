"""The weights read straight from the files to the device (models/pinned_upload.py, the loader's CUDA path)
equal the host path's, bitwise, after the loader's fusion and cast; and the load is timed against the host
path's. Quick: tiny (fp32 on disk, cast to bf16); full: qwen3-0.6b (bf16 on disk). The byte path's CPU cases:
tests/unit/test_pinned_upload.py."""

from __future__ import annotations

import time

import torch
from gpu_testkit import CUDA_ONLY

from inferlab.models.config import read_model_spec
from inferlab.models.loader import assemble_weights, load_weights

pytestmark = CUDA_ONLY


def test_the_direct_load_equals_the_host_path_and_says_how_long_each_took(size, checkpoint):
    from safetensors.torch import load_file

    model = checkpoint(size.pick("tiny", "qwen3-0.6b"))
    spec = read_model_spec(model)
    device = torch.device("cuda")
    load_weights(model, spec, torch.bfloat16, device)  # the file in the page cache for both timings
    torch.cuda.synchronize()
    t = time.perf_counter()
    direct = load_weights(model, spec, torch.bfloat16, device)
    torch.cuda.synchronize()
    direct_s = time.perf_counter() - t
    t = time.perf_counter()
    host = load_file(str(model / "model.safetensors"))
    through_host = assemble_weights(spec, host.__getitem__, torch.bfloat16, device)
    torch.cuda.synchronize()
    host_s = time.perf_counter() - t
    print(f"\n{model.name}: {direct.nbytes() / 1e9:.2f} GB of weights, direct {direct_s:.2f} s, "
          f"through host tensors {host_s:.2f} s")
    for a, b in zip(direct.layers, through_host.layers):
        assert torch.equal(a.qkv, b.qkv) and torch.equal(a.gate_up, b.gate_up) and torch.equal(a.down, b.down)
    assert torch.equal(direct.embed, through_host.embed) and torch.equal(direct.lm_head, through_host.lm_head)
