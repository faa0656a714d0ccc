"""What judging a finished conformer costs on this CPU, and where it should run (docs/conformers.md).

    PYTHONPATH=src python scripts/conformers_judge_cost.py [--molecules 100]

Drug-sized NCI molecules (20-50 heavy atoms, stereo assigned as the lab's conformer presets do), one
ETKDG conformer each, encoded as a model would write it and tokenized with the qwen3-chem tokenizer
($INFERLAB_QWEN3_CHEM_TOKENIZER or ../shared/tokenizers). Prints per conformer: decoding the token ids,
the strict check, the plain decoding, the stereo comparison, the SDF record, the whole judgement; whether RDKit releases the
GIL for it (two threads judging: wall clock and the process's CPU time against one thread's); and what
the consumer loop pays per result to hand it to the judge processes
(workloads/conformers/pipeline/judge_pool.py) against judging it inline.
"""

from __future__ import annotations

import argparse
import resource
import time
from concurrent.futures import ThreadPoolExecutor

from rdkit import Chem, rdBase
from rdkit.Chem import AllChem

from inferlab.bench.scenarios.molecules import nci_molecules_path, with_assigned_stereo
from inferlab.errors import InferlabError
from inferlab.models.output_text import output_text
from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir
from inferlab.workloads.conformers.chemistry.decode import decode_generation
from inferlab.workloads.conformers.chemistry.encode import encode_conformer
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.sdf import format_record
from inferlab.workloads.conformers.chemistry.template import build_template
from inferlab.workloads.conformers.pipeline.judge import JudgeTask, judge, stereo_fields, tokenizer_for
from inferlab.workloads.conformers.pipeline.judge_pool import JudgePool

PROFILE = get_profile("v3-fixed4")


def drug_sized_tasks(count: int, tokenizer_dir: str) -> list[JudgeTask]:
    tokenizer = tokenizer_for(tokenizer_dir)
    tasks = []
    blocker = rdBase.BlockLogs()
    for line in nci_molecules_path().read_text().splitlines():
        fields = line.split()
        mol = Chem.MolFromSmiles(fields[0]) if fields else None
        if mol is None or not 20 <= mol.GetNumHeavyAtoms() <= 50:
            continue
        smiles = with_assigned_stereo(mol)
        embedded = Chem.AddHs(Chem.MolFromSmiles(smiles))
        if AllChem.EmbedMolecule(embedded, randomSeed=1) != 0:
            continue
        try:
            template = build_template(smiles, PROFILE)
            text = encode_conformer(embedded, PROFILE).generation_text(PROFILE)
        except InferlabError:
            continue
        ids = tokenizer(text, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        tasks.append(JudgeTask(fields[1], 0, 0, False, template, PROFILE.name, tokenizer_dir, tuple(ids), "eos", None,
                               30, len(ids)))
        if len(tasks) == count:
            break
    del blocker
    return tasks


def per_conformer_ms(tasks: list[JudgeTask], work) -> float:
    start = time.perf_counter()
    for task in tasks:
        work(task)
    return (time.perf_counter() - start) / len(tasks) * 1e3


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", type=int, default=100)
    tokenizer_dir = str(qwen3_chem_tokenizer_dir())
    tasks = drug_sized_tasks(parser.parse_args().molecules, tokenizer_dir)
    tokenizer = tokenizer_for(tokenizer_dir)
    texts = {id(t): output_text(tokenizer, t.token_ids, "eos") for t in tasks}
    mols = {id(t): t.template.check(texts[id(t)], PROFILE).mol for t in tasks}
    atoms = sum(t.template.num_atoms for t in tasks) / len(tasks)
    print(f"{len(tasks)} drug-sized conformers, {atoms:.1f} atoms on average")
    pieces = {
        "token ids -> text": lambda t: output_text(tokenizer, t.token_ids, "eos"),
        "strict check": lambda t: t.template.check(texts[id(t)], PROFILE),
        "plain decoding": lambda t: decode_generation(texts[id(t)], PROFILE).canonical_smiles,
        "stereo": lambda t: stereo_fields(mols[id(t)]),
        "SDF record": lambda t: format_record(mols[id(t)], t.input_id, t.template.canonical_smiles, 0, PROFILE.name),
        "whole judgement": judge,
    }
    for name, work in pieces.items():
        print(f"  {name:<16} {per_conformer_ms(tasks, work):6.3f} ms per conformer")
    work = tasks * 3
    print("threads (the GIL: if RDKit released it, two threads would take more process CPU per wall second):")
    for threads in (1, 2):
        wall, cpu = time.perf_counter(), cpu_s()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(judge, work))
        wall = time.perf_counter() - wall
        print(f"  {threads} thread(s): {wall / len(work) * 1e3:.3f} ms wall per conformer, "
              f"{(cpu_s() - cpu) / wall:.2f} CPU-seconds per second")
    print("the consumer loop's cost per result:")
    for workers in (0, 2):
        with JudgePool(workers, tokenizer_dir) as pool:
            [f.result() for f in [pool.submit(t) for t in tasks[:8]]]  # processes started and warm
            start = time.perf_counter()
            futures = [pool.submit(t) for t in work]
            handed = time.perf_counter() - start
            [f.result() for f in futures]
        print(f"  judge_workers={workers}: the consumer loop pays {handed / len(work) * 1e3:.3f} ms per result")


if __name__ == "__main__":
    main()
