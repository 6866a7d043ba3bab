#!/usr/bin/env bash
# SASS of a cubin on a machine without the CUDA toolkit's cuobjdump (the CPU development VM):
# NVIDIA's cuobjdump and the nvdisasm it calls from PyPI (the nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm wheels, CUDA 13.5: they decode the cubins nvcc 13 writes, sm_80 and
# sm_90a, every opcode), fetched once into /tmp.
#
#   bash scripts/sass_local.sh FILE.cubin > FILE.sass
#   (a cubin: nvcc ... -gencode arch=compute_90a,code=sm_90a -cubin -o FILE.cubin SOURCE.cu,
#   or code=sm_80; the output is cuobjdump -sass's, as on the device, for sass_step.py and
#   sass_loops.py)
set -euo pipefail
version=${CUOBJDUMP_VERSION:-13.5.37}
tools=/tmp/cuobjdump-$version
bin=$tools/nvidia/cu13/bin/cuobjdump
if [[ ! -x $bin ]]; then
  mkdir -p "$tools"
  for wheel in cuobjdump nvdisasm; do
    python3 -m pip download -q --no-deps --disable-pip-version-check -d "$tools" \
      "nvidia-cuda-$wheel==$version"
    python3 -m zipfile -e "$tools"/nvidia_cuda_$wheel-*.whl "$tools"
  done
  chmod +x "$bin" "$tools/nvidia/cu13/bin/nvdisasm"
fi
PATH=$tools/nvidia/cu13/bin:$PATH exec "$bin" -sass "$1"
