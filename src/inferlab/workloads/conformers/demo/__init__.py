"""`inferlab demo`: the conformer job on a few molecules the reference model never trained on, scored against
ETKDG and pictured. run.py (the steps the CLI calls) · model.py (the checkpoint: the reference model, or a
random fallback) · molecules.py (which molecules) · quality.py (references and the evaluation's figures) ·
picture.py (the PNG). Builds on the pipeline, the evaluation and the split file; nothing builds on it.
"""
