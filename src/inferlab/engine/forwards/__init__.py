"""The model forwards the engine runs (llama.py, gemma.py) over its KV cache, Ops and GEMM plan, and which
checkpoint architecture runs on which (registry.py)."""
