"""Where shared data that inferlab does not ship lives: the qwen3-chem tokenizer.

The project does not copy the tokenizer into its tree; it is found through $INFERLAB_QWEN3_CHEM_TOKENIZER,
or ../shared/tokenizers/qwen3-chem beside the checkout, or .carry/qwen3-chem in the checkout (how the
device machine gets it).
"""

from __future__ import annotations

import os
from pathlib import Path

from inferlab.errors import InputError

ENV_VAR = "INFERLAB_QWEN3_CHEM_TOKENIZER"
_REPO_ROOT = Path(__file__).resolve().parents[3]


def qwen3_chem_tokenizer_dir() -> Path:
    """The tokenizer's folder. A $INFERLAB_QWEN3_CHEM_TOKENIZER that names no tokenizer is an error, never
    passed over for another copy: the user asked for that one."""
    named = os.environ.get(ENV_VAR)
    if named:
        if (Path(named) / "vocab.json").exists():
            return Path(named)
        raise InputError(f"${ENV_VAR}={named} holds no qwen3-chem tokenizer (no vocab.json there); point it at the "
                         "tokenizer's folder, or unset it to use the one found beside the checkout")
    candidates = [_REPO_ROOT.parent / "shared" / "tokenizers" / "qwen3-chem", _REPO_ROOT / ".carry" / "qwen3-chem"]
    for path in candidates:
        if (path / "vocab.json").exists():
            return path
    raise InputError(
        "the qwen3-chem tokenizer was not found (looked in: "
        + ", ".join(str(c) for c in candidates)
        + f"); set ${ENV_VAR} to its folder"
    )
