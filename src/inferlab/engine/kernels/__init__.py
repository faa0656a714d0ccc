"""Triton kernels of the engine's hot path, one concept per file, each with a torch reference elsewhere
(engine/torch_ops.py, sampler.py, step.py, attention.py, kv_quant.py). Imported only when selected
(engine/ops.py), so CPU-only installs never import triton.
"""
