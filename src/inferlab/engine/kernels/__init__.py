"""Triton kernels of the engine's hot path, one concept per file, each with a torch reference elsewhere:
norms and the SwiGLU product (triton_norm), q/k/v split + rope + KV write (triton_rope), flash-decoding
attention (triton_attention) and the sampling race (triton_sampling). Imported only when selected
(engine/ops.py), so CPU-only installs never import triton."""
