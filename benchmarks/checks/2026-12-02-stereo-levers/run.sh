#!/usr/bin/env bash
# Three trials of the reference recipe with the stereo-deciding tokens weighted in the loss
# (training/stereo_tokens.py), trained side by side on one H200 (each process is launch-bound, so they share
# the GPU), then each judged by scripts/reference_stereo.py. The steps of each come from a probe of the three
# at once, to end training by TRAIN_S. The best by held-out tetrahedral elements comes back as a checkpoint.
#   DEVICE_CALL_S=570 bash scripts/gpu/device_call.sh 'bash benchmarks/checks/2026-12-02-stereo-levers/run.sh'
# (carry .dev1, .refdata/data, .device-commit)
set -uo pipefail
TRAIN_S=${TRAIN_S:-330}
TRIALS=("w8-l8 8 8" "w20-l8 20 8" "w8-l12 8 12")
train=(python -m inferlab.workloads.conformers.training)
mkdir -p "$OUT/trials" runs
for trial in "${TRIALS[@]}"; do
  set -- $trial
  ( "${train[@]}" probe --data .refdata/data --steps 30 > "$OUT/trials/$1.probe.log" 2>&1 ) &
done
wait
for trial in "${TRIALS[@]}"; do
  set -- $trial
  rate=$(grep -o '"padded_tokens_per_s": [0-9]*' "$OUT/trials/$1.probe.log" | grep -o '[0-9]*$')
  steps=$(( rate * TRAIN_S / 65536 * 8 / $3 ))  # probe ran 8 layers; a deeper model is slower in proportion
  echo "$1: probe $rate padded tokens/s, $steps steps"
  ( "${train[@]}" train --data .refdata/data --out "runs/$1" --steps "$steps" --stereo-weight "$2" --layers "$3" \
      --budget-s $((TRAIN_S + 40)) > "$OUT/trials/$1.train.log" 2>&1
    python scripts/reference_stereo.py --model "runs/$1" --work-dir "$OUT/trials/stereo-$1" --device cuda \
      > "$OUT/trials/$1.stereo.log" 2>&1 ) &
done
wait
for trial in "${TRIALS[@]}"; do
  set -- $trial
  cp "runs/$1/training.json" "$OUT/trials/$1.training.json" 2>/dev/null
  tail -8 "$OUT/trials/$1.stereo.log"
done
best=$(python - "$OUT/trials" <<'PY'
import json, pathlib, sys
scores = {}
for path in pathlib.Path(sys.argv[1]).glob("stereo-*/stereo.json"):
    held = json.loads(path.read_text())["groups"]["held_out"]["tetrahedral elements"]
    scores[path.parent.name[len("stereo-"):]] = held[0] / max(1, held[1])
print(max(scores, key=scores.get) if scores else "")
PY
)
echo "best: $best"
[ -n "$best" ] && tar -cf - -C runs "$best" | split -b 12000000 - "$OUT/ckpt-$best.tar."
