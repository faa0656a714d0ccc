"""`inferlab conformers generate`: molecules in, conformers out, through one Engine.stream call.

generate (generate_conformers: the whole job) · config (PipelineConfig) · plan (resume, row lengths) ·
prepare (template + ConstraintProgram in a process pool) · task (ConformerTask: one attempt of one row,
the requests' metadata) · feed (the request generator) · collect (results -> judges -> rows or retries) ·
judge, judge_pool (reading an output, in worker processes) · output (SDF + resumable JSONL) · stats (the
run's figures). Builds on chemistry/; never imports evaluation/.
"""
