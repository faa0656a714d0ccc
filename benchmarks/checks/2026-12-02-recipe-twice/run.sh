#!/usr/bin/env bash
# The reference recipe run twice on one H200 from the data built on the CPU (the second run through
# `reproduce`, compared with the first: identical weights settle "a second run gives the same table"), the
# first checkpoint back in 12 MB pieces, then `probe --compile` (the torch.compile trial's speed and
# whether two runs of it repeat bitwise).
#   DEVICE_CALL_S=570 bash scripts/gpu/device_call.sh 'bash benchmarks/checks/2026-12-02-recipe-twice/run.sh'
# (carry .refdata/data and .device-commit)
set -uo pipefail
train=(python -m inferlab.workloads.conformers.training)
mkdir -p "$OUT/recipe" runs
rm -rf runs/ref-a runs/ref-b
"${train[@]}" train --data .refdata/data --out runs/ref-a > "$OUT/recipe/train-a.log" 2>&1
tail -3 "$OUT/recipe/train-a.log"
tar -cf - -C runs ref-a | split -b 12000000 - "$OUT/ref-a.tar."
"${train[@]}" reproduce --data .refdata/data --out runs/ref-b --reference runs/ref-a > "$OUT/recipe/train-b.log" 2>&1
tail -2 "$OUT/recipe/train-b.log"
cp runs/ref-b/reproduction.json runs/ref-b/training.json "$OUT/recipe/" 2>/dev/null
"${train[@]}" probe --data .refdata/data --compile --steps 40 > "$OUT/recipe/probe-compile.log" 2>&1
tail -3 "$OUT/recipe/probe-compile.log"
