#!/bin/bash
# series.sh TAG SRC: the measurements of README.md, one at a time, with the checkout's src folder SRC on
# PYTHONPATH. W: the work folder holding the inputs (python mkinputs.py there) and the checkpoints
# $W/tinyl (model init --preset tiny), $W/tiny (--preset tiny-qwen3), $W/tinyc (--preset tiny-qwen3
# --tokenizer PATH/qwen3-chem).
tag=$1; export PYTHONPATH=$2
HERE=$(cd "$(dirname "$0")" && pwd); export W=${W:-/tmp/m}
for n in 10000 100000 1000000; do
  $HERE/measure.sh gen $n --model $W/tinyl
done
for n in 10000 100000 1000000; do
  $HERE/measure.sh gen $n --model $W/tiny --max-slots 16
done
for n in 10000 100000 1000000; do
  rm -rf $W/tp_${tag}_$n
  /usr/bin/time -v -o $W/tp_time_${tag}_$n.txt python $HERE/treepeak.py inferlab conformers generate --input $W/c$n.smi --output $W/tp_${tag}_$n/c.sdf --num-conformers 1 --device cpu --model $W/tinyc --max-slots 16 > $W/tp_${tag}_$n.txt
  echo "conf n=$n $(grep -E 'Maximum res|Elapsed' $W/tp_time_${tag}_$n.txt | awk '{print $NF}' | tr '\n' ' ') rows=$(wc -l < $W/tp_${tag}_$n/c.jsonl)"; head -1 $W/tp_${tag}_$n.txt; tail -1 $W/tp_${tag}_$n.txt
done
