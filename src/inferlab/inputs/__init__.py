"""Reading input files safely, shared by every workload: each line bounded and decoded on its own
(lines.py), and every record given a row id no other record of the file has (record_ids.py). Imports
nothing of inferlab but its errors, so every layer may use it."""
