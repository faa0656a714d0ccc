#!/usr/bin/env bash
# One device call: the environment (device_env.sh: what was carried is unpacked, the checkout installed),
# then each argument as a shell command, given what is left of the call's time (DEVICE_CALL_S, default
# 570 s of the tool's 600) as a `timeout` and as $BUDGET_S (30 s less, for lab_sweep's --budget-s), then
# every folder under $OUT but benchmarks/ packed into one .tgz (the tool returns at most 8 files, two
# folders deep) and the lab's cell logs into logs.tgz.
#
#   bash scripts/gpu/device_call.sh \
#     'python -m pytest -q -m gpu tests/gpu' \
#     'python scripts/gpu/lab_sweep.py --out $OUT --parts conformer-pipeline --budget-s $BUDGET_S'
source scripts/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
end=$((SECONDS + ${DEVICE_CALL_S:-570}))
for cmd in "$@"; do
  left=$((end - SECONDS - 15))
  if [ "$left" -lt 45 ]; then echo "== device_call: no time left for: $cmd"; continue; fi
  echo "== $cmd  ($left s left)"
  BUDGET_S=$((left - 30)) timeout "$left" bash -c "$cmd"
  echo "== exit $?"
done
for dir in "$OUT"/*/; do
  [ -d "$dir" ] || continue  # no folder under $OUT: the pattern itself
  name=$(basename "$dir")
  [ "$name" = benchmarks ] && continue
  tar -czf "$OUT/$name.tgz" -C "$OUT" "$name" && rm -rf "$dir"
done
ls runs/lab/*/logs >/dev/null 2>&1 && tar -czf "$OUT/logs.tgz" runs/lab/*/logs runs/lab/*/results.jsonl
ls -la "$OUT" "$OUT"/benchmarks/results 2>/dev/null
