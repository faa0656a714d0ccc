"""What generated conformers are measured against: ETKDG reference sets (reference), RMSD coverage and
matching (metrics, evaluate: `inferlab conformers evaluate`), and 3DMolGen's transformers LogitsProcessor
(hf_baseline_processor, hf_baseline_run), the baseline the lab runs beside the engine's constrained
decoding. Builds on chemistry/; never imports pipeline/.
"""
