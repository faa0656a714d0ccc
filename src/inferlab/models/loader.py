"""safetensors checkpoint -> ModelWeights on the engine's device and dtype (the tokenizer: tokenizer_loading.py).

Every key and shape the spec implies is checked before a byte is copied: missing keys, unexpected keys and
wrong shapes are reported together in one InputError. q/k/v and gate/up are fused here (see weights.py).
Reads a single `model.safetensors`, a sharded checkpoint (`model.safetensors.index.json`) or any set of
`*.safetensors` files. `placeholder_weights` lays out the same ModelWeights without a checkpoint (shapes
only). It does not know about architectures (registry.py) or the forwards (llama.py, gemma.py).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

import torch
from safetensors import safe_open

from inferlab.errors import InputError
from inferlab.models.checkpoint_check import weight_files
from inferlab.models.config import ModelSpec
from inferlab.models.pinned_upload import PinnedUpload
from inferlab.models.weights import LayerWeights, ModelWeights

log = logging.getLogger(__name__)

# Keys some checkpoints carry that the forward does not need (older exports saved rotary buffers).
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
# The head read after the decoder: "lm" (lm_head, the generation engine), "score" (a ...ForSequenceClassification
# checkpoint's score.weight [num_labels, hidden]) or "none" (hidden states only: a stored lm_head is not read).
HEADS = ("lm", "score", "none")


def expected_shapes(spec: ModelSpec, head: str = "lm") -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """(required key -> shape, optional keys). A tied lm_head.weight may or may not be stored."""
    assert head in HEADS, head
    h, q, kv, inter = spec.hidden_size, spec.q_size, spec.kv_size, spec.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (spec.vocab_size, h),
        "model.norm.weight": (h,),
    }
    if head != "lm":
        shapes["score.weight"] = (spec.num_labels, h)
    if head != "score":
        shapes["lm_head.weight"] = (spec.vocab_size, h)
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (inter, h),
            p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
        }
        if spec.qkv_bias:
            shapes |= {p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,)}
            shapes |= {p + "self_attn.v_proj.bias": (kv,)}
        if spec.o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (h,)
        if spec.qk_norm:
            shapes |= {p + "self_attn.q_norm.weight": (spec.head_dim,), p + "self_attn.k_norm.weight": (spec.head_dim,)}
        if spec.post_norms:
            shapes |= {p + "pre_feedforward_layernorm.weight": (h,), p + "post_feedforward_layernorm.weight": (h,)}
    optional = {"lm_head.weight"} if spec.tie_word_embeddings or head == "none" else set()
    if head == "none":
        optional.add("score.weight")  # hidden states of a classifier: its head is not read
    return shapes, optional


def checkpoint_files(model_dir: Path) -> dict[str, Path]:
    """Map every tensor key to the safetensors file holding it (checkpoint_check.py checks the files)."""
    files = weight_files(model_dir)
    if isinstance(files, dict):
        return files
    located: dict[str, Path] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            located |= {key: path for key in f.keys()}
    return located


def check_keys(spec: ModelSpec, found: dict[str, tuple[int, ...]], where: Path, head: str = "lm") -> None:
    """Raise one InputError listing every missing, unexpected or wrongly shaped tensor."""
    shapes, optional = expected_shapes(spec, head)
    problems = []
    missing = sorted(k for k in shapes if k not in found and k not in optional)
    unexpected = sorted(k for k in found if k not in shapes and not k.endswith(IGNORED_SUFFIXES))
    wrong = sorted(
        f"{k}: {list(found[k])} (expected {list(s)})" for k, s in shapes.items() if k in found and found[k] != s
    )
    if missing:
        problems.append(f"missing ({len(missing)}): " + ", ".join(missing[:20]))
    if unexpected:
        problems.append(f"unexpected ({len(unexpected)}): " + ", ".join(unexpected[:20]))
    if wrong:
        problems.append(f"wrong shape ({len(wrong)}): " + "; ".join(wrong[:20]))
    if problems:
        raise InputError(
            f"checkpoint {where} does not match its config.json ({spec.architecture}, {spec.num_layers} layers): "
            + " | ".join(problems)
        )


def load_weights(model_dir: str | Path, spec: ModelSpec, dtype: torch.dtype, device: torch.device,
                 head: str = "lm") -> ModelWeights:
    """Read, check, fuse and cast the checkpoint's tensors onto `device`; `head` as in HEADS."""
    root = Path(model_dir)
    located = checkpoint_files(root)
    with ExitStack() as stack:
        handles = {path: stack.enter_context(safe_open(str(path), framework="pt")) for path in set(located.values())}
        found = {key: tuple(handles[path].get_slice(key).get_shape()) for key, path in located.items()}
        check_keys(spec, found, root, head)
        # on a GPU the bytes go straight from the files to the device (pinned_upload.py)
        upload = stack.enter_context(PinnedUpload(set(located.values()), device)) if device.type == "cuda" else None

        def get(key: str) -> torch.Tensor:  # a host tensor (assemble_weights moves it), or already the device's
            path = located[key]
            if upload is not None and upload.can_read(path, key):
                return upload.tensor(path, key)
            return handles[path].get_tensor(key)

        weights = assemble_weights(spec, get, dtype, device, head)
    log.info("loaded %s: %.1f MB of weights as %s on %s", root, weights.nbytes() / 1e6, dtype, device)
    return weights


def placeholder_weights(spec: ModelSpec, dtype: torch.dtype, device: torch.device) -> ModelWeights:
    """ModelWeights of the spec's shapes with uninitialised values, laid out as load_weights lays them out:
    on the "meta" device (no memory) for the start-up's kernel precompile (engine/kernel_precompile.py),
    or on a GPU where only the shapes matter (the GEMM plan measurement, engine/gemm_plans/measure.py)."""
    shapes, _ = expected_shapes(spec)
    return assemble_weights(spec, lambda key: torch.empty(shapes[key], dtype=dtype, device=device), dtype, device)


def assemble_weights(spec: ModelSpec, get: Callable[[str], torch.Tensor], dtype: torch.dtype,
                     device: torch.device, head: str = "lm") -> ModelWeights:
    """ModelWeights from `get(checkpoint key) -> tensor`: q/k/v and gate/up fused, cast, moved to `device`;
    `head` as in HEADS."""

    def put(*keys: str) -> torch.Tensor:  # concatenated along dim 0, cast, moved
        parts = [get(k) for k in keys]
        joined = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
        return joined.to(device=device, dtype=dtype).contiguous()

    layers = []
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        layers.append(
            LayerWeights(
                input_norm=put(p + "input_layernorm.weight"),
                qkv=put(a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                qkv_bias=put(a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias") if spec.qkv_bias else None,
                q_norm=put(a + "q_norm.weight") if spec.qk_norm else None,
                k_norm=put(a + "k_norm.weight") if spec.qk_norm else None,
                o=put(a + "o_proj.weight"),
                o_bias=put(a + "o_proj.bias") if spec.o_bias else None,
                post_norm=put(p + "post_attention_layernorm.weight"),
                gate_up=put(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"),
                down=put(p + "mlp.down_proj.weight"),
                pre_mlp_norm=put(p + "pre_feedforward_layernorm.weight") if spec.post_norms else None,
                post_mlp_norm=put(p + "post_feedforward_layernorm.weight") if spec.post_norms else None,
            )
        )
    embed = put("model.embed_tokens.weight")
    lm_head = None
    if head == "lm":
        lm_head = embed if spec.tie_word_embeddings else put("lm_head.weight")
    score = put("score.weight") if head == "score" else None
    return ModelWeights(embed=embed, layers=layers, final_norm=put("model.norm.weight"), lm_head=lm_head, score=score)
