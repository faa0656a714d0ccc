"""The host-side constraint compiler: a program of copy runs and grammar holes (segments.py), regex
grammars compiled to character DFAs and then, against a tokenizer's vocabulary, to token automata, and the
ConstraintProgram a Request carries (program.py). The engine enforces a program on the device
(inferlab.engine's constraint runtime); workloads build programs from here."""
