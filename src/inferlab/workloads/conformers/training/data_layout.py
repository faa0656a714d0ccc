"""The data folder's file names, shared by the build (which writes them) and the trainer (which reads
them, on a machine without RDKit: this module imports nothing)."""

TOKENIZER_DIR = "tokenizer"  # the reduced tokenizer and its id map
TRAIN_TOKENS = "train.npz.xz"
VALIDATION_TOKENS = "validation.npz.xz"
SPLIT_FILE = "split.tsv"
HELD_OUT_FILE = "held_out.smi"  # the held-out molecules, sources interleaved (scaffold_split.held_out_smi_text)
MANIFEST = "data_manifest.json"
