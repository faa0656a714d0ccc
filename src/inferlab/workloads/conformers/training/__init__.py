"""The reference conformer model's recipe: its data (CPU, RDKit) and its training (GPU, torch; no RDKit).

molecule_sources, molecule_selection (the shipped molecule lists, canonicalised and filtered) ·
scaffold_split (train / validation / held-out by scaffold; the committed split file) · conformer_texts
(one molecule's prompt, ETKDG conformer texts and probe texts, as the pipeline and its constraint write
them, and its stereo variants') · stereo_variants (a molecule's mirror image and its conformers' own
stereo: the texts that teach `@` / `@@`) · token_build (the reduced tokenizer, proved exact; token
stores) · token_store (uint16 + xz, numpy only) · data_build (`build-data`: the stages, resumable, in
worker processes) · the training modules (`train`: model shape, batches, loop, checkpoint, model card).
Builds on chemistry/ only. `python -m inferlab.workloads.conformers.training --help`; docs/conformers.md
"The reference model".
"""
