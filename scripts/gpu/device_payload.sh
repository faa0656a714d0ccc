#!/usr/bin/env bash
# Build the carry folders a device run needs beside the checkout (all ignored by git). The device tool carries
# 64 MiB (67.1 MB) a call with the working tree, which is ~29 MB since the reference model's 16 MB live in it:
#   .dev1/        rdkit (the device image has none: conformer templates and checks need it) and the qwen3-chem
#                 tokenizer, ~24 MB: every session's first call
#   .dev2-.dev4/  the peers, one xz stream in three parts of at most $part_bytes: vLLM 0.26.0 (the bundle of
#                 ../shared/tools/vllm_bundle.sh, recompressed), its wheels (xgrammar, llguidance,
#                 apache-tvm-ffi among them) and FlashInfer 0.6.14 (vLLM's pin; py3-none-any: its Python and
#                 the CUDA sources it JIT-compiles with nvcc on first use). Carried in three calls in a row on
#                 one warm machine after .dev1's; device_env.sh appends each part and unpacks after the last.
# No prebuilt FlashInfer kernels exist on PyPI: flashinfer-jit-cache is published only on flashinfer.ai's own
# index, and flashinfer-cubin (TRT-LLM-gen cubins for Blackwell; none of vLLM's Hopper paths) stops at 0.6.13,
# which FlashInfer 0.6.14 refuses. FlashInfer's other requirements are in the device image (nvidia-ml-py, ninja,
# click, einops, numpy, requests, tabulate, tqdm), among the wheels (apache-tvm-ffi 0.1.11) or not imported by
# vLLM's sampler and attention paths (cuda-tile, nvidia-cudnn-frontend, nvidia-cutlass-dsl).
#
#   bash scripts/gpu/device_payload.sh    # then: call 1 carries [.dev1], calls 2-4 [.dev2], [.dev3], [.dev4]
# On the device every call is scripts/gpu/device_call.sh, which sources scripts/gpu/device_env.sh (it unpacks
# what was carried); the whole procedure: benchmarks/README.md, "Procedure: a device session".
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
part_bytes=33000000  # one peers part: with the ~29 MB tree under the 67.1 MB a call carries
bundle=.vllm  # vllm_bundle.sh's OUTDIR: a/part1, b/part2, b/wheels
[ -f "$bundle/a/part1" ] || bash ../shared/tools/vllm_bundle.sh "$bundle"
tokenizer=${INFERLAB_QWEN3_CHEM_TOKENIZER:-../shared/tokenizers/qwen3-chem}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$tmp/whl" "rdkit==$(python3 -c 'import rdkit; print(rdkit.__version__)')"
mkdir -p "$tmp/rdkit" && (cd "$tmp/rdkit" && unzip -q "$tmp"/whl/rdkit-*.whl)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d "$tmp/fiwhl" flashinfer-python==0.6.14
rm -rf .dev1 .dev2 .dev3 .dev4 && mkdir -p .dev1 .dev2 .dev3 .dev4
(cd "$tmp/rdkit" && tar -cf - .) | xz -T0 -9e > .dev1/rdkit.tar.xz
tar -cf - -C "$(dirname "$tokenizer")" "$(basename "$tokenizer")" | xz -9 > .dev1/qwen3-chem.tar.xz
# the peers' tree: vllm/ (the bundle's site folder), wheels/ (unzipped: installed by copying), flashinfer/
mkdir -p "$tmp/peers/vllm" "$tmp/peers/wheels" "$tmp/peers/flashinfer"
cat "$bundle/a/part1" "$bundle/b/part2" | xz -d | tar -x -C "$tmp/peers/vllm"
for w in "$bundle"/b/wheels/*.whl; do (cd "$tmp/peers/wheels" && unzip -q -o "$OLDPWD/$w"); done
(cd "$tmp/peers/flashinfer" && unzip -q "$tmp"/fiwhl/flashinfer_python-*.whl)
tar -cf - -C "$tmp/peers" . | xz -T0 -9e > "$tmp/peers.tar.xz"
split -b "$part_bytes" -d -a 1 "$tmp/peers.tar.xz" "$tmp/peers.part"
parts=$(ls "$tmp"/peers.part* | wc -l)
[ "$parts" -le 3 ] || { echo "the peers need $parts parts of $part_bytes bytes: more than .dev2-.dev4" >&2; exit 1; }
for i in $(seq 0 $((parts - 1))); do
  mv "$tmp/peers.part$i" ".dev$((i + 2))/peers.part$i"
  echo "$parts" > ".dev$((i + 2))/peers.parts"
done
du -sb .dev1 .dev2 .dev3 .dev4
