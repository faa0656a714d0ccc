"""Backend `etkdg` of the `conformer-quality` scenario: RDKit's ETKDGv3 in place of a model, the ceiling of an
ETKDG reference set (ETKDG scored against ETKDG with another seed). Its conformers go through the scenario's
path as a model's would: each is encoded in the cell's format profile (coordinates truncated to the profile's
decimals), tokenised, and read back by the strict template check. A molecule's 2K generations are one
EmbedMultipleConfs call seeded by its first request's seed; one molecule per task of a process pool
(`workers`). A molecule RDKit cannot embed gives no valid output (empty results). No model is loaded, only
its tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from inferlab.bench.backends.base import BackendSpec, QualitySpec, unprepared
from inferlab.types import Request, Result
from inferlab.workloads.backend import Backend, Supports

ETKDG_SEED_MASK = 0x7FFFFFFF  # RDKit's randomSeed is a signed 32-bit int


class EtkdgBackend(Backend):
    name = "etkdg"
    supports = Supports(constraint=True)

    def __init__(self, config: dict[str, Any], spec: QualitySpec) -> None:
        self.workers = config["workers"]
        self.spec = spec
        self.tokenizer: Any = None
        self.prepared: dict[str, None] = {}

    def load(self, model_dir: str | Path, device: Any = None, dtype: Any = None) -> None:
        from inferlab.models.tokenizer_loading import load_hf_tokenizer

        self.tokenizer = load_hf_tokenizer(model_dir)
        self.eos_token_ids = frozenset([self.tokenizer.eos_token_id])

    def prepare(self, requests: list[Request]) -> None:
        self.prepared.update(dict.fromkeys(r.constraint.smiles for r in requests))

    def unsupported(self, request: Request) -> str | None:
        return unprepared(request, self.prepared, self.name)

    def generate(self, requests: list[Request], stop_after_steps: int | None = None) -> Iterator[Result]:
        from inferlab.workloads.conformers.chemistry.encode import encode_conformers
        from inferlab.workloads.conformers.chemistry.profiles import get_profile
        from inferlab.workloads.conformers.evaluation.reference import ReferenceConfig, embed_many

        served, refused = self.split_supported(requests)
        yield from refused
        by_molecule: dict[int, list[Request]] = {}
        for r in served:
            by_molecule.setdefault(r.constraint.molecule, []).append(r)
        groups = list(by_molecule.values())
        if not groups:
            return
        sizes = {len(g) for g in groups}
        assert len(sizes) == 1, "every molecule asks for the same number of conformers"
        embedded = embed_many([g[0].constraint.smiles for g in groups], ReferenceConfig(num_confs=sizes.pop()),
                              self.workers, seeds=[(g[0].sampling.seed or 0) & ETKDG_SEED_MASK for g in groups])
        profile = get_profile(self.spec.profile)
        eos = self.tokenizer.eos_token_id
        for group, mol in zip(groups, embedded):
            texts = ([] if isinstance(mol, str) else
                     [e.generation_text(profile) for e in encode_conformers(mol, profile)])
            for j, r in enumerate(group):
                ids = self.tokenizer(texts[j], add_special_tokens=False)["input_ids"] + [eos] if j < len(texts) else []
                yield Result(r.id, ids, None, "eos" if ids else "length", len(r.prompt_ids or ()), metadata=r.metadata)


BACKEND = BackendSpec(
    "etkdg", "RDKit ETKDGv3 instead of a model (another seed than the references): the ceiling of the reference set",
    (), EtkdgBackend, scenario="conformer-quality",
)
