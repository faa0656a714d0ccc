"""Smallest constrained engine run (tiny-qwen3, NCI templates): for CUDA_LAUNCH_BLOCKING / compute-sanitizer
runs that locate a device fault in the constrained step."""

import sys
import tempfile

from inferlab.constraints.program import compile_program
from inferlab.engine import Engine, EngineConfig
from inferlab.models.checkpoint_init import init_checkpoint
from inferlab.models.shared_assets import qwen3_chem_tokenizer_dir
from inferlab.types import Request, SamplingParams
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.template import build_template

graphs = "--no-graphs" not in sys.argv
path = init_checkpoint("tiny-qwen3", tempfile.mkdtemp() + "/m", dtype="bfloat16", tokenizer_dir=qwen3_chem_tokenizer_dir())
engine = Engine(EngineConfig(model=path, max_slots=8, max_seq_len=512, cuda_graphs=graphs))
requests = []
for i, smiles in enumerate(["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "OCC(N)C(=O)O"]):
    t = build_template(smiles, get_profile("v3-fixed4"))
    program = compile_program(t.segments, engine.tokenizer)
    requests.append(Request(id=f"c{i}", prompt_ids=tuple(t.prompt_ids(engine.tokenizer)), constraint=program,
                            sampling=SamplingParams(temperature=1.0)))
requests += [Request(id=f"u{i}", prompt_ids=(1, 2, 3), sampling=SamplingParams(temperature=1.0, max_new_tokens=20))
             for i in range(2)]
for r in engine.generate(requests):
    print(r.id, r.finish_reason, len(r.token_ids), (r.text or "")[:80])
print("OK")
