"""Where the qwen3-chem tokenizer is found: a $INFERLAB_QWEN3_CHEM_TOKENIZER that names no tokenizer is an
error naming it, never skipped in silence for another copy."""

from __future__ import annotations

import pytest

from inferlab.errors import InputError
from inferlab.models import shared_assets


def test_a_bad_environment_variable_is_named_not_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv(shared_assets.ENV_VAR, str(tmp_path / "typo"))
    with pytest.raises(InputError, match=r"\$INFERLAB_QWEN3_CHEM_TOKENIZER=.*typo holds no qwen3-chem tokenizer"):
        shared_assets.qwen3_chem_tokenizer_dir()
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "vocab.json").write_text("{}")
    monkeypatch.setenv(shared_assets.ENV_VAR, str(tmp_path / "good"))
    assert shared_assets.qwen3_chem_tokenizer_dir() == tmp_path / "good"
    monkeypatch.delenv(shared_assets.ENV_VAR)
    monkeypatch.setattr(shared_assets, "_REPO_ROOT", tmp_path / "nowhere")
    with pytest.raises(InputError, match="was not found"):
        shared_assets.qwen3_chem_tokenizer_dir()
