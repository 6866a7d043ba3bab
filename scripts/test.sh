#!/usr/bin/env bash
# Builds tileattn and runs every test. This is the README's test command and what CI runs.
#   scripts/test.sh            lint (scripts/lint.sh: clang-format and clang-tidy; fails on a
#                              formatting difference or a finding), CPU build + all tests, the
#                              Python package and its tests (scripts/python-tests.sh); the CUDA
#                              code is also compiled when nvcc is present (its GPU tests skip on
#                              a machine without a GPU)
#   TILEATTN_SANITIZE=1 ...    also builds and runs the tests under ASan + UBSan, then builds the
#                              libFuzzer targets (clang) and runs each for a bounded time
#                              (TILEATTN_FUZZ_SECONDS, default 60) on a copy of its corpus
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
# Each stage line carries the seconds since the start: CI must stay under 20 minutes.
stage() { echo "== $* (at $SECONDS s)"; }

stage "configure (after installing dependencies)"
# Also writes build/compile_commands.json for clang-tidy. A CTest test per GoogleTest shard
# (8 per binary) rather than per case: ~2800 processes' start-up was half of the tests' time.
# (Configure with -DTILEATTN_TEST_SHARDS=0 for a CTest entry per case.)
cmake --preset default -DTILEATTN_TEST_SHARDS="${TILEATTN_TEST_SHARDS:-8}" >/dev/null
# The Python tests' virtualenv and requirements (PyTorch: ~3 GB of downloads) meanwhile.
scripts/python-tests.sh prepare >build/python-prepare.log 2>&1 &
python_prepare=$!
stage "lint"
scripts/lint.sh
stage "CPU build"
cmake --build --preset default -j "$jobs"
stage "CPU tests"
ctest --preset default -j "$jobs"

stage "Python package and tests (CPU)"
if ! wait "$python_prepare"; then
  cat build/python-prepare.log
  exit 1
fi
cat build/python-prepare.log
scripts/python-tests.sh

nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc_path" ]; then
  stage "CUDA build (compile only on machines without a GPU)"
  # Only what the CPU build has not covered: the library with its CUDA kernels and the GPU tests
  # (which skip themselves without a GPU). sm_80 as PTX only: its code is still compiled (the
  # front end sees every sm_80 branch), without ptxas's sm_80 pass, which nothing here runs
  # (the GPU machine's build makes both; about a third of the compile time).
  cmake --preset cuda -DCMAKE_CUDA_COMPILER="$nvcc_path" \
    "-DCMAKE_CUDA_ARCHITECTURES=80-virtual;90a-real" >/dev/null
  cmake --build --preset cuda -j "$jobs" --target tileattn tileattn_cuda_tests
  ctest --preset cuda -j "$jobs" --tests-regex 'Cuda'
fi

if [ "${TILEATTN_SANITIZE:-0}" = "1" ]; then
  stage "ASan + UBSan"
  cmake --preset sanitize >/dev/null
  cmake --build --preset sanitize -j "$jobs"
  ctest --preset sanitize -j "$jobs"

  stage "libFuzzer (ASan + UBSan)"
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$jobs"
  fuzz_seconds=${TILEATTN_FUZZ_SECONDS:-60}
  fuzz_dir=$(mktemp -d)
  trap 'rm -rf "$fuzz_dir"' EXIT
  failed=0
  for target in npy attention kvcache; do
    # A copy of the committed corpus: libFuzzer adds what it finds to its corpus directory.
    # A fixed seed makes CI's walk repeatable (a finding reproduces on rerun); the long,
    # randomly seeded runs are separate (docs/fuzzing.md).
    cp -r "fuzz/corpus/$target" "$fuzz_dir/corpus-$target"
    log="$fuzz_dir/$target.log"
    if UBSAN_OPTIONS=print_stacktrace=1 "build-fuzz/fuzz/fuzz_$target" "$fuzz_dir/corpus-$target" \
        -seed="${TILEATTN_FUZZ_SEED:-1}" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$fuzz_dir/$target-" >"$log" 2>&1; then
      status=ok
    else
      status=FAILED
      failed=1
      tail -n 60 "$log"
      for artifact in "$fuzz_dir/$target-"*; do
        [ -e "$artifact" ] && echo "input: $artifact (base64: $(base64 -w0 "$artifact"))"
      done
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -n 's/.*cov: \([0-9]*\) ft: \([0-9]*\) corp: \([0-9]*\).*/cov \1, features \2, corpus \3/p')
    new=$(grep -cE '^#[0-9]+[[:space:]]+NEW' "$log" || true)
    echo "fuzz_$target: $status, ${runs:-?} executions in ${fuzz_seconds} s, $cov, $new new units"
  done
  [ "$failed" = 0 ]
fi
stage "done"
