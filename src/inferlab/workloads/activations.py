"""Pooled hidden states of chosen layers for one batch, through forward hooks on a transformers base model.

Owns: the layer numbering (transformers' `output_hidden_states` numbering: 0 = the input of the first
decoder layer, i = the output of decoder layer i-1, L = the final normed `last_hidden_state`), pooling over
real tokens only (padding masked), and stopping the forward after the deepest layer asked for, so the
rest of the model (and any head) is never run. Pooling: "last" real token, "mean" over real tokens, "all"
real tokens (a [n, hidden] tensor per row). Does not own: files, resume or batching (hidden_states.py).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from inferlab.errors import ConfigError, UnsupportedError
from inferlab.workloads.batching import pad_batch
from inferlab.workloads.hf_loading import LoadedModel, text_config_of


def pool_last(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """hidden [rows, T, H], mask [rows, T] (right padded) -> [rows, H] fp32 at each row's last real token."""
    last = mask.sum(dim=1) - 1  # [rows]
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last].float()


def pool_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """hidden [rows, T, H], mask [rows, T] -> [rows, H] fp32 mean over real tokens."""
    weights = mask.to(torch.float32).unsqueeze(1)  # [rows, 1, T]
    summed = torch.bmm(weights, hidden.float()).squeeze(1)  # [rows, H]
    return summed / mask.sum(dim=1, keepdim=True).to(torch.float32)


def pool_all(hidden: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """hidden [rows, T, H], mask [rows, T] (right padded) -> per row its real tokens' states [n_i, H] fp32."""
    return [h[:n].float() for h, n in zip(hidden, mask.sum(dim=1).tolist())]


POOLERS: dict[str, Callable[[torch.Tensor, torch.Tensor], Any]] = {"last": pool_last, "mean": pool_mean,
                                                                   "all": pool_all}


def resolve_layers(layers: tuple[int, ...], num_layers: int) -> tuple[int, ...]:
    """Sorted unique layer numbers in [0, num_layers]; negative numbers count from the end (-1 = L)."""
    if not layers:
        raise ConfigError("give at least one layer (--layers), e.g. --layers -1")
    resolved = set()
    for layer in layers:
        index = layer + num_layers + 1 if layer < 0 else layer
        if not 0 <= index <= num_layers:
            raise ConfigError(
                f"layer {layer} is out of range: this model has hidden states 0..{num_layers} "
                f"(0 = embeddings, {num_layers} = final normed output; negative counts from the end)"
            )
        resolved.add(index)
    return tuple(sorted(resolved))


def find_decoder_layers(model: torch.nn.Module, num_layers: int) -> torch.nn.ModuleList:
    """The ModuleList of the model's decoder layers (e.g. `model.layers`), found by its length."""
    candidates = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.ModuleList) and len(module) == num_layers
    ]
    named = [c for c in candidates if c[0].split(".")[-1] in ("layers", "h", "layer", "blocks")]
    chosen = named or candidates
    if not chosen:
        raise UnsupportedError(f"{type(model).__name__}: no list of {num_layers} decoder layers found for hooks")
    return chosen[0][1]


def _to_cpu(pooled: Any) -> Any:
    return [t.cpu() for t in pooled] if isinstance(pooled, list) else pooled.cpu()


class _StopForward(Exception):
    """Raised by the hook of the deepest layer asked for: nothing later in the model is needed."""


def _first_tensor(value) -> torch.Tensor:
    return value[0] if isinstance(value, (tuple, list)) else value


class HiddenStateCollector:
    """Collects pooled hidden states of `layers` (numbers as in resolve_layers) from a base model."""

    def __init__(self, loaded: LoadedModel, layers: tuple[int, ...], pool: str) -> None:
        if pool not in POOLERS:
            raise ConfigError(f"pool {pool!r} is not known; use one of {', '.join(POOLERS)}")
        text_config = text_config_of(loaded.model.config)
        self.num_layers = int(text_config.num_hidden_layers)
        self.hidden_size = int(text_config.hidden_size)
        self.layers = resolve_layers(layers, self.num_layers)
        self.loaded = loaded
        self._pool = POOLERS[pool]
        self._decoder_layers = find_decoder_layers(loaded.model, self.num_layers)

    def collect(self, token_ids: list[list[int]]) -> dict[int, Any]:
        """One batch -> {layer: [rows, hidden] fp32 on the CPU}, each row pooled over its own tokens (pool "all":
        {layer: a [n_i, hidden] tensor per row})."""
        input_ids, attention_mask = pad_batch(token_ids, self.loaded.pad_id, side="right")
        device = self.loaded.device
        input_ids = input_ids.to(device, non_blocking=True)  # [rows, T]
        attention_mask = attention_mask.to(device, non_blocking=True)  # [rows, T]
        captured: dict[int, torch.Tensor] = {}
        needs_final = self.num_layers in self.layers
        deepest_hooked = max((i for i in self.layers if i < self.num_layers), default=None)

        def capture(index: int, hidden: torch.Tensor) -> None:
            captured[index] = self._pool(hidden, attention_mask)
            if index == deepest_hooked and not needs_final:
                raise _StopForward

        handles = []
        for index in self.layers:
            if index == 0:
                handles.append(self._decoder_layers[0].register_forward_pre_hook(
                    lambda m, args, kwargs: capture(0, args[0] if args else kwargs["hidden_states"]),
                    with_kwargs=True,
                ))
            elif index < self.num_layers:
                handles.append(self._decoder_layers[index - 1].register_forward_hook(
                    lambda m, args, out, index=index: capture(index, _first_tensor(out))
                ))
        try:
            with torch.inference_mode():
                try:
                    out = self.loaded.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
                except _StopForward:
                    out = None
                if needs_final:
                    captured[self.num_layers] = self._pool(out.last_hidden_state, attention_mask)
                return {index: _to_cpu(captured[index]) for index in self.layers}
        finally:
            for handle in handles:
                handle.remove()
