#!/usr/bin/env bash
# The torch.compile trial on one H200: `probe --compile` (speed, and whether two short runs repeat bitwise),
# then one compiled run sized from the probe's rate to end by TRAIN_S, judged by scripts/reference_stereo.py
# (tetrahedral and E/Z elements, train and held-out): do more tokens per minute move the tetrahedral hand?
#   DEVICE_CALL_S=570 bash scripts/gpu/device_call.sh 'bash benchmarks/checks/2026-12-02-compiled-trial/run.sh'
# (carry .dev1, .refdata/data, .device-commit)
set -uo pipefail
TRAIN_S=${TRAIN_S:-300}
train=(python -m inferlab.workloads.conformers.training)
mkdir -p "$OUT/trial" runs
"${train[@]}" probe --data .refdata/data --compile --steps 40 > "$OUT/trial/probe.log" 2>&1
tail -2 "$OUT/trial/probe.log"
rate=$(grep -o '"padded_tokens_per_s": [0-9]*' "$OUT/trial/probe.log" | grep -o '[0-9]*$')
[ -z "$rate" ] && { grep -m3 -i "error" "$OUT/trial/probe.log"; exit 1; }
steps=$(( rate * TRAIN_S / 65536 ))
echo "probe: $rate padded tokens/s -> $steps steps in $TRAIN_S s"
rm -rf runs/compiled
"${train[@]}" train --data .refdata/data --out runs/compiled --steps "$steps" --compile --budget-s $((TRAIN_S + 40)) \
  > "$OUT/trial/train.log" 2>&1
tail -2 "$OUT/trial/train.log"
cp runs/compiled/training.json runs/compiled/training_log.jsonl runs/compiled/loss_curve.png "$OUT/trial/" 2>/dev/null
python scripts/reference_stereo.py --model runs/compiled --work-dir "$OUT/trial/stereo" --device cuda \
  > "$OUT/trial/stereo.log" 2>&1
tail -12 "$OUT/trial/stereo.log"
