"""Constrained decoding on the device: the per-row runtime state and the step's kernels that enforce a
ConstraintProgram (compiled on the host by inferlab.constraints) inside the captured decode step."""
