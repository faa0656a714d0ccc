"""The conformer workload: 3D conformers of molecules written as enriched SMILES text.

profiles (format choices per checkpoint) · smiles (canonical form, tokens) · descriptors, coordinates
(the two styles) · encode / decode (strict) · template (SMILES -> prompt + constraint segments) · inputs
(.smi/.csv) · sdf, output (resumable SDF + JSONL) · reference (ETKDG reference sets) · metrics, evaluate
(RMSD coverage/matching) · hf_baseline_processor (the seeds' HF LogitsProcessor, for side-by-side runs).
See docs/conformers.md.
"""
