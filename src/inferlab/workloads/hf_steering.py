"""Steering and hidden states collected while generating, on a transformers model through forward hooks:
the engine's semantics (docs/engine.md "Steering and activations") written the way a careful user writes
them, for the "hf" backend of `inferlab generate` (the reference and the fallback) and the lab's
transformers cells.

- Steering: one forward hook per steered decoder layer adds a per-row delta [rows, 1, hidden] to the
  layer's output (`scale * vector` with the vector in the model dtype; zeros for rows not steered there), at every
  position of every forward call of `generate`: the prompt in prefill, each new token after.
- Collection: the hook of a collected layer keeps the output at the last position of every forward call
  (the prompt's last token in the left-padded prefill, then each fed-back token) on the device; after the
  call, row i's first n_i kept vectors are the states that produced its n_i generated tokens, pooled last /
  mean / all. Registered after the steering delta, so collected states are steered ones, as in the engine.
Requests' entries are checked by the engine's own rules (engine/steering.py, engine/collection.py), so
both backends refuse the same requests with the same messages.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import torch

from inferlab.engine import CollectPlan, SteerEntry
from inferlab.workloads.activations import find_decoder_layers
from inferlab.workloads.hf_loading import text_config_of


class Recording:
    """Per collected layer, the last-position output of each forward call: [rows, hidden] tensors."""

    def __init__(self, layers: Sequence[int]) -> None:
        self.steps: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}

    def pooled(self, tokens: Sequence[int], plans: Sequence[CollectPlan | None]) -> list[dict[int, torch.Tensor] | None]:
        """Per batch row (which generated tokens[i] tokens): {layer: fp32 CPU tensor} as plans[i] asks, or None.
        Pooled on the device for the whole batch, then moved to the host once per layer and form."""
        n = torch.tensor(list(tokens))  # [rows]
        out: list[dict[int, torch.Tensor] | None] = [{} if plan is not None else None for plan in plans]
        for layer in {layer for plan in plans if plan is not None for layer in plan.layers}:
            states = torch.stack(self.steps[layer], dim=1)  # [rows, calls, hidden]
            pools = {plan.pool for plan in plans if plan is not None and layer in plan.layers}
            forms: dict[str, torch.Tensor] = {}
            if "last" in pools:
                forms["last"] = states[torch.arange(len(n)), n.to(states.device) - 1].float().cpu()
            if "mean" in pools:
                kept = torch.arange(states.shape[1], device=states.device)[None, :] < n.to(states.device)[:, None]
                sums = (states.float() * kept[:, :, None]).sum(dim=1)
                forms["mean"] = (sums / n.to(states.device)[:, None]).cpu()
            if "all" in pools:
                forms["all"] = states.cpu()
            for i, plan in enumerate(plans):
                if plan is None or layer not in plan.layers:
                    continue
                value = forms[plan.pool][i]
                out[i][layer] = value[: min(int(n[i]), plan.max_tokens)].float() if plan.pool == "all" else value
        return [None if o is None else {layer: o[layer] for layer in plan.layers} for o, plan in zip(out, plans)]


class HFResidualHooks:
    """Steering and collection hooks on a transformers model's decoder layers (the engine's ResidualHooks,
    engine/residual_hooks.py, for the "hf" backend)."""

    def __init__(self, model) -> None:
        config = text_config_of(model.config)
        self.num_layers = int(config.num_hidden_layers)
        self.hidden_size = int(config.hidden_size)
        self.decoder_layers = find_decoder_layers(model, self.num_layers)
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype

    def deltas(self, steering: Sequence[Sequence[SteerEntry]]) -> dict[int, torch.Tensor]:
        """{layer: [rows, 1, hidden] model dtype}: each row's scale * vector at that layer, zeros elsewhere."""
        out: dict[int, torch.Tensor] = {}
        for row, entries in enumerate(steering):
            for entry in entries:
                if entry.layer not in out:
                    out[entry.layer] = torch.zeros((len(steering), 1, self.hidden_size), dtype=self.dtype)
                out[entry.layer][row, 0] = entry.scale * entry.values.to(self.dtype)  # as `scale * vector` in a hook
        return {layer: delta.to(self.device, non_blocking=True) for layer, delta in out.items()}

    @contextmanager
    def attached(self, steering: Sequence[Sequence[SteerEntry]], collect_layers: Sequence[int],
                 keep_all: bool = False) -> Iterator[Recording]:
        """Hooks for one batch (row i = steering[i]) while the block runs; yields the Recording. keep_all:
        record every position of each call ([rows, positions, hidden]), not only the last."""
        deltas = self.deltas(steering)
        recording = Recording(collect_layers)
        handles = []
        for layer in sorted(set(deltas) | set(collect_layers)):
            def hook(module, args, output, layer=layer):
                hidden = output[0] if isinstance(output, tuple) else output  # [rows, positions, hidden]
                if layer in deltas:
                    hidden = hidden + deltas[layer]
                if layer in recording.steps:  # a copy, not a view: the prefill output is large
                    recording.steps[layer].append(hidden.clone() if keep_all else hidden[:, -1].clone())
                return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden

            handles.append(self.decoder_layers[layer].register_forward_hook(hook))
        try:
            yield recording
        finally:
            for handle in handles:
                handle.remove()
