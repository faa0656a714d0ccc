"""Workloads: turn a user's batch (molecules, prompts, texts) into engine requests and their results into
files. Each workload lives in its own module or package."""
