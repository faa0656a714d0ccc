#!/usr/bin/env bash
# The engine-vs-peers preset on the device machine, in three calls on one warm machine (/tmp and runs/ kept).
# vLLM 0.26.0 travels as the lead's bundle (../shared/tools/vllm_bundle.sh, built into .vllm/ of the checkout:
# a/part1 ~56 MB, b/part2 + b/wheels ~37 MB), one part per call because a call carries at most 64 MiB.
#
#   call 1, carry [.vllm/a, .carry/qwen3-chem]:  bash scripts/gpu/peers_sweep.sh 1 $OUT
#       keeps part1 in /tmp/vb, then runs the cells that need no vLLM (lab_sweep part peers-engine-hf:
#       the engine's generate and conformer cells, transformers' continuous batching)
#   call 2, carry [.vllm/b]:                     bash scripts/gpu/peers_sweep.sh 2 $OUT
#       unpacks vLLM into /tmp/vsite, installs the bundle's wheels there (xgrammar and llguidance included),
#       then runs vLLM's generate cells and whatever else fits (parts peers-vllm-generate peers-rest)
#   call 3, no carry:                            bash scripts/gpu/peers_sweep.sh 3 $OUT
#       the rest: vLLM's structured outputs (xgrammar, guidance), HF + xgrammar, cells an earlier budget
#       skipped. Repeat call 3 until $OUT/lab_summary.txt reports no skipped cells.
# Each call stops launching cells before ~9 minutes (LIMIT_S, default 530 s from the script's start, the
# install included). Results: $OUT/benchmarks/results/<date>-<gpu>-engine-vs-peers.jsonl and its report.
# FlashInfer is not in the bundle: vLLM's cells then run with its FlashInfer sampler off (the backend sets
# VLLM_USE_FLASHINFER_SAMPLER=0 itself when flashinfer cannot be imported) and every row says so.
set -uo pipefail
call=${1:?usage: peers_sweep.sh 1|2|3 OUT}
out=${2:?usage: peers_sweep.sh 1|2|3 OUT}
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
mkdir -p "$out"

have_vllm() { [ -d /tmp/vsite/vllm ]; }

case "$call" in
  1)
    if [ -f .vllm/a/part1 ]; then
      mkdir -p /tmp/vb && cp .vllm/a/part1 /tmp/vb/ && echo "vLLM bundle part1 kept in /tmp/vb for call 2"
    else
      echo "WARNING: .vllm/a/part1 was not carried: call 2 will not be able to install vLLM"
    fi
    parts=(peers-engine-hf)
    ;;
  2)
    if ! have_vllm; then
      if [ ! -f /tmp/vb/part1 ] || [ ! -f .vllm/b/part2 ]; then
        echo "ERROR: call 2 needs /tmp/vb/part1 (call 1 on this warm machine) and .vllm/b carried; found:" \
             "$(ls /tmp/vb 2>/dev/null) / $(ls .vllm/b 2>/dev/null). Nothing was run." >&2
        exit 3
      fi
      mkdir -p /tmp/vsite
      if ! (cat /tmp/vb/part1 .vllm/b/part2 | xz -d | tar -x -C /tmp/vsite) ||
         ! python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/vsite .vllm/b/wheels/*.whl; then
        echo "ERROR: unpacking or installing the vLLM bundle failed (above); nothing was run" >&2
        rm -rf /tmp/vsite
        exit 3
      fi
      echo "vLLM installed into /tmp/vsite in ${SECONDS}s"
    fi
    parts=(peers-vllm-generate peers-rest)
    ;;
  3)
    parts=(peers-rest)
    ;;
  *)
    echo "usage: peers_sweep.sh 1|2|3 OUT" >&2
    exit 2
    ;;
esac

if [ "$call" != 1 ]; then
  if ! have_vllm; then
    echo "ERROR: vLLM is not in /tmp/vsite (run call 2 first, on this warm machine); vLLM's cells would become" \
         "'unavailable' rows, so nothing was run" >&2
    exit 3
  fi
  export PYTHONPATH=/tmp/vsite${PYTHONPATH:+:$PYTHONPATH}
  python3 -c "import vllm, xgrammar; print('vllm', vllm.__version__, '| xgrammar importable')" ||
    { echo "ERROR: vLLM does not import from /tmp/vsite (above); nothing was run" >&2; exit 3; }
fi

budget=$(( ${LIMIT_S:-530} - SECONDS ))
echo "call $call: parts ${parts[*]}, budget ${budget}s"
# PEERS_CPU_SMOKE=1: the same calls with lab_sweep's --cpu-smoke (tiny models; checks this script on a CPU)
python3 scripts/gpu/lab_sweep.py --out "$out" --parts "${parts[@]}" --budget-s "$budget" ${PEERS_CPU_SMOKE:+--cpu-smoke}
