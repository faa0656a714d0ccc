"""CPU probe: can the committed reference model learn the hand by fine-tuning on its hand pairs?

    python benchmarks/checks/2026-12-07-hand-loss-trial/fine_tune_probe.py W STEPS LR   (from the repository root)

AdamW at LR from the committed checkpoint, each step 8,192 padded tokens of the token loss plus 8,192 of hand
pairs weighted W (train_loop.pair_margins); every 40 steps the share of the first validation pair batches
(163 pairs) ranked right."""
import sys, time
import numpy as np, torch, torch.nn.functional as F
from transformers import Qwen3ForCausalLM
from inferlab.workloads.conformers.training.token_store import read_token_store
from inferlab.workloads.conformers.training.batches import (pair_evaluation_batches, pair_training_batches,
                                                             training_batches)
from inferlab.workloads.conformers.training.train_loop import pair_margins, loss_tensors, _batch, _pair_batch
torch.set_num_threads(2); torch.manual_seed(0)
W, STEPS, LR = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
data = ".refdata/data"; ckpt = "src/inferlab/workloads/conformers/reference_model"
model = Qwen3ForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32)
tr, va = read_token_store(f"{data}/train.npz.xz"), read_token_store(f"{data}/validation.npz.xz")
trp, vap = read_token_store(f"{data}/train_hand_pairs.npz.xz"), read_token_store(f"{data}/validation_hand_pairs.npz.xz")
pad = model.config.eos_token_id
cpu = torch.device("cpu")
val_batches = pair_evaluation_batches(vap, va, 16384)[:6]
print("val pairs probed:", sum(len(b) for b in val_batches), flush=True)

@torch.no_grad()
def val_acc():
    model.eval(); m = torch.cat([pair_margins(model, *_pair_batch(vap, va, b, pad, cpu)) for b in val_batches]); model.train()
    return (m > 0).float().mean().item(), m.median().item()

print("step 0 val_acc/median margin", val_acc(), flush=True)
opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
tb, pb = training_batches(tr, 8192, 1), pair_training_batches(trp, tr, 8192, 1)
t0 = time.time(); accs = []
for step in range(1, STEPS + 1):
    total, tokens, _, _ = loss_tensors(model, *_batch(tr, next(tb), pad, cpu))
    margins = pair_margins(model, *_pair_batch(trp, tr, next(pb), pad, cpu))
    loss = (total + W * F.softplus(-margins).sum()) / tokens
    loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); opt.zero_grad()
    accs.append((margins > 0).float().mean().item())
    if step % 10 == 0:
        print(f"step {step} token_loss {total.item()/tokens.item():.4f} train_hand_acc(last10) {np.mean(accs[-10:]):.3f} "
              f"{time.time()-t0:.0f}s", flush=True)
    if step % 40 == 0:
        print("  val_acc/median margin", val_acc(), flush=True)
