"""Constrained decoding on the device: a program of copy runs and grammar holes, compiled once on the host
into token-level tables, enforced inside the captured decode step."""
