"""Does a conformer checkpoint know the hand its tetrahedral tags ask for? A likelihood test, no sampling:

    python scripts/reference_hand_preference.py --model DIR [--per-split 40 --max-heavy-atoms 30 --device cpu]

For molecules of split.tsv whose SMILES specify tetrahedral centres (the first --per-split of the train and
of the held-out split), one ETKDG conformer each (the reference data's embedding, hydrogens removed,
canonical orientation) is written twice under the same prompt: as embedded (the right hand) and reflected
(x negated, canonical orientation again: every centre of the wrong hand, every E/Z kept). Both texts carry
the same tags and graph, so only the coordinates differ; the model scores the tokens after the prompt of
each. A model that reads the tags prefers the right hand (`prefers`: share of molecules whose right-hand
text is likelier); one that ignores them sits at 50% with a mean log-likelihood difference near 0. It
separates the question from sampling noise and from RDKit's perception, on a CPU in about a minute
(benchmarks/checks/2026-12-02-compiled-trial: sampling put tetrahedral elements at chance). Prints a table
and one JSON line.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import torch
from rdkit import Chem
from rdkit.Chem import rdMolTransforms

from inferlab.workloads.conformers.chemistry.encode import encode_conformers
from inferlab.workloads.conformers.chemistry.etkdg import embed_etkdg
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.smiles import parse_smiles
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.training.hand_pairs import reflected_conformer

PROFILE = "v3-fixed4"
SPLITS = ("train", "held_out")
_NON_TETRAHEDRAL = ("@TH", "@AL", "@SP", "@TB", "@OH")  # other chirality classes: not this test's


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="checkpoint folder (its split.tsv, else the "
                                                                  "committed one)")
    parser.add_argument("--per-split", type=int, default=40, help="molecules per split")
    parser.add_argument("--max-heavy-atoms", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1, help="ETKDG's seed")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(args.device).eval()
    record = {"model": str(args.model), "seed": args.seed, "splits": {}}
    for split, molecules in tagged_molecules(_split_file(args.model), args.per_split, args.max_heavy_atoms).items():
        differences = []
        for smiles in molecules:
            pair = hand_pair(smiles, args.seed)
            if pair is None:
                continue
            prompt, right, wrong = pair
            scores = [generation_log_likelihood(model, tokenizer, prompt, text, args.device) for text in (right, wrong)]
            differences.append(scores[0] - scores[1])
        prefers = sum(d > 0 for d in differences)
        record["splits"][split] = {"molecules": len(differences), "prefers_right_hand": prefers,
                                   "mean_log_likelihood_difference": sum(differences) / max(1, len(differences))}
    print(f"{'split':<10} {'molecules':>9} {'prefers the right hand':>24} {'mean dLL (nats)':>16}")
    for split, figures in record["splits"].items():
        share = figures["prefers_right_hand"] / max(1, figures["molecules"])
        print(f"{split:<10} {figures['molecules']:>9} {figures['prefers_right_hand']:>12} ({share:>6.1%})    "
              f"{figures['mean_log_likelihood_difference']:>16.3f}")
    print(json.dumps(record))
    return 0


def tagged_molecules(split_file: Path, per_split: int, max_heavy_atoms: int) -> dict[str, list[str]]:
    """split -> the first `per_split` canonical SMILES of that split with a tetrahedral tag (and no other
    chirality class) and at most `max_heavy_atoms` heavy atoms."""
    chosen: dict[str, list[str]] = {split: [] for split in SPLITS}
    with split_file.open(newline="") as f:
        rows = [(row["canonical_smiles"], row["split"]) for row in csv.DictReader(f, delimiter="\t")]
    for smiles, split in rows:
        if split not in chosen or len(chosen[split]) >= per_split or "@" not in smiles:
            continue
        if any(marker in smiles for marker in _NON_TETRAHEDRAL):
            continue
        mol = Chem.MolFromSmiles(smiles)
        if mol is not None and mol.GetNumHeavyAtoms() <= max_heavy_atoms:
            chosen[split].append(smiles)
    return chosen


def hand_pair(smiles: str, seed: int) -> tuple[str, str, str] | None:
    """(prompt, generation text of the embedded conformer, the same reflected); None when RDKit cannot embed
    the molecule or the reflection is a rotation of it (no centre's hand changed)."""
    profile = get_profile(PROFILE)
    template = build_template(smiles, profile)
    try:
        mol = Chem.RemoveHs(embed_etkdg(parse_smiles(template.canonical_smiles), 1, seed, threads=1, label=smiles))
    except Exception:  # an embedding failure: this molecule cannot be scored
        return None
    reflected = reflected_conformer(mol)  # of the embedding as it came (hand_pairs.py: reflected, then canonical)
    for conformer in mol.GetConformers():
        rdMolTransforms.CanonicalizeConformer(conformer)
    right, wrong = (encode_conformers(m, profile)[0].generation_text(profile) for m in (mol, reflected))
    return (template.prompt, right, wrong) if right != wrong else None


@torch.no_grad()
def generation_log_likelihood(model, tokenizer, prompt: str, generation: str, device: str) -> float:
    """Sum of log p over the generation's tokens and EOS after the prompt, cut as the training texts are."""
    prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    ids = prompt_ids + tokenizer(generation, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    tensor = torch.tensor([ids], device=device)
    log_p = model(input_ids=tensor).logits[0, :-1].float().log_softmax(-1)  # [L - 1, V]: position t predicts t + 1
    picked = log_p.gather(-1, tensor[0, 1:, None])[:, 0]
    return float(picked[len(prompt_ids) - 1:].sum())


def _split_file(model: Path) -> Path:
    from inferlab.workloads.conformers.reference_model import SPLIT_FILE

    return model / "split.tsv" if (model / "split.tsv").is_file() else SPLIT_FILE


if __name__ == "__main__":
    sys.exit(main())
