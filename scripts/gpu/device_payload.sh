#!/usr/bin/env bash
# Build the two carry folders a device run needs beside the checkout (both ignored by git):
#   .dev1/  rdkit (the device image has none: conformer templates and checks need it), the qwen3-chem
#           tokenizer, and the first part of the vLLM bundle
#   .dev2/  the rest of the vLLM bundle and its wheels (xgrammar and llguidance among them)
# Each fits the device tool's 64 MiB per call beside the tracked tree (~4 MiB). vLLM 0.26.0 comes from
# ../shared/tools/vllm_bundle.sh, built once into the ignored folder .vllm of the checkout (its two parts are
# only the input here: carry .dev1 and .dev2, never the bundle itself); rdkit is the cp312 wheel, repacked
# with xz (31 MB zip -> 22 MB).
#
#   bash scripts/gpu/device_payload.sh            # then: call 1 carries [.dev1], call 2 carries [.dev2]
# On the device every call is scripts/gpu/device_call.sh, which sources scripts/gpu/device_env.sh (it unpacks
# what was carried); the whole procedure: benchmarks/README.md, "Procedure: a device session".
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
split_at=35000000  # bytes of the vLLM xz stream that travel with .dev1 (rdkit + tokenizer take ~27 MB there)
bundle=.vllm  # vllm_bundle.sh's OUTDIR: a/part1, b/part2, b/wheels
[ -f "$bundle/a/part1" ] || bash ../shared/tools/vllm_bundle.sh "$bundle"
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
cat "$bundle/a/part1" "$bundle/b/part2" > "$tmp/vllm.tar.xz"
head -c "$split_at" "$tmp/vllm.tar.xz" > .dev1/vllm.part1
tail -c +$((split_at + 1)) "$tmp/vllm.tar.xz" > .dev2/vllm.part2
cp -r "$bundle/b/wheels" .dev2/wheels
du -sb .dev1 .dev2
