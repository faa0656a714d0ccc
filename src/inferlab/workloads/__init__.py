"""Workloads: batch jobs built on the engine or on transformers (conformers, text, classify, hidden states)."""
