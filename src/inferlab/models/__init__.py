"""Model shapes, checkpoints and our compact model implementations."""
