#!/usr/bin/env bash
# The stereo-fragment trial on one H200: the recipe (compiled step) on the data built with
# `build-data --stereo-fragments` (the train molecules' fragments around each tetrahedral centre as train
# molecules too: training/stereo_fragments.py), STEPS steps that end inside the budget (the cosine done);
# the checkpoint comes back in 12 MB pieces for the hand-preference test on the CPU
# (scripts/reference_hand_preference.py) and the quality table.
#   DEVICE_CALL_S=570 bash scripts/gpu/device_call.sh 'bash benchmarks/checks/2026-12-02-stereo-fragments/run.sh'
# (carry .refdata/data-frag, .device-commit; the data: build-data --out .refdata/data-frag --stereo-fragments at
# commit 55246fa: the option was removed after this trial, see README.md)
set -uo pipefail
STEPS=${STEPS:-9000}
DATA=${DATA:-.refdata/data-frag}
NAME=${NAME:-frag}
mkdir -p "$OUT/trial" runs
rm -rf "runs/$NAME"
python -m inferlab.workloads.conformers.training train --data "$DATA" --out "runs/$NAME" --steps "$STEPS" --compile \
  --budget-s "${TRAIN_BUDGET_S:-480}" > "$OUT/trial/train.log" 2>&1
tail -3 "$OUT/trial/train.log"
cp "runs/$NAME"/training.json "runs/$NAME"/training_log.jsonl "runs/$NAME"/loss_curve.png "$OUT/trial/" 2>/dev/null
tar -cf - -C runs "$NAME" | split -b 12000000 - "$OUT/$NAME.tar."
