#!/usr/bin/env bash
# Build the two carry folders a device run needs beside the checkout (both ignored by git):
#   .dev1/  rdkit (the device image has none: conformer templates and checks need it), the qwen3-chem
#           tokenizer, and the first part of the vLLM bundle
#   .dev2/  the rest of the vLLM bundle and its wheels (xgrammar and llguidance among them)
# Each fits the device tool's 64 MiB per call beside the tracked tree (~4 MiB). vLLM 0.26.0 comes from
# ../shared/tools/vllm_bundle.sh (built here into .vllm/ when missing); rdkit is the cp312 wheel, repacked
# with xz (31 MB zip -> 22 MB).
#
#   bash scripts/gpu/device_payload.sh            # then: call 1 carries [.dev1], call 2 carries [.dev2]
# On the device every call starts with `source scripts/gpu/device_env.sh` (it unpacks what was carried).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
split_at=35000000  # bytes of the vLLM xz stream that travel with .dev1 (rdkit + tokenizer take ~27 MB there)
[ -f .vllm/a/part1 ] || bash ../shared/tools/vllm_bundle.sh .vllm
tokenizer=${INFERLAB_QWEN3_CHEM_TOKENIZER:-../shared/tokenizers/qwen3-chem}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$tmp/whl" "rdkit==$(python3 -c 'import rdkit; print(rdkit.__version__)')"
mkdir -p "$tmp/rdkit" && (cd "$tmp/rdkit" && unzip -q "$tmp"/whl/rdkit-*.whl)
rm -rf .dev1 .dev2 && mkdir -p .dev1 .dev2
(cd "$tmp/rdkit" && tar -cf - .) | xz -T0 -9e > .dev1/rdkit.tar.xz
cp -r "$tokenizer" .dev1/qwen3-chem
cat .vllm/a/part1 .vllm/b/part2 > "$tmp/vllm.tar.xz"
head -c "$split_at" "$tmp/vllm.tar.xz" > .dev1/vllm.part1
tail -c +$((split_at + 1)) "$tmp/vllm.tar.xz" > .dev2/vllm.part2
cp -r .vllm/b/wheels .dev2/wheels
du -sb .dev1 .dev2
