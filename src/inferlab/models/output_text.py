"""The text of a finished generation, decoded the one way every consumer uses (the engine's Result.text, the
conformer pipeline's judge processes, which decode the token ids themselves): a final EOS/stop token left
out (token_ids keep it), special tokens kept, no clean-up beyond the tokenizer's own."""

from __future__ import annotations

from typing import Any, Sequence


def output_text(tokenizer: Any, token_ids: Sequence[int], finish_reason: str) -> str:
    shown = list(token_ids[:-1]) if finish_reason in ("eos", "stop") else list(token_ids)
    return tokenizer.decode(shown, skip_special_tokens=False)
