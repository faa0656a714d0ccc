"""Checkpoint-level code: model shapes (presets), config.json -> ModelSpec, weights, tokenizers. Never imports the engine."""
