"""The inputs of README.md, written to the current folder: g<N>.jsonl (1,000 prompts spread evenly, the other
lines error rows: no 'prompt') and c<N>.smi (64 molecules spread evenly, the other lines unusable SMILES)."""
import json
REAL = 1000  # real prompts in every generate input, spread evenly; the other lines are error rows
MOLS = 64    # valid molecules in every conformer input
small = ["CCO", "CCN", "CCC", "CC(=O)O", "OCCO", "CCCl", "CC#N", "C=CC", "COC", "CNC"]
for n in (10_000, 100_000, 1_000_000):
    with open(f"g{n}.jsonl", "w") as f:
        step = n // REAL
        for i in range(n):
            key = "prompt" if i % step == 0 else "text"  # no 'prompt': an error row
            f.write(json.dumps({"id": f"p{i}", key: f"hello world {i}"}) + "\n")
    with open(f"c{n}.smi", "w") as f:
        step = n // MOLS
        for i in range(n):
            smi = small[(i // step) % len(small)] if i % step == 0 else "C\u00e9C"  # é: an error row
            f.write(f"{smi} m{i}\n")
