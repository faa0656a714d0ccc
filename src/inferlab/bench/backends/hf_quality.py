"""Backend `hf` of the `conformer-quality` scenario: transformers `generate` sampling conformers, without a
constraint (processor=none: the model's own sampling up to EOS or the request's output bound) or with the
seeds' per-token Python LogitsProcessor (processor=python: workloads/conformers/evaluation/
hf_baseline_processor.py, a skeleton with placeholder coordinates per molecule, EOS forced after it).

Requests are sorted by output bound, longest first, into calls of `batch_size` (0: all of them in one call:
the whole batch decodes together, the fewest sequential steps; transformers' sampling is seeded per call,
from the call's first request's seed, so its draws depend on the batch, unlike the engine's). Prompts are
left-padded; each row is cut at its first EOS, or at its own bound (a row of a longer call may run past it).
The mask comes before temperature and top-k/top-p, as transformers orders a user's processors before its
own warpers. Heavy imports happen in the child only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from inferlab.bench.backends import hf_knobs
from inferlab.bench.backends.base import BackendSpec, QualitySpec, unprepared
from inferlab.bench.backends.hf_model import HFModelBackend, load_with_tokenizer
from inferlab.bench.knobs import Knob
from inferlab.types import Request, Result
from inferlab.workloads.backend import Supports, finished_result

KNOBS = (
    hf_knobs.ATTN_IMPLEMENTATION,
    Knob("processor", str, "none", "none: the model's own sampling; python: the seeds' per-token LogitsProcessor",
         choices=("none", "python")),
    Knob("batch_size", int, 0, "requests per generate call, longest bound first (0 = all of a seed's requests)",
         minimum=0),
)


class HFQualityBackend(HFModelBackend):
    """Requests carry a ConformerConstraint and share their sampling settings (their seeds and bounds differ)."""

    name = "hf"
    supports = Supports(constraint=True)

    def __init__(self, config: dict[str, Any], spec: QualitySpec) -> None:
        super().__init__(config, spec)
        self.tokenizer: Any = None
        self.masks: Any = None
        self.templates: dict[str, Any] = {}  # SMILES -> BaselineTemplate (processor=python), or None

    def load(self, model_dir: Path, device: Any, dtype: Any) -> None:
        self.model, self.tokenizer, self.eos_token_ids = load_with_tokenizer(self.config["attn_implementation"],
                                                                             model_dir, device, dtype)

    def prepare(self, requests: list[Request]) -> None:
        from inferlab.workloads.conformers.chemistry.profiles import get_profile
        from inferlab.workloads.conformers.evaluation.hf_baseline_processor import (
            SeedsVocabMasks,
            build_baseline_template,
        )

        python = self.config["processor"] == "python"
        if python:
            vocab = self.model.config.get_text_config().vocab_size
            self.masks = SeedsVocabMasks.build(self.tokenizer, vocab, self.model.device)
        profile = get_profile(self.spec.profile)
        for r in requests:
            smiles = r.constraint.smiles
            if smiles not in self.templates:
                self.templates[smiles] = build_baseline_template(smiles, profile, self.tokenizer) if python else None

    def unsupported(self, request: Request) -> str | None:
        return unprepared(request, self.templates, self.name) or super().unsupported(request)

    def _bound(self, request: Request) -> int:
        template = self.templates[request.constraint.smiles]
        return len(template) + 1 if template is not None else request.sampling.max_new_tokens

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        served, refused = self.split_supported(requests)
        yield from refused
        order = sorted(served, key=lambda r: -self._bound(r))
        size = self.config["batch_size"] or len(order) or 1
        for start in range(0, len(order), size):
            yield from self._call(order[start : start + size])

    def _call(self, batch: list[Request]) -> list[Result]:
        import torch

        from inferlab.bench.backends.hf_generate_options import generate_options

        options = generate_options(batch[0].sampling, "dynamic", False, None, self.model.generation_config)
        torch.manual_seed(batch[0].sampling.seed or 0)
        if self.config["processor"] == "python":
            from inferlab.workloads.conformers.evaluation.hf_baseline_run import run_baseline_batch

            templates = [self.templates[r.constraint.smiles] for r in batch]
            rows = [list(row.token_ids) for row in run_baseline_batch(self.model, self.tokenizer, templates,
                                                                      self.masks, **options)]
        else:
            rows = self._free_rows(batch, options)
        return [finished_result(r, row[: self._bound(r)], self.eos_token_ids) for r, row in zip(batch, rows)]

    def _free_rows(self, batch: list[Request], options: dict[str, Any]) -> list[list[int]]:
        """The batch's new tokens per row: prompts left-padded, up to the longest bound of the batch."""
        import torch

        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        width = max(len(r.prompt_ids) for r in batch)
        ids = torch.tensor([[pad] * (width - len(r.prompt_ids)) + list(r.prompt_ids) for r in batch])  # [rows, width]
        mask = torch.tensor([[0] * (width - len(r.prompt_ids)) + [1] * len(r.prompt_ids) for r in batch])
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids.to(self.model.device), attention_mask=mask.to(self.model.device),
                                      max_new_tokens=max(self._bound(r) for r in batch), eos_token_id=eos,
                                      pad_token_id=pad, **options)
        return out[:, width:].tolist()

    def extra_metrics(self) -> dict[str, Any]:
        return {"batch_size": self.config["batch_size"]}


BACKEND = BackendSpec(
    "hf", "transformers generate sampling conformers, unconstrained or with the seeds' Python LogitsProcessor",
    KNOBS, HFQualityBackend, scenario="conformer-quality", precheck=hf_knobs.precheck,
)
