#!/bin/bash
# The CPU speed check of 2026-12-01 (benchmarks/README.md, "CPU speed"): main at 19c9a73 ("before", its src/
# unpacked by `git archive 19c9a73 src | tar -x -C $BASE`) and this branch ("after"), alternated, on the same
# checkpoints: conformer-ref-shape (random, fp32, built-in tokenizer) and the demo's own tiny-qwen3
# (qwen3-chem tokenizer). Run from the repository root; writes log.txt's lines to stdout.
set -u
BASE=${BASE:?the before tree}; AFTER=${AFTER:-$PWD}; WORK=${WORK:-/tmp/cpu-speed}
export INFERLAB_QWEN3_CHEM_TOKENIZER=${INFERLAB_QWEN3_CHEM_TOKENIZER:-../shared/tokenizers/qwen3-chem}
M=$WORK/ref-f32
[ -e $M ] || PYTHONPATH=$AFTER/src inferlab model init --preset conformer-ref-shape --out $M --dtype float32
run() {  # label tree args...
  label=$1; tree=$2; shift 2
  echo "### $label $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=$tree/src timeout 1200 python scripts/cpu_speed.py "$@" 2>/dev/null | tail -1
}
run "decode before" $BASE decode --model $M --new 200
run "decode after" $AFTER decode --model $M --new 200
run "demo-job before" $BASE demo-job --model $M --work-dir $WORK/job-base
run "demo-job after" $AFTER demo-job --model $M --work-dir $WORK/job-new
run "step after ctx150" $AFTER step --model $M --context 150
run "step after ctx400" $AFTER step --model $M --context 400
for tree in $BASE $AFTER; do  # the shipped demo, its checkpoint built by the first run and reused
  echo "### inferlab demo $tree $(cut -d' ' -f1-3 /proc/loadavg)"
  ( export PYTHONPATH=$tree/src; /usr/bin/time -f "real %e s user %U s sys %S s" timeout 1200 \
      python -m inferlab.cli demo --device cpu --work-dir $WORK/demo 2>&1 | grep -E "^model:|speed:|valid:|real " )
done
echo "### done $(cut -d' ' -f1-3 /proc/loadavg)"
