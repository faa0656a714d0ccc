#!/usr/bin/env bash
# Build the three carry folders a device run needs beside the checkout (all ignored by git):
#   .dev1/  rdkit (the device image has none: conformer templates and checks need it), the qwen3-chem
#           tokenizer, and the first part of the vLLM bundle
#   .dev2/  the rest of the vLLM bundle and its wheels (xgrammar, llguidance and apache-tvm-ffi among them)
#   .dev3/  FlashInfer: vLLM 0.26.0 pins flashinfer-python==0.6.14 (py3-none-any: its Python and the CUDA
#           sources it JIT-compiles with nvcc on first use; 14.6 MB as a wheel, ~6 MB as tar.xz)
# Each fits the device tool's 64 MiB per call beside the tracked tree (~5 MiB); .dev1 and .dev2 are ~60 MB
# each, so FlashInfer travels in a third call. vLLM 0.26.0 comes from ../shared/tools/vllm_bundle.sh, built
# once into the ignored folder .vllm of the checkout (its two parts are only the input here: carry
# .dev1 and .dev2, never the bundle itself); rdkit is the cp312 wheel, repacked with xz (31 MB zip -> 22 MB).
# FlashInfer's other requirements are either in the device image (nvidia-ml-py, ninja, click, einops, numpy,
# requests, tabulate, tqdm), in .dev2 (apache-tvm-ffi 0.1.11) or not imported by vLLM's sampler and
# attention paths (cuda-tile, nvidia-cudnn-frontend, nvidia-cutlass-dsl: cuDNN and CuTe-DSL kernels). No
# prebuilt kernels exist for it on PyPI: flashinfer-jit-cache is published only on flashinfer.ai's own
# index, and flashinfer-cubin (TRT-LLM-gen cubins for Blackwell; none of vLLM's Hopper paths) stops at
# 0.6.13, which FlashInfer 0.6.14 refuses as a version mismatch. The device has nvcc 13.0 and ninja.
#
#   bash scripts/gpu/device_payload.sh    # then: call 1 carries [.dev1], call 2 [.dev2], call 3 [.dev3]
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
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d "$tmp/fiwhl" flashinfer-python==0.6.14
mkdir -p "$tmp/fi" && (cd "$tmp/fi" && unzip -q "$tmp"/fiwhl/flashinfer_python-*.whl)
rm -rf .dev1 .dev2 .dev3 && mkdir -p .dev1 .dev2 .dev3
(cd "$tmp/fi" && tar -cf - .) | xz -T0 -6 > .dev3/flashinfer.tar.xz
(cd "$tmp/rdkit" && tar -cf - .) | xz -T0 -9e > .dev1/rdkit.tar.xz
cp -r "$tokenizer" .dev1/qwen3-chem
cat "$bundle/a/part1" "$bundle/b/part2" > "$tmp/vllm.tar.xz"
head -c "$split_at" "$tmp/vllm.tar.xz" > .dev1/vllm.part1
tail -c +$((split_at + 1)) "$tmp/vllm.tar.xz" > .dev2/vllm.part2
cp -r "$bundle/b/wheels" .dev2/wheels
du -sb .dev1 .dev2 .dev3
