"""Molecules and their conformer text: everything about the format, nothing about running a job.

profiles (format choices per checkpoint) · smiles (canonical form, checks as text) · descriptors,
coordinates (the two text styles) · encode / decode (molecule <-> enriched text; the decoder is strict) ·
template (SMILES -> prompt + constraint segments; check() of an output) · template_regex (those segments
as one regex, for peers) · stereo (specified stereo vs 3D coordinates) · sdf (SDF records with our
properties) · inputs, input_bounds (.smi / .csv / .tsv molecule files) · rdkit_messages (RDKit's log as
error text). Imports no other part of the workload.
"""
