# Source at the start of every device call (bash): `source scripts/gpu/device_env.sh`.
# Unpacks what scripts/gpu/device_payload.sh carried (once per warm machine: /tmp is kept between calls),
# installs this checkout without dependencies, and exports:
#   PYTHONPATH      /tmp/site (rdkit), plus /tmp/vsite (vLLM and its wheels) once vLLM is installed, plus
#                   /tmp/fisite (FlashInfer) once .dev3 came
#   FLASHINFER_WORKSPACE_BASE      /tmp/flashinfer-ws: FlashInfer's JIT-compiled kernels, kept between calls
#   INFERLAB_QWEN3_CHEM_TOKENIZER  /tmp/qwen3-chem
#   INFERLAB_GIT_COMMIT            from .device-commit when the caller wrote it (the device copy has no .git)
# Call 1 carries .dev1 (rdkit, tokenizer, vLLM part 1), call 2 carries .dev2 (vLLM part 2 + wheels), call 3
# carries .dev3 (FlashInfer).
if [ -f .dev1/rdkit.tar.xz ] && [ ! -d /tmp/site/rdkit ]; then
  mkdir -p /tmp/site && xz -dc .dev1/rdkit.tar.xz | tar -x -C /tmp/site && echo "device_env: rdkit unpacked"
fi
if [ -d .dev1/qwen3-chem ] && [ ! -d /tmp/qwen3-chem ]; then cp -r .dev1/qwen3-chem /tmp/qwen3-chem; fi
if [ -f .dev1/vllm.part1 ] && [ ! -f /tmp/vb/vllm.part1 ]; then mkdir -p /tmp/vb && cp .dev1/vllm.part1 /tmp/vb/; fi
if [ -f .dev2/vllm.part2 ] && [ -f /tmp/vb/vllm.part1 ] && [ ! -d /tmp/vsite/vllm ]; then
  mkdir -p /tmp/vsite
  if cat /tmp/vb/vllm.part1 .dev2/vllm.part2 | xz -d | tar -x -C /tmp/vsite &&
     python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/vsite .dev2/wheels/*.whl; then
    echo "device_env: vLLM installed into /tmp/vsite"
  else
    echo "device_env: ERROR unpacking or installing the vLLM bundle" >&2
    rm -rf /tmp/vsite
  fi
fi
if [ -f .dev3/flashinfer.tar.xz ] && [ ! -d /tmp/fisite/flashinfer ]; then
  mkdir -p /tmp/fisite && xz -dc .dev3/flashinfer.tar.xz | tar -x -C /tmp/fisite && echo "device_env: FlashInfer unpacked"
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
[ -d /tmp/vsite/vllm ] && export PYTHONPATH=/tmp/vsite:$PYTHONPATH
[ -d /tmp/fisite/flashinfer ] && export PYTHONPATH=/tmp/fisite:$PYTHONPATH FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer-ws
[ -d /tmp/qwen3-chem ] && export INFERLAB_QWEN3_CHEM_TOKENIZER=/tmp/qwen3-chem
[ -f .device-commit ] && export INFERLAB_GIT_COMMIT=$(cat .device-commit)
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "device_env: pip install -e . failed" >&2
