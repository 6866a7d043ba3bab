#!/usr/bin/env bash
# Timeline of the sm90 forward's key-block loop and tiles (measurement build,
# -DTILEATTN_FWD_TRACE): builds the GPU bench with the trace compiled in and runs it on
# TRACE_SHAPES ("dim:length" pairs, causal and not), writing the kernel's printed clock64
# stamps to $OUT/trace_<dim>_<length>.txt and their summary (scripts/gpu/trace_summary.py)
# to stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/trace-out}
BUILD=/tmp/trace-build
mkdir -p "$OUT"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEATTN_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="90a-real" -DTILEATTN_BUILD_TOOLS=OFF -DTILEATTN_BUILD_TESTS=OFF \
  -DTILEATTN_BUILD_BENCHMARKS=OFF -DCMAKE_CUDA_FLAGS=-DTILEATTN_FWD_TRACE >/tmp/trace-build.log 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target tileattn_gpu_bench >>/tmp/trace-build.log 2>&1 ||
  { tail -30 /tmp/trace-build.log; exit 1; }
for shape in ${TRACE_SHAPES:-64:8192 128:8192}; do
  d=${shape%%:*} l=${shape##*:}
  "$BUILD/bench/gpu/tileattn_gpu_bench" --backward 0 --dims "$d" --lengths "$l" --iters 3 \
    --warmup 2 --cooldown-ms 200 >"$OUT/trace_${d}_$l.txt" 2>&1
  echo "$shape: $(grep -c '^trace' "$OUT/trace_${d}_$l.txt") trace lines"
  python3 scripts/gpu/trace_summary.py "$OUT/trace_${d}_$l.txt"
done
