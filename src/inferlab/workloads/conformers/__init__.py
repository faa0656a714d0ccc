"""The conformer workload: 3D conformers of molecules written as enriched SMILES text.

chemistry/ (molecules and the text format: profiles, SMILES, encode / decode, templates, SDF, stereo,
input files) · pipeline/ (`inferlab conformers generate`: molecules -> requests -> Engine.stream ->
judges -> SDF + JSONL) · evaluation/ (ETKDG reference sets, RMSD coverage / matching, 3DMolGen's HF
baseline) · training/ (the reference model's recipe) · reference_model/ (its checkpoint and split) · demo/
(`inferlab demo`: the pipeline and the evaluation on held-out molecules). pipeline/, evaluation/ and
training/ build on chemistry/, never on each other; demo/ builds on them. See docs/conformers.md.
"""
