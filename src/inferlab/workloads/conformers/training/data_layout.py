"""The data folder's file names, shared by the build (which writes them) and the trainer (which reads
them, on a machine without RDKit: this module imports nothing)."""

TOKENIZER_DIR = "tokenizer"  # the reduced tokenizer and its id map
TRAIN_TOKENS = "train.npz.xz"
VALIDATION_TOKENS = "validation.npz.xz"
TRAIN_HAND_PAIRS = "train_hand_pairs.npz.xz"  # each tetrahedral text's reflection, for the hand loss (hand_pairs.py)
VALIDATION_HAND_PAIRS = "validation_hand_pairs.npz.xz"
SPLIT_FILE = "split.tsv"
HELD_OUT_FILE = "held_out.smi"  # the held-out molecules, sources interleaved (scaffold_split.held_out_smi_text)
MANIFEST = "data_manifest.json"
