"""The generation engine: static KV cache, CUDA-graph decode, GPU sampling, continuous batching."""
