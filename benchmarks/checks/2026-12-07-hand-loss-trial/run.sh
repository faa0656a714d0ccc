#!/usr/bin/env bash
# The hand loss trial on one GPU: the recipe (3,000 steps, eager, deterministic) with hand pairs ranked at two
# weights (train_loop.py, hand_pairs.py), both runs at once on the one GPU (the 8M-parameter step leaves it
# mostly idle); each checkpoint comes back whole and is judged on the CPU by scripts/reference_hand_preference.py
# and scripts/reference_stereo.py, beside the committed model (the recipe without the hand loss).
#   DEVICE_CALL_S=580 bash scripts/gpu/device_call.sh 'bash benchmarks/checks/2026-12-07-hand-loss-trial/run.sh'
# (carry .refdata/data, .device-commit: the trainer needs no RDKit)
set -uo pipefail
WEIGHTS=${WEIGHTS:-"4 16"}
TRAIN_S=${TRAIN_S:-420}
train=(python -m inferlab.workloads.conformers.training)
mkdir -p "$OUT/trial" runs
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/trial/gpu.txt"
for w in $WEIGHTS; do
  rm -rf "runs/hand-$w"
  "${train[@]}" train --data .refdata/data --out "runs/hand-$w" --hand-weight "$w" --budget-s "$TRAIN_S" \
    > "$OUT/trial/train-$w.log" 2>&1 &
done
wait
for w in $WEIGHTS; do
  tail -3 "$OUT/trial/train-$w.log"
  grep val_hand "runs/hand-$w/training_log.jsonl" | tail -12 | cut -c1-400
  mkdir -p "$OUT/hand-$w" && cp -r "runs/hand-$w/." "$OUT/hand-$w/"
done
