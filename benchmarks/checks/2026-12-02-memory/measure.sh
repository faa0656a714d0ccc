#!/bin/bash
# measure.sh LABEL N ARGS...: one run of generate (LABEL gen*) or conformers generate (conf*) on the
# N-line input in $W; prints its peak RSS (GNU time's Maximum resident set size), wall time and rows
W=${W:-/tmp/m}
label=$1; n=$2; shift 2
out=$W/out_${label}_${n}
rm -rf $out; mkdir -p $out
case $label in
  gen*) cmd=(inferlab generate --input $W/g$n.jsonl --output $out/o.jsonl --max-new-tokens 1 --device cpu "$@");;
  conf*) cmd=(inferlab conformers generate --input $W/c$n.smi --output $out/c.sdf --num-conformers 1 --device cpu "$@");;
esac
/usr/bin/time -v -o $out/time.txt "${cmd[@]}" > $out/stdout.txt 2> $out/stderr.txt
rc=$?
rssk=$(grep "Maximum resident" $out/time.txt | awk '{print $NF}')
wall=$(grep "Elapsed" $out/time.txt | awk '{print $NF}')
rows=$(wc -l < $(ls $out/*.jsonl | head -1))
echo "$label n=$n rc=$rc peak_rss_MB=$((rssk/1024)) wall=$wall rows=$rows args=$*"
