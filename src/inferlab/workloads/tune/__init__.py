"""`inferlab tune`: a short measured sweep of a workload's speed knobs on a sample of the user's inputs,
written as a JSON file (the recommendation, every candidate's measured figures, the environment) that
`inferlab generate`, `classify` and `conformers generate` read with `--config`.

Modules: tuned_file.py (the file: which flags it may set, writing and validated reading), candidates.py
(the settings tried per workload and device), runners.py (one candidate measured with the library
functions the commands themselves run), sweep.py (the sample, the loop, the choice)."""
