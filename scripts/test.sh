#!/usr/bin/env bash
# Builds tileattn and runs every test. This is the README's test command and what CI runs.
#   scripts/test.sh            CPU build + all tests; the CUDA code is also compiled when nvcc
#                              is present (its GPU tests skip on a machine without a GPU)
#   TILEATTN_SANITIZE=1 ...    also builds and runs the tests under ASan + UBSan
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

cmake --preset default >/dev/null
cmake --build --preset default -j "$jobs"
ctest --preset default -j "$jobs"

nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc_path" ]; then
  echo "== CUDA build (compile only on machines without a GPU)"
  # Only what the CPU build has not covered: the library with its CUDA kernels and the GPU tests
  # (which skip themselves without a GPU).
  cmake --preset cuda -DCMAKE_CUDA_COMPILER="$nvcc_path" >/dev/null
  cmake --build --preset cuda -j "$jobs" --target tileattn tileattn_cuda_tests
  ctest --preset cuda -j "$jobs" --tests-regex 'Cuda'
fi

if [ "${TILEATTN_SANITIZE:-0}" = "1" ]; then
  echo "== ASan + UBSan"
  cmake --preset sanitize >/dev/null
  cmake --build --preset sanitize -j "$jobs"
  ctest --preset sanitize -j "$jobs"
fi
