"""The conformer workload: 3D conformers of molecules written as enriched SMILES text.

chemistry/ (molecules and the text format: profiles, SMILES, encode / decode, templates, SDF, stereo,
input files) · pipeline/ (`inferlab conformers generate`: molecules -> requests -> Engine.stream ->
judges -> SDF + JSONL) · evaluation/ (ETKDG reference sets, RMSD coverage / matching, 3DMolGen's HF
baseline). pipeline/ and evaluation/ build on chemistry/, never on each other. See docs/conformers.md.
"""
