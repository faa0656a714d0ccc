"""Does the checkpoint know relative configuration? Right diastereomer vs an epimer (one centre inverted,
embedded as that diastereomer) under the original prompt; and the hand (reflection) as before."""
import csv, json, sys
from pathlib import Path
import torch
from rdkit import Chem
from rdkit.Chem import rdMolTransforms
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from reference_hand_preference import generation_log_likelihood
from inferlab.workloads.conformers.chemistry.etkdg import embed_etkdg
from inferlab.workloads.conformers.chemistry.profiles import get_profile
from inferlab.workloads.conformers.chemistry.smiles import canonicalize_mol, parse_smiles
from inferlab.workloads.conformers.chemistry.encode import enriched_layout
from inferlab.workloads.conformers.chemistry.template import build_template

profile = get_profile("v3-fixed4")
model_dir = Path(sys.argv[1]); per_split = int(sys.argv[2]); seed = 1
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
split_file = model_dir / "split.tsv" if (model_dir / "split.tsv").is_file() else Path(__file__).resolve().parents[3] / "src/inferlab/workloads/conformers/reference_model/split.tsv"
rows = list(csv.DictReader(split_file.open(), delimiter="\t"))

def text_of(mol, layout, template, reflect=False):
    m = Chem.RemoveHs(mol)
    conf = m.GetConformer()
    if reflect:
        for i in range(m.GetNumAtoms()):
            p = conf.GetAtomPosition(i); conf.SetAtomPosition(i, (-p.x, p.y, p.z))
    rdMolTransforms.CanonicalizeConformer(conf)
    blocks = [profile.coordinates.format_block(*conf.GetAtomPosition(a)) for a in layout.atoms]
    return template.fill(blocks)

out = {}
for split in ("train", "held_out"):
    res = {"epimer": [], "hand": []}
    for r in rows:
        if r["split"] != split or len(res["epimer"]) >= per_split: continue
        smi = r["canonical_smiles"]
        if "@" not in smi or any(x in smi for x in ("@TH","@AL","@SP","@TB","@OH")): continue
        can = canonicalize_mol(parse_smiles(smi))
        mol = can.mol
        if mol.GetNumHeavyAtoms() > 30: continue
        centres = [a.GetIdx() for a in mol.GetAtoms() if a.GetChiralTag() in (Chem.CHI_TETRAHEDRAL_CW, Chem.CHI_TETRAHEDRAL_CCW)]
        if len(centres) < 2: continue
        layout = enriched_layout(can, profile); template = build_template(smi, profile)
        epi = Chem.Mol(mol)
        last = max(centres, key=lambda a: layout.atoms.index(a))
        epi.GetAtomWithIdx(last).InvertChirality()
        if Chem.MolToSmiles(epi) == Chem.MolToSmiles(mol): continue  # meso-like: same molecule
        try:
            m1 = embed_etkdg(Chem.Mol(mol), 1, seed, threads=1); m2 = embed_etkdg(epi, 1, seed, threads=1)
        except Exception:
            continue
        right = text_of(m1, layout, template); wrong = text_of(m2, layout, template); refl = text_of(m1, layout, template, True)
        ll = [generation_log_likelihood(model, tok, template.prompt, t, "cpu") for t in (right, wrong, refl)]
        res["epimer"].append(ll[0] - ll[1]); res["hand"].append(ll[0] - ll[2])
    out[split] = {k: {"n": len(v), "prefers_right": sum(d > 0 for d in v), "mean_dLL": sum(v) / max(1, len(v))} for k, v in res.items()}
    print(split, out[split], flush=True)
print(json.dumps(out))
