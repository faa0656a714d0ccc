"""Workloads: batch jobs built on the engine or on transformers (conformers, text, classify, hidden states).
Each turns a user's batch into requests and results into files; one module or package per workload."""
