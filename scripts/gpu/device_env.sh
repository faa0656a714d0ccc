# Source at the start of every device call (bash): `source scripts/gpu/device_env.sh`.
# Unpacks what scripts/gpu/device_payload.sh carried (once per warm machine: /tmp is kept between calls),
# installs this checkout without dependencies, and exports:
#   PYTHONPATH      /tmp/site (rdkit), plus /tmp/vsite (vLLM and its wheels) and /tmp/fisite (FlashInfer) once
#                   the peers' last part came
#   FLASHINFER_WORKSPACE_BASE      /tmp/flashinfer-ws: FlashInfer's JIT-compiled kernels, kept between calls
#   INFERLAB_QWEN3_CHEM_TOKENIZER  /tmp/qwen3-chem
#   INFERLAB_GIT_COMMIT            from .device-commit when the caller wrote it (the device copy has no .git)
# Call 1 carries .dev1 (rdkit, tokenizer); calls 2-4 carry .dev2-.dev4 (the peers' stream, part by part).
if [ -f .dev1/rdkit.tar.xz ] && [ ! -d /tmp/site/rdkit ]; then
  mkdir -p /tmp/site && xz -dc .dev1/rdkit.tar.xz | tar -x -C /tmp/site && echo "device_env: rdkit unpacked"
fi
if [ -f .dev1/qwen3-chem.tar.xz ] && [ ! -d /tmp/qwen3-chem ]; then tar -xJf .dev1/qwen3-chem.tar.xz -C /tmp; fi
for part in .dev2/peers.part[0-9] .dev3/peers.part[0-9] .dev4/peers.part[0-9]; do
  [ -f "$part" ] || continue
  mkdir -p /tmp/vb && [ -f "/tmp/vb/$(basename "$part")" ] || cp "$part" /tmp/vb/
  parts=$(cat "$(dirname "$part")/peers.parts")
  if [ "$(ls /tmp/vb/peers.part[0-9] | wc -l)" -eq "$parts" ] && [ ! -d /tmp/vsite/vllm ]; then
    mkdir -p /tmp/peers && if cat $(ls /tmp/vb/peers.part[0-9] | sort) | xz -d | tar -x -C /tmp/peers; then
      mkdir -p /tmp/vsite /tmp/fisite && cp -r /tmp/peers/vllm/. /tmp/peers/wheels/. /tmp/vsite/ &&
        cp -r /tmp/peers/flashinfer/. /tmp/fisite/ && echo "device_env: vLLM, its wheels and FlashInfer unpacked"
    else
      echo "device_env: ERROR unpacking the peers' parts" >&2
      rm -rf /tmp/vsite /tmp/fisite
    fi
  fi
done
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
[ -d /tmp/vsite/vllm ] && export PYTHONPATH=/tmp/vsite:$PYTHONPATH
[ -d /tmp/fisite/flashinfer ] && export PYTHONPATH=/tmp/fisite:$PYTHONPATH FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer-ws
[ -d /tmp/qwen3-chem ] && export INFERLAB_QWEN3_CHEM_TOKENIZER=/tmp/qwen3-chem
[ -f .device-commit ] && export INFERLAB_GIT_COMMIT=$(cat .device-commit)
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "device_env: pip install -e . failed" >&2
