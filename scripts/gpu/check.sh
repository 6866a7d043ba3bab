#!/usr/bin/env bash
# One command for the GPU machine: build with CUDA (sm_80 + sm_90), run the GPU test suite
# against the CPU reference, compute-sanitizer memcheck + racecheck on the small cases, then the
# benchmark (tileattn vs PyTorch SDPA FlashAttention-2 and cuDNN on the same shapes, same run).
#
#   bash scripts/gpu/check.sh [stages]   stages: any of build smoke test python python_bench
#                                        varlen_bench (after python: python/bench/varlen.py,
#                                        causal and not, forward and forward + backward,
#                                        VARLEN_ARGS)
#                                        decode_bench (after python: python/bench/decode.py,
#                                        tileattn's KV-cache decode vs PyTorch SDPA cuDNN / FA2
#                                        and a copy, DECODE_ARGS; then --lq 4, paged 16/256
#                                        and a num_splits sweep of the small cases)
#                                        decode_ab (after python: the decode of AB_PATCH's
#                                        baseline, installed in a second virtualenv, against
#                                        this tree, AB_ROUNDS alternating rounds, DECODE_AB_ARGS)
#                                        sanitize race_repeat
#                                        bench bench_bwd ab ncu_bwd ncu_src (NCU_SRC=fwd|bwd|bwd_sm80)
#                                        bwd_parts duel (DUEL_*: tileattn vs cuDNN alternately)
#                                        f32 (F32_*: f32 storage accuracy vs PyTorch, speed)
#                                        (default: build test python sanitize bench bench_bwd;
#                                        python: pip install . with CUDA, then python/tests,
#                                        PYTEST_ARGS; log in python.log; python_bench: after
#                                        python, overhead.py --device cuda and train_step.py
#                                        (TRAIN_STEP_ARGS; needs BUILD_TOOLS=ON);
#                                        bench_bwd: the backward vs PyTorch FA2 and cuDNN;
#                                        ncu_bwd: Nsight Compute on both backward kernels,
#                                        D=NCU_BWD_DIM, L=NCU_BWD_LENGTH, NCU_BWD_CAUSAL=0|1
#                                        (default 0); bwd_parts: the
#                                        duration of every kernel of one backward call,
#                                        tileattn's and cuDNN's, D in BWD_PARTS_DIMS, L in
#                                        BWD_PARTS_LENGTHS)
#
# Before a device call run scripts/gpu/prepare.sh here and carry .gpu-deps.
# Environment: OUT (results folder; default build-gpu/out), JOBS (default nproc), CTEST_REGEX
# (unset: the GPU test binary only; "." adds every CTest suite), BENCH_DIMS, BENCH_LENGTHS,
# TEST_FILTER, TEST_PASSES ("0 1": the sm90 dispatch, then sm80 only), BENCH_ITERS, BENCH_SM80=1 (also time the sm80 kernel on Hopper), BENCH_VARIANTS (see below),
# BENCH_COOLDOWN_MS, BENCH_SUSTAIN_MS, BENCH_BWD_DIMS, BENCH_BWD_LENGTHS, SANITIZE_RUNS / SANITIZE_ARGS / SANITIZE_FILTER (stage sanitize), AB_PATCH / AB_ENV / AB_ROUNDS / AB_DIMS / AB_LENGTHS (default: the BENCH_ ones) / AB_BACKWARD / AB_SM80 (stage ab). Writes few files under $OUT (the device tool's limit):
# summary.txt, test.log, sanitizer.log, sass.txt, bench_tileattn.json, bench_tileattn_sm80.json,
# bench_torch.json, bench.json, bench_bwd.json (build.log only when the build fails).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
OUT=${OUT:-$BUILD/out}
mkdir -p "$OUT"
STAGES=${*:-build test python sanitize bench bench_bwd}
export PATH=/usr/local/cuda/bin:$PATH
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }
# A copy of this tree (no build or .gpu-deps) in $1 with patches $3.. reverse-applied from the
# last down to index $2: the baseline of the A/B stages. Fails when a patch does not reverse.
baseline_copy() {
  local dest=$1 from=$2 j
  shift 2
  local list=("$@")
  mkdir -p "$dest" &&
    tar --exclude=./build-gpu --exclude=./.gpu-deps -cf - . | tar -xf - -C "$dest" &&
    (cd "$dest" && for ((j = ${#list[@]} - 1; j >= from; j--)); do
      patch -R -p1 -s <"$ROOT/${list[j]}" || exit 1; done)
}
status=0

note "== $(date -u +%FT%TZ) tileattn GPU check: stages: $STAGES"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit,enforced.power.limit,power.max_limit --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
  g++ --version | head -1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
  # The L2 set-aside for persisting accesses (tileattn's K/V loads carry evict-last hints).
  python3 -c 'import ctypes; rt = ctypes.CDLL("libcudart.so"); v = ctypes.c_size_t(0)
rt.cudaDeviceGetLimit(ctypes.byref(v), 6); print("persisting L2 limit (bytes):", v.value)' 2>/dev/null ||
    echo "persisting L2 limit: unknown (no libcudart.so for python)"
} 2>&1 | tee -a "$SUMMARY"
# Clock, power and throttle log of the whole call (every 200 ms), summarised at the end: tells
# whether a slow figure came with lower SM clocks (power or thermal limits).
TZ=UTC nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader,nounits -lms 200 >/tmp/clocks.csv 2>/dev/null &
MONITOR=$!
: >/tmp/clock_marks.csv
stage_mark() { echo "mark,$(date -u +%H:%M:%S),$1" >>/tmp/clock_marks.csv; }

# Every benchmark (tileattn's and PyTorch's) idles the GPU BENCH_COOLDOWN_MS (default 500) before
# each shape and, with BENCH_SUSTAIN_MS, runs it that long before timing: the H200 lowers its
# clock under its 700 W cap depending on the recent power, so shapes must start from the same
# state (docs/perf/gpu.md, method).
TIMING=(--cooldown-ms "${BENCH_COOLDOWN_MS:-500}" --sustain-ms "${BENCH_SUSTAIN_MS:-0}")
note "-- benchmark timing: ${TIMING[*]}"

if has_stage build; then
  stage_mark build
  # GoogleTest: the system's if present, else built from the carried source (.gpu-deps).
  GTEST_ARGS=()
  if ! ls /usr/lib/*/cmake/GTest/GTestConfig.cmake /usr/lib/cmake/GTest/GTestConfig.cmake \
      /usr/local/lib/cmake/GTest/GTestConfig.cmake >/dev/null 2>&1; then
    if [[ -d $ROOT/.gpu-deps/googletest ]]; then
      note "-- building GoogleTest from .gpu-deps/googletest"
      cmake -S "$ROOT/.gpu-deps/googletest" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX=/tmp/gtest-install -DBUILD_GMOCK=OFF >/tmp/gtest.log 2>&1 &&
        cmake --build /tmp/gtest-build -j "$JOBS" >>/tmp/gtest.log 2>&1 &&
        cmake --install /tmp/gtest-build >>/tmp/gtest.log 2>&1 || { tail -20 /tmp/gtest.log; exit 1; }
      GTEST_ARGS=(-DCMAKE_PREFIX_PATH=/tmp/gtest-install)
    fi
  fi
  # CLI11 (the command-line tool, BUILD_TOOLS=ON): the carried headers (.gpu-deps/cli11).
  if [[ -d $ROOT/.gpu-deps/cli11 ]]; then
    GTEST_ARGS=("-DCMAKE_PREFIX_PATH=/tmp/gtest-install;$ROOT/.gpu-deps/cli11")
  fi
  start=$(date +%s)
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEATTN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="80;90a-real" -DTILEATTN_WERROR=ON -DTILEATTN_CUDA_PTXAS_VERBOSE=ON \
    -DTILEATTN_BUILD_TOOLS=${BUILD_TOOLS:-OFF} "${GTEST_ARGS[@]}" >/tmp/build.log 2>&1 &&
    cmake --build "$BUILD" -j "$JOBS" >>/tmp/build.log 2>&1
  rc=$?
  note "-- build: rc $rc in $(($(date +%s) - start)) s"
  if [[ $rc != 0 ]]; then
    cp /tmp/build.log "$OUT/build.log"
    grep -E "error|Error" /tmp/build.log | head -40
    exit 1
  fi
  # Register / spill report of every kernel (sm_90 pass), and the SASS instruction mix.
  grep -A2 "Compiling entry function.*for 'sm_90a'" /tmp/build.log |
    grep -E "entry|registers|spill" | sed -e 's/ptxas info *: //' >>"$OUT/sass.txt"
  for obj in "$BUILD"/src/CMakeFiles/tileattn.dir/cuda/sm80/*.o "$BUILD"/src/CMakeFiles/tileattn.dir/cuda/sm90/*.o; do
    cuobjdump --dump-sass --gpu-architecture sm_90a "$obj" >/tmp/sass.txt 2>/dev/null || continue
    awk -v f="$(basename "$obj")" '/Function :/ {name=$3}
      /HMMA|HGMMA/ {h[name]++} /LDSM/ {l[name]++} /LDGSTS/ {c[name]++} /LDL|STL/ {s[name]++} /MUFU.EX2/ {e[name]++}
      END {for (n in h) printf "%s %s: HMMA/HGMMA %d LDSM %d LDGSTS %d MUFU.EX2 %d local %d\n", f, n, h[n], l[n], c[n], e[n], s[n]+0}' \
      /tmp/sass.txt >>"$OUT/sass.txt"
  done
  grep -E "spill" "$OUT/sass.txt" | sort | uniq -c | tee -a "$SUMMARY"
  # Where the sm90 kernels touch local memory (spills), with the nearest preceding HGMMA / BAR /
  # branch-target context, to tell main-loop spills from prologue / epilogue ones.
  for obj in "$BUILD"/src/CMakeFiles/tileattn.dir/cuda/sm90/*hdim*.o; do
    cuobjdump --dump-sass --gpu-architecture sm_90a "$obj" 2>/dev/null |
      awk -v f="$(basename "$obj")" '/Function :/ {name=$3; n=0; hg=0}
        /HGMMA/ {hg++}
        /LDL|STL/ {n++; if (n <= 6) printf "%s %s: %s  [after %d HGMMA]\n", f, name, $0, hg}' >>"$OUT/sass.txt"
  done
  # The fast D 64 forward kernel's key-block step: its instruction mix and the path an interior
  # block executes (scripts/sass_step.py).
  cuobjdump --dump-sass --gpu-architecture sm_90a \
    "$BUILD/src/CMakeFiles/tileattn.dir/cuda/sm90/flash_fwd_sm90_hdim64.cu.o" >/tmp/sass_new.txt 2>/dev/null &&
    python3 scripts/sass_step.py --hot /tmp/sass_new.txt 2>&1 | sed 's/^/   /' | tee -a "$SUMMARY"
  # wgmma serialisation warnings (C7513, C7515, C7520: all C75xx) would cost the sm90 kernels
  # their overlap.
  note "   ptxas wgmma serialisation warnings: $(grep -c -E 'C75[0-9][0-9]' /tmp/build.log)"
fi

if has_stage smoke; then
  # One small forward and backward per head dim under a short timeout, before anything long:
  # a kernel that hangs (a barrier that never completes) costs 30 s of device time here instead
  # of the test stage's 300.
  stage_mark smoke
  for bwd in 0 1; do
    timeout 30 "$BUILD/bench/gpu/tileattn_gpu_bench" --backward "$bwd" --dims 64,128,256 \
      --lengths 1024 --iters 1 --warmup 0 --cooldown-ms 0 >/tmp/smoke.log 2>&1
    rc=$?
    note "-- smoke (backward $bwd): rc $rc$([[ $rc == 124 ]] && echo ' (timed out: a hang?)')"
    if [[ $rc != 0 ]]; then tail -5 /tmp/smoke.log | tee -a "$SUMMARY"; status=1; fi
  done
fi
if has_stage test; then
  stage_mark test
  start=$(date +%s)
  TESTS="$BUILD/tests/cuda/tileattn_cuda_tests"
  # Default dispatch (the sm90 wgmma kernel where it applies on Hopper), then the sm80 kernel
  # for everything (TILEATTN_CUDA_DISABLE_SM90=1).
  : >"$OUT/test.log"
  # TEST_PASSES / TEST_FILTER narrow a quick call (default: both passes, every test).
  for sm80_only in ${TEST_PASSES:-0 1}; do
    echo "=== TILEATTN_CUDA_DISABLE_SM90=$sm80_only" >>"$OUT/test.log"
    # A hang (e.g. a pipeline deadlock) must not eat the device budget: 300 s is ~15x a pass.
    # The backward runs in both passes too (its sm90 kernel covers the fast path, D <= 128).
    filter=${TEST_FILTER:-*}
    TILEATTN_CUDA_DISABLE_SM90=$sm80_only timeout 300 "$TESTS" --gtest_brief=1 \
      --gtest_filter="$filter" >/tmp/test.log 2>&1
    rc=$?
    cat /tmp/test.log >>"$OUT/test.log"
    note "-- GPU tests (TILEATTN_CUDA_DISABLE_SM90=$sm80_only): rc $rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \] [0-9]+' /tmp/test.log | tr '\n' ' ')"
    grep -E "^\[  FAILED  \] " /tmp/test.log | head -30 | tee -a "$SUMMARY"
    [[ $rc != 0 ]] && status=1
    # Worst relative errors: dtype, out dtype, case, rel_l2, naive rel_l2.
    grep "\[ stats \] cuda [a-z0-9]* out" /tmp/test.log | awk '{print $5, $7, $8, $10, $14}' |
      sort -k4 -g | tail -3 | sed 's/^/   largest rel_l2: /' | tee -a "$SUMMARY"
    # Backward: dtype, case, dq / dk / dv rel_l2 (own error, naive), worst dq last.
    grep "\[ stats \] cuda backward" /tmp/test.log | cut -d' ' -f5- | sort -t' ' -k4 -g | tail -3 |
      sed 's/^/   backward, largest dq rel_l2: /' | tee -a "$SUMMARY"
  done
  note "   ($(($(date +%s) - start)) s)"
  if [[ -n ${CTEST_REGEX:-} ]]; then  # the CPU suites too, e.g. CTEST_REGEX=.
    (cd "$BUILD" && ctest -R "$CTEST_REGEX" -E CudaForward -j "$JOBS" --timeout 900) >>"$OUT/test.log" 2>&1
    rc=$?
    note "-- ctest -R '$CTEST_REGEX': rc $rc: $(grep -E 'tests passed' "$OUT/test.log" | tail -1)"
    [[ $rc != 0 ]] && status=1
  fi
fi

if has_stage python; then  # the Python package with the CUDA backend, python/tests on the GPU
  stage_mark python
  start=$(date +%s)
  # A virtualenv that also sees the machine's PyTorch (which lives in a virtualenv of its own, so
  # --system-site-packages alone does not reach it: a .pth file names its site-packages, after
  # ours); the build requirements it lacks come from the wheels prepare.sh put in
  # .gpu-deps/wheels (no network there).
  venv=/tmp/tileattn-venv
  if [[ ! -x $venv/bin/python ]]; then
    python3 -m venv --system-site-packages "$venv"
    python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
      >"$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/machine-torch.pth"
  fi
  {
    "$venv/bin/python" -m pip install -q --no-index --find-links "$ROOT/.gpu-deps/wheels" \
      scikit-build-core nanobind pytest numpy &&
      "$venv/bin/python" -m pip install -q --no-index --no-build-isolation --no-deps "$ROOT" \
        --config-settings=cmake.define.TILEATTN_CUDA=ON \
        --config-settings=build-dir="$BUILD/python"
  } >"$OUT/python.log" 2>&1
  rc=$?
  if [[ $rc != 0 ]]; then
    note "-- python: package build failed (rc $rc)"; tail -30 "$OUT/python.log" | tee -a "$SUMMARY"
    status=1
  else
    (cd /tmp && timeout 900 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
      "$ROOT/python/tests" ${PYTEST_ARGS:-}) >>"$OUT/python.log" 2>&1
    rc=$?
    note "-- python tests: rc $rc: $(tail -1 "$OUT/python.log")"
    grep -E "^FAILED " "$OUT/python.log" | head -30 | tee -a "$SUMMARY"
    [[ $rc != 0 ]] && status=1
  fi
  note "   ($(($(date +%s) - start)) s)"
fi

if has_stage python_bench; then  # after python (its venv): the Python layer's GPU costs
  stage_mark python_bench
  venv=/tmp/tileattn-venv
  cli_arg=()
  [[ -x $BUILD/tools/tileattn ]] && cli_arg=(--cli "$BUILD/tools/tileattn")
  (cd /tmp && timeout 200 "$venv/bin/python" "$ROOT/python/bench/overhead.py" --device cuda \
    "${cli_arg[@]}") 2>&1 | tee "$OUT/python_overhead.txt" | tee -a "$SUMMARY"
  if [[ -x $BUILD/tools/tileattn ]]; then  # the build stage with BUILD_TOOLS=ON
    (cd /tmp && timeout 400 "$venv/bin/python" "$ROOT/python/bench/train_step.py" \
      --cli "$BUILD/tools/tileattn" ${TRAIN_STEP_ARGS:-}) 2>&1 | tail -12 |
      tee "$OUT/train_step.txt" | tee -a "$SUMMARY"
  else
    note "-- python_bench: no $BUILD/tools/tileattn (run the build stage with BUILD_TOOLS=ON)"
  fi
fi
if has_stage varlen_bench; then  # after python: python/bench/varlen.py (VARLEN_ARGS)
  stage_mark varlen_bench
  for args in "--causal" "--causal --backward" "" "--backward"; do
    (cd /tmp && timeout 200 /tmp/tileattn-venv/bin/python "$ROOT/python/bench/varlen.py" $args \
      ${VARLEN_ARGS:-}) 2>&1 | tail -8 | tee -a "$OUT/varlen.txt" | tee -a "$SUMMARY"
  done
fi
if has_stage decode_bench; then  # after python: python/bench/decode.py (DECODE_ARGS)
  stage_mark decode_bench
  for args in "" "--lq 4 --torch= --batches 1,64 --lengths 16384" \
    "--block-sizes 16,256 --torch= --batches 1,8 --lengths 4096,131072" \
    "--splits 1,4,8,32 --torch= --batches 1,8 --lengths 1024,4096,16384"; do
    (cd /tmp && timeout 240 /tmp/tileattn-venv/bin/python "$ROOT/python/bench/decode.py" $args \
      ${DECODE_ARGS:-}) 2>&1 | tail -90 | tee -a "$OUT/decode.txt" | tee -a "$SUMMARY"
  done
fi
if has_stage decode_ab; then  # after python: the decode of AB_PATCH's baseline against this tree
  stage_mark decode_ab
  start=$(date +%s)
  # The baseline (this tree with AB_PATCH reverse-applied, as the ab stage does) is installed
  # into a second virtualenv; python/bench/decode.py (tileattn's side only, graph mode) then runs
  # in each, alternately, AB_ROUNDS times; a table of tileattn GB/s per round and side follows.
  base_src=/tmp/decode-ab-base base_venv=/tmp/tileattn-venv-base
  rm -rf "$base_src"
  read -r -a patches <<<"${AB_PATCH:-}"
  if ((${#patches[@]} == 0)); then
    note "-- decode_ab: AB_PATCH names no patch"; status=1
  elif ! baseline_copy "$base_src" 0 "${patches[@]}"; then
    note "-- decode_ab: the patches do not reverse-apply"; status=1
  else
    [[ -x $base_venv/bin/python ]] || cp -a /tmp/tileattn-venv "$base_venv"
    if ! "$base_venv/bin/python" -m pip install -q --no-index --no-build-isolation --no-deps \
      --force-reinstall "$base_src" --config-settings=cmake.define.TILEATTN_CUDA=ON \
      --config-settings=build-dir="$base_src-build" >"$OUT/decode_ab.log" 2>&1; then
      note "-- decode_ab: the baseline package did not build"; tail -20 "$OUT/decode_ab.log"
      status=1
    else
      : >/tmp/decode_ab_runs.txt
      for ((r = 1; r <= ${AB_ROUNDS:-2}; r++)); do
        for side in base new; do
          py=/tmp/tileattn-venv/bin/python
          [[ $side == base ]] && py=$base_venv/bin/python
          (cd /tmp && timeout 240 "$py" "$ROOT/python/bench/decode.py" --torch= \
            ${DECODE_AB_ARGS:-}) 2>&1 | tee -a "$OUT/decode_ab.log" |
            awk -v tag="${side}_$r" -F' [|] ' '/^[0-9]+ [|] [0-9]+ [|] /{print tag, $1, $2, $3}' \
              >>/tmp/decode_ab_runs.txt
        done
      done
      python3 - /tmp/decode_ab_runs.txt <<'PY' | tee -a "$OUT/decode.txt" | tee -a "$SUMMARY"
import collections, sys
rows = collections.OrderedDict()
tags = []
for line in open(sys.argv[1]):
    tag, b, lk, gbps = line.split()
    rows.setdefault((int(b), int(lk)), {})[tag] = gbps
    if tag not in tags:
        tags.append(tag)
tags.sort(key=lambda t: (t.split("_")[0] != "base", t))
print("decode A/B, tileattn GB/s (graph mode):")
print("B | Lk | " + " | ".join(tags))
for (b, lk), v in rows.items():
    print(f"{b} | {lk} | " + " | ".join(v.get(t, "-") for t in tags))
PY
    fi
  fi
  note "   ($(($(date +%s) - start)) s)"
fi
if has_stage sanitize; then
  stage_mark sanitize
  start=$(date +%s)
  : >"$OUT/sanitizer.log"
  # SANITIZE_RUNS: tool:DISABLE_SM90 pairs (e.g. "racecheck:0" for an sm90-only change), each
  # optionally with an environment setting: tool:DISABLE_SM90:VAR=value.
  for run in ${SANITIZE_RUNS:-memcheck:0 racecheck:0 synccheck:0 memcheck:1 racecheck:1}; do
    IFS=: read -r tool sm80_only setting <<<"$run"
    echo "== $run" >>"$OUT/sanitizer.log"
    # SANITIZE_ARGS: more compute-sanitizer options (e.g. "--racecheck-report all");
    # SANITIZE_FILTER: the tests (default *Small*).
    # shellcheck disable=SC2086
    env ${setting:+"$setting"} TILEATTN_CUDA_DISABLE_SM90="$sm80_only" timeout 300 \
      compute-sanitizer --tool "$tool" --error-exitcode 99 ${SANITIZE_ARGS:-} \
      "$BUILD/tests/cuda/tileattn_cuda_tests" --gtest_filter="${SANITIZE_FILTER:-*Small*}" \
      >>"$OUT/sanitizer.log" 2>&1
    rc=$?
    note "-- compute-sanitizer $tool (DISABLE_SM90=$sm80_only${setting:+ $setting}): rc $rc; $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer.log" | tail -1)"
    [[ $rc != 0 ]] && status=1
  done
  note "   ($(($(date +%s) - start)) s)"
fi

if has_stage race_repeat; then  # racecheck RACE_REPEAT times on RACE_FILTER, and the SASS of the
  stage_mark race_repeat
  # sm90 forward objects, to place any reported offsets
  start=$(date +%s)
  TILEATTN_CUDA_DISABLE_SM90=0 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 99 \
    "$BUILD/tests/cuda/tileattn_cuda_tests" --gtest_filter="${RACE_FILTER:-*Small*}" \
    --gtest_repeat="${RACE_REPEAT:-5}" >"$OUT/race_repeat.log" 2>&1
  note "-- racecheck x${RACE_REPEAT:-5} on ${RACE_FILTER:-*Small*}: rc $?; $(grep -c "Race reported" "$OUT/race_repeat.log") reports"
  grep -E "Race reported|Write access|Read access" "$OUT/race_repeat.log" | sort | uniq -c | head -20 | tee -a "$SUMMARY"
  for obj in "$BUILD"/src/CMakeFiles/tileattn.dir/cuda/sm90/flash_fwd_sm90_hdim*.o; do
    cuobjdump --dump-sass --gpu-architecture sm_90a "$obj" 2>/dev/null
  done | gzip -c >"$OUT/fwd_sm90.sass.gz"
  note "   ($(($(date +%s) - start)) s)"
fi

if has_stage bench; then
  stage_mark bench
  dims=${BENCH_DIMS:-64,128,256}
  lengths=${BENCH_LENGTHS:-512,1024,2048,4096,8192,16384}
  iters=${BENCH_ITERS:-30}
  timeout 300 "$BUILD/bench/gpu/tileattn_gpu_bench" --dims "$dims" --lengths "$lengths" --iters "$iters" "${TIMING[@]}" \
    --json "$OUT/bench_tileattn.json" >>"$SUMMARY" 2>&1 || { note "-- tileattn bench failed"; status=1; }
  if [[ ${BENCH_SM80:-0} == 1 ]]; then  # the sm80 kernel on the same grid, for the record
    TILEATTN_CUDA_DISABLE_SM90=1 "$BUILD/bench/gpu/tileattn_gpu_bench" --dims "$dims" \
      --lengths "$lengths" --iters "$iters" "${TIMING[@]}" --label tileattn_sm80 \
      --json "$OUT/bench_tileattn_sm80.json" >/tmp/bench_sm80.log 2>&1 || note "-- sm80 bench failed"
  fi
  # BENCH_VARIANTS="name:VAR=value ...": the same grid under other environment settings (e.g.
  # sm80:TILEATTN_CUDA_DISABLE_SM90=1), reported as extra tileattn_<name> columns.
  variant_files=()
  for variant in ${BENCH_VARIANTS:-}; do
    name=${variant%%:*} setting=${variant#*:}
    env "$setting" timeout 300 "$BUILD/bench/gpu/tileattn_gpu_bench" --dims "$dims" \
      --lengths "$lengths" --iters "$iters" "${TIMING[@]}" --label "tileattn_$name" \
      --json "/tmp/bench_variant_$name.json" >/tmp/bench_variant.log 2>&1 || note "-- variant $name failed"
    variant_files+=("/tmp/bench_variant_$name.json")
  done
  PYTHONUNBUFFERED=1 python3 bench/gpu/bench_torch.py --dims "$dims" --lengths "$lengths" \
    --iters "$iters" "${TIMING[@]}" --json "$OUT/bench_torch.json" >/tmp/bench_torch.log 2>&1 ||
    { note "-- torch bench failed"; tail -5 /tmp/bench_torch.log | tee -a "$SUMMARY"; }
  head -1 /tmp/bench_torch.log | tee -a "$SUMMARY"
  python3 bench/gpu/compare.py "$OUT"/bench_tileattn*.json "${variant_files[@]}" "$OUT/bench_torch.json" \
    --json "$OUT/bench.json" | tee -a "$SUMMARY"
fi
if has_stage bench_bwd; then  # the backward: tileattn (sm80 kernel) vs PyTorch FA2 and cuDNN
  stage_mark bench_bwd
  dims=${BENCH_BWD_DIMS:-64,128}
  lengths=${BENCH_BWD_LENGTHS:-1024,2048,4096,8192,16384}
  iters=${BENCH_ITERS:-30}
  timeout 300 "$BUILD/bench/gpu/tileattn_gpu_bench" --backward 1 --dims "$dims" --lengths "$lengths" \
    --iters "$iters" "${TIMING[@]}" --json /tmp/bench_bwd_tileattn.json >>"$SUMMARY" 2>&1 ||
    { note "-- tileattn backward bench failed"; status=1; }
  PYTHONUNBUFFERED=1 timeout 300 python3 bench/gpu/bench_torch.py --backward 1 --dims "$dims" \
    --lengths "$lengths" --iters "$iters" "${TIMING[@]}" --json /tmp/bench_bwd_torch.json >/tmp/bench_bwd_torch.log 2>&1 ||
    { note "-- torch backward bench failed"; tail -5 /tmp/bench_bwd_torch.log | tee -a "$SUMMARY"; }
  # The deterministic mode on the same grid (extra column tileattn_deterministic).
  timeout 300 "$BUILD/bench/gpu/tileattn_gpu_bench" --backward 1 --deterministic 1 --dims "$dims" \
    --lengths "$lengths" --iters "$iters" "${TIMING[@]}" --label tileattn_deterministic \
    --json /tmp/bench_bwd_det.json >/tmp/bench_bwd_det.log 2>&1 || note "-- deterministic bench failed"
  # The sm80 kernel on the same grid (extra column tileattn_sm80).
  TILEATTN_CUDA_DISABLE_SM90=1 timeout 300 "$BUILD/bench/gpu/tileattn_gpu_bench" --backward 1 \
    --dims "$dims" --lengths "$lengths" --iters "$iters" "${TIMING[@]}" --label tileattn_sm80 \
    --json /tmp/bench_bwd_sm80.json >/tmp/bench_bwd_sm80.log 2>&1 || note "-- sm80 backward bench failed"
  note "-- backward (2.5x forward FLOPs):"
  python3 bench/gpu/compare.py /tmp/bench_bwd_tileattn.json /tmp/bench_bwd_det.json \
    /tmp/bench_bwd_sm80.json /tmp/bench_bwd_torch.json \
    --json "$OUT/bench_bwd.json" | tee -a "$SUMMARY"
fi
if has_stage duel; then
  # tileattn and PyTorch cuDNN alternately, DUEL_ROUNDS times, on DUEL_DIMS x DUEL_LENGTHS
  # (DUEL_CAUSAL 0|1|both, DUEL_BACKWARD 0|1): a ratio per round, so that the power state's
  # drift between two runs a minute apart does not decide a comparison.
  stage_mark duel
  d_dims=${DUEL_DIMS:-128} d_lengths=${DUEL_LENGTHS:-16384} d_causal=${DUEL_CAUSAL:-1}
  d_bwd=${DUEL_BACKWARD:-1} d_iters=${BENCH_ITERS:-20} duel_files=()
  for round in $(seq "${DUEL_ROUNDS:-6}"); do
    timeout 300 "$BUILD/bench/gpu/tileattn_gpu_bench" --backward "$d_bwd" --dims "$d_dims" \
      --lengths "$d_lengths" --causal "$d_causal" --iters "$d_iters" "${TIMING[@]}" \
      --label "tileattn_$round" --json "/tmp/duel_t_$round.json" >/tmp/duel.log 2>&1 ||
      note "-- duel: tileattn round $round failed"
    timeout 300 python3 bench/gpu/bench_torch.py --backward "$d_bwd" --backends torch_cudnn \
      --dims "$d_dims" --lengths "$d_lengths" --causal "$d_causal" --iters "$d_iters" \
      "${TIMING[@]}" --json "/tmp/duel_c_$round.json" >/tmp/duel.log 2>&1 ||
      note "-- duel: cuDNN round $round failed"
    duel_files+=("/tmp/duel_t_$round.json" "/tmp/duel_c_$round.json")
  done
  python3 - "${duel_files[@]}" <<'PY' | tee "$OUT/duel.txt" | tee -a "$SUMMARY"
import json, statistics, sys
rows = {}  # (D, causal, L) -> round -> {who: (tflops, mhz)}
for i, path in enumerate(sys.argv[1:]):
    who, rnd = ("tileattn", "cudnn")[i % 2], i // 2 + 1
    try:
        data = json.load(open(path))
    except (OSError, ValueError):
        continue
    for r in data:  # both benches write impl, D, causal, L, tflops, sm_mhz per shape
        key, tf, mhz = (r["D"], r["causal"], r["L"]), r.get("tflops"), r.get("sm_mhz") or 0
        if tf:
            rows.setdefault(key, {}).setdefault(rnd, {})[who] = (tf, mhz)
print("duel: tileattn / cuDNN per round (TFLOP/s tileattn / cuDNN, ratio)")
for key in sorted(rows):
    ratios, cells = [], []
    for rnd in sorted(rows[key]):
        pair = rows[key][rnd]
        if len(pair) == 2:
            (t, tm), (c, cm) = pair["tileattn"], pair["cudnn"]
            ratios.append(t / c)
            cells.append(f"{t:.1f}/{c:.1f} {t / c:.2f} ({tm:.0f}/{cm:.0f} MHz)")
    if ratios:
        print(f"D {key[0]} causal {key[1]} L {key[2]}: median ratio {statistics.median(ratios):.3f}"
              f" min {min(ratios):.3f} max {max(ratios):.3f} over {len(ratios)} rounds")
        for c in cells:
            print("   ", c)
PY
fi
if has_stage ab; then
  # A/B in one call: AB_PATCH (a diff of the working tree against the baseline, e.g. written by
  # `git diff HEAD~1 > .gpu-deps/ab.patch` and carried) is reverse-applied to a copy of the tree,
  # which is built too; the two forward (or AB_BACKWARD=1 backward) benches then run alternately
  # AB_ROUNDS times on BENCH_DIMS x BENCH_LENGTHS, each round a column per side.
  # AB_PATCH="p1 p2 ..." (tree = baseline + p1 + p2 + ...): one side per prefix, i.e. the
  # baseline, baseline + p1, ..., and the tree itself ("new"); sides are named base, v1, v2, ...
  # AB_ENV="VAR=value": the same binary run under that setting is a side too (alone, the
  # baseline: e.g. TILEATTN_CUDA_DISABLE_SM90=1). Several settings separated by ';' give a side
  # each (env1, env2, ...; env1 also with AB_PATCH); one setting may set several variables.
  # Kernel choices are fields of the tile tables (src/cuda/sm80/tile_config.hpp,
  # src/cuda/sm90/tile_config.hpp), not environment switches: A/B them with AB_PATCH.
  start=$(date +%s)
  # AB_REUSE=1: sides already built by an earlier ab stage of this machine are kept (the same
  # patches; e.g. a backward A/B after a forward one).
  [[ ${AB_REUSE:-0} == 1 ]] || rm -rf /tmp/ab-side-*
  rm -f /tmp/ab_*.json
  ab_ok=1
  read -r -a patches <<<"${AB_PATCH:-}"
  sides=(new) bins=("$BUILD/bench/gpu/tileattn_gpu_bench") settings=("TILEATTN_AB_SIDE=new")
  if [[ -n ${AB_ENV:-} ]]; then
    IFS=';' read -r -a envs <<<"$AB_ENV"
    for ((e = 0; e < ${#envs[@]}; e++)); do
      name=$([[ ${#envs[@]} == 1 && ${#patches[@]} == 0 ]] && echo base || echo "env$((e + 1))")
      note "-- ab: side $name = the same binary under ${envs[e]}"
      sides+=("$name") bins+=("${bins[0]}") settings+=("${envs[e]}")
    done
  fi
  # Side k (k = number of patches kept): the tree with the patches after the k-th reverse-applied.
  # The sides' sources are prepared one by one, then built at the same time (JOBS shared out):
  # each build's long pole is one kernel translation unit, so in turn they took ~50 s each.
  side_ks=()
  for ((k = ${#patches[@]} - 1; k >= 0 && ab_ok == 1; k--)); do
    src=/tmp/ab-side-$k
    if [[ ${AB_REUSE:-0} == 1 && -x $src-build/bench/gpu/tileattn_gpu_bench ]]; then
      side_ks+=("$k")
      continue
    fi
    if baseline_copy "$src" "$k" "${patches[@]}"; then
      side_ks+=("$k")
    else
      note "-- ab: the patches do not reverse-apply (side $k)"; status=1 ab_ok=0
    fi
  done
  if [[ $ab_ok == 1 && ${#side_ks[@]} -gt 0 ]]; then
    side_jobs=$((JOBS / ${#side_ks[@]})) && ((side_jobs < 2)) && side_jobs=2
    side_pids=() step_files=()
    for k in "${side_ks[@]}"; do
      src=/tmp/ab-side-$k
      (cmake -S "$src" -B "$src-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEATTN_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="80;90a-real" -DTILEATTN_BUILD_TOOLS=OFF -DTILEATTN_BUILD_TESTS=OFF -DTILEATTN_BUILD_BENCHMARKS=OFF \
        >"$src.log" 2>&1 && cmake --build "$src-build" -j "$side_jobs" --target tileattn_gpu_bench >>"$src.log" 2>&1) &
      side_pids+=($!)
    done
    for ((n = 0; n < ${#side_ks[@]}; n++)); do
      k=${side_ks[n]} src=/tmp/ab-side-${side_ks[n]}
      name=$([[ $k == 0 ]] && echo base || echo "v$k")
      if wait "${side_pids[n]}"; then
        sides+=("$name") bins+=("$src-build/bench/gpu/tileattn_gpu_bench")
        settings+=("TILEATTN_AB_SIDE=$name")
        note "-- ab: side $name built ($(($(date +%s) - start)) s)"
        # The side's fast D 64 key-block step (scripts/sass_step.py), printed below.
        cuobjdump --dump-sass --gpu-architecture sm_90a \
          "$src-build/src/CMakeFiles/tileattn.dir/cuda/sm90/flash_fwd_sm90_hdim64.cu.o" \
          >"/tmp/sass_$name.txt" 2>/dev/null && step_files+=("/tmp/sass_$name.txt")
      else
        note "-- ab: side $name build failed"; tail -20 "$src.log" | tee -a "$SUMMARY"; status=1 ab_ok=0
      fi
    done
    [[ -s /tmp/sass_new.txt ]] && step_files+=(/tmp/sass_new.txt)  # the build stage's
    ((${#step_files[@]} > 0)) &&
      python3 scripts/sass_step.py --hot "${step_files[@]}" 2>&1 | sed 's/^/   /' | tee -a "$SUMMARY"
  fi
  if [[ $ab_ok == 1 ]]; then
    dims=${AB_DIMS:-${BENCH_DIMS:-64,128,256}} lengths=${AB_LENGTHS:-${BENCH_LENGTHS:-1024,2048,4096,8192,16384}}
    iters=${BENCH_ITERS:-20} ab_files=()
    # AB_SM80=1: every side is also run with the sm80 kernels forced (columns *_sm80_<round>).
    dispatches=("") && [[ ${AB_SM80:-0} == 1 ]] && dispatches+=(sm80)
    for round in $(seq "${AB_ROUNDS:-2}"); do
      for dispatch in "${dispatches[@]}"; do
        for ((i = 0; i < ${#sides[@]}; i++)); do
          side=${sides[i]}${dispatch:+_$dispatch}
          stage_mark "ab_${side}_$round"
          # shellcheck disable=SC2086  # a setting may hold several VAR=value words
          env ${settings[i]} ${dispatch:+TILEATTN_CUDA_DISABLE_SM90=1} timeout 300 "${bins[i]}" \
            --backward "${AB_BACKWARD:-0}" --dims "$dims" --lengths "$lengths" --iters "$iters" \
            "${TIMING[@]}" --label "tileattn_${side}_$round" --json "/tmp/ab_${side}_$round.json" \
            >/tmp/ab.log 2>&1 || note "-- ab: $side round $round failed"
          ab_files+=("/tmp/ab_${side}_$round.json")
        done
      done
    done
    python3 bench/gpu/compare.py "${ab_files[@]}" --json "$OUT/ab.json" | tee -a "$SUMMARY"
  fi
  note "   ($(($(date +%s) - start)) s)"
fi
if has_stage f32; then  # f32 storage: accuracy and speed (scripts/gpu/f32_accuracy.py)
  stage_mark f32
  start=$(date +%s)
  # F32_BASE_PATCH (a diff of this tree against the baseline, carried): the baseline's CLI is
  # built beside the accuracy run, then `tileattn bench --backend cuda --dtype f32` of the
  # baseline and of this tree with --f32-via-bf16 alternate F32_ROUNDS times (the opt-in's
  # speed against the baseline's f32 path, same card, same treatment).
  if [[ -n ${F32_BASE_PATCH:-} ]]; then
    rm -rf /tmp/f32-base
    (baseline_copy /tmp/f32-base 0 "$F32_BASE_PATCH" && cd /tmp/f32-base &&
      cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEATTN_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="80;90a-real" -DTILEATTN_BUILD_TESTS=OFF \
        -DTILEATTN_BUILD_BENCHMARKS=OFF -DCMAKE_PREFIX_PATH="$ROOT/.gpu-deps/cli11" \
        >/tmp/f32-base.log 2>&1 &&
      cmake --build build -j "$JOBS" --target tileattn_cli >>/tmp/f32-base.log 2>&1) &
    base_pid=$!
  fi
  python3 scripts/gpu/f32_accuracy.py --build "$BUILD" --dims "${F32_DIMS:-64,128}" \
    --lengths "${F32_LENGTHS:-1024,4096}" --json "$OUT/f32.json" 2>&1 | tee -a "$SUMMARY" ||
    status=1
  if [[ -n ${F32_BASE_PATCH:-} ]]; then
    if wait "$base_pid"; then
      note "-- f32: baseline built ($(($(date +%s) - start)) s); base = baseline f32, new = --f32-via-bf16"
      for round in $(seq "${F32_ROUNDS:-3}"); do
        for D in ${F32_DIMS//,/ }; do
          for L in ${F32_LENGTHS//,/ }; do
            for causal in none top-left; do
              shape=(--backend cuda --dtype f32 --batch 2 --heads 8 --lq "$L" --dim "$D"
                     --causal "$causal" --backward --iters 20 --warmup 5 --seed 1 --json)
              b=$(/tmp/f32-base/build/tools/tileattn bench "${shape[@]}")
              n=$("$BUILD/tools/tileattn" bench "${shape[@]}" --f32-via-bf16)
              python3 - "$b" "$n" "$round" <<'PY' | tee -a "$SUMMARY"
import json, sys
b, n = (json.loads(x) for x in sys.argv[1:3])
f, w = "flash_median_s", "backward_median_s"
print(f"   round {sys.argv[3]} D {b['dim']} L {b['lq']} causal {b['causal']}: "
      f"fwd base {b[f] * 1e3:.3f} new {n[f] * 1e3:.3f} ms (new/base {n[f] / b[f]:.3f}); "
      f"bwd base {b[w] * 1e3:.3f} new {n[w] * 1e3:.3f} ms (new/base {n[w] / b[w]:.3f})")
PY
            done
          done
        done
      done
    else
      note "-- f32: baseline build failed"; tail -20 /tmp/f32-base.log | tee -a "$SUMMARY"; status=1
    fi
  fi
  note "   ($(($(date +%s) - start)) s)"
fi
if has_stage ncu_bwd; then  # Nsight Compute on the backward kernels: tileattn's and PyTorch FA2's
  stage_mark ncu_bwd
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  sections=(--section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats
            --section SchedulerStats --section InstructionStats --section SourceCounters
            --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
            --metrics sass__inst_executed_per_opcode --print-metric-instances values)
  # (sass__inst_executed_per_opcode: executed instructions by opcode, largest first; ncu prints
  # no opcode names, ncu_src names them for tileattn's kernel)
  # NCU_BWD_LENGTHS (a list, e.g. "8192 16384") profiles tileattn's kernel at each length;
  # NCU_BWD_ENV="VAR=value" profiles it once more per length under that setting;
  # NCU_BWD_TORCH=0 skips FA2's kernel.
  D=${NCU_BWD_DIM:-128} L=${NCU_BWD_LENGTH:-8192} C=${NCU_BWD_CAUSAL:-0}
  : >"$OUT/ncu_bwd.txt"
  for len in ${NCU_BWD_LENGTHS:-$L}; do
    for setting in "TILEATTN_NCU_SIDE=base" ${NCU_BWD_ENV:+"$NCU_BWD_ENV"}; do
      echo "==== tileattn L=$len causal=$C $setting" >>"$OUT/ncu_bwd.txt"
      # shellcheck disable=SC2086  # a setting may hold several VAR=value words
      env $setting timeout 200 "$NCU" --kernel-name regex:"flash_bwd_(sm90_|2d_)?kernel" \
        --launch-count 1 "${sections[@]}" \
        "$BUILD/bench/gpu/tileattn_gpu_bench" --backward 1 --dims "$D" --lengths "$len" \
        --causal "$C" --iters 1 --warmup 0 >>"$OUT/ncu_bwd.txt" 2>&1 || note "-- ncu (tileattn) failed"
    done
  done
  [[ ${NCU_BWD_TORCH:-1} == 1 ]] &&
    { timeout 200 "$NCU" --kernel-name regex:flash_bwd_dq_dk_dv --launch-count 1 "${sections[@]}" \
      python3 bench/gpu/bench_torch.py --backward 1 --dims "$D" --lengths "$L" --causal "$C" --iters 1 \
      --warmup 0 >>"$OUT/ncu_bwd.txt" 2>&1 || note "-- ncu (torch) failed"; }
  # cuDNN's backward: every kernel of one backward call whose name is not PyTorch's own.
  timeout 200 "$NCU" --kernel-name regex:'^(?!.*(at::|elementwise|vectorized|reduce)).*$' \
    --launch-skip 0 --launch-count 6 --section SpeedOfLight --section LaunchStats --section Occupancy \
    python3 bench/gpu/bench_torch.py --backward 1 --backends torch_cudnn --dims "$D" --lengths "$L" \
    --causal "$C" --iters 1 --warmup 0 >"$OUT/ncu_bwd_cudnn.txt" 2>&1 || note "-- ncu (cudnn) failed"
  grep -E "^  [A-Za-z_].*Context|Duration|Registers Per|Block Size|Grid Size|Shared Memory Config|Dynamic Shared" \
    "$OUT/ncu_bwd_cudnn.txt" | tee -a "$SUMMARY"
  grep -A2 -E "sass__inst_executed_per_opcode" "$OUT/ncu_bwd.txt" | tee -a "$SUMMARY"
  grep -E "^====|^  [a-z_]+.*Context|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Executed Ipc A" \
    "$OUT/ncu_bwd.txt" | tee -a "$SUMMARY"
fi
if has_stage bwd_parts; then  # per-kernel durations of backward calls (ncu): tileattn's and cuDNN's
  stage_mark bwd_parts
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  : >"$OUT/bwd_parts.txt"
  for D in ${BWD_PARTS_DIMS:-64 128}; do
    for L in ${BWD_PARTS_LENGTHS:-2048 16384}; do
      for who in tileattn cudnn; do
        if [[ $who == tileattn ]]; then
          cmd=("$BUILD/bench/gpu/tileattn_gpu_bench" --backward 1 --dims "$D" --lengths "$L")
        else
          cmd=(python3 bench/gpu/bench_torch.py --backward 1 --backends torch_cudnn --dims "$D" --lengths "$L")
        fi
        timeout 120 "$NCU" --metrics gpu__time_duration.sum --csv "${cmd[@]}" --iters 1 --warmup 0 \
          --cooldown-ms 0 >/tmp/parts.csv 2>/tmp/parts.err || { note "-- bwd_parts: $who D $D L $L failed"; tail -3 /tmp/parts.err; }
        python3 - "$who D $D L $L" /tmp/parts.csv <<'PY' | tee -a "$OUT/bwd_parts.txt" "$SUMMARY"
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[2]) if l.startswith('"'))]
if not rows: sys.exit(print(sys.argv[1], ": no kernels"))
head = rows[0]; name, value = head.index("Kernel Name"), head.index("Metric Value")
print("--", sys.argv[1], "(ns, in launch order; ncu clocks)")
for r in rows[1:]:
    if "at::" in r[name]:  # PyTorch's own kernels (input generation)
        continue
    print(f"   {float(r[value].replace(',', '')):>12.0f}  {r[name][:110]}")
PY
      done
    done
  done
fi
if has_stage ncu_src; then  # per-SASS-instruction stall samples of one kernel, and its SASS:
  stage_mark ncu_src
  # NCU_SRC=bwd (default) the sm90 backward, NCU_SRC=fwd the sm90 forward (first launch:
  # non-causal), NCU_SRC=bwd_sm80 the sm80 backward (run with TILEATTN_CUDA_DISABLE_SM90=1).
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  D=${NCU_BWD_DIM:-128} L=${NCU_BWD_LENGTH:-8192} C=${NCU_BWD_CAUSAL:-0} dir=${NCU_SRC:-bwd}
  case $dir in
    fwd) kernel=flash_fwd_sm90_kernel bwd_flag=0 obj=sm90/flash_fwd_sm90_hdim$D.cu.o ;;
    bwd_sm80)
      kernel="flash_bwd_(2d_)?kernel" bwd_flag=1 obj=sm80/flash_bwd_hdim$D.cu.o
      export TILEATTN_CUDA_DISABLE_SM90=1 ;;
    *) kernel=flash_bwd_sm90_kernel bwd_flag=1 obj=sm90/flash_bwd_sm90_hdim$D.cu.o ;;
  esac
  timeout 200 "$NCU" --kernel-name regex:"$kernel" --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section LaunchStats --print-details all \
    "$BUILD/bench/gpu/tileattn_gpu_bench" --backward "$bwd_flag" --dims "$D" --lengths "$L" \
    --causal "$C" --iters 1 --warmup 0 >"$OUT/ncu_stalls.txt" 2>&1 || note "-- ncu_src (details) failed"
  timeout 200 "$NCU" --kernel-name regex:"$kernel" --launch-count 1 --section SourceCounters \
    --section WarpStateStats --page source --print-source sass --csv "$BUILD/bench/gpu/tileattn_gpu_bench" \
    --backward "$bwd_flag" --dims "$D" --lengths "$L" --causal "$C" --iters 1 --warmup 0 \
    >/tmp/ncu_src.csv 2>&1 ||
    note "-- ncu_src failed"
  gzip -c /tmp/ncu_src.csv >"$OUT/ncu_src.csv.gz"
  cuobjdump --dump-sass --gpu-architecture sm_90a "$BUILD/src/CMakeFiles/tileattn.dir/cuda/$obj" |
    gzip -c >"$OUT/${dir}.sass.gz"
fi
stage_mark end
kill "$MONITOR" 2>/dev/null; wait "$MONITOR" 2>/dev/null
cat /tmp/clocks.csv /tmp/clock_marks.csv >/tmp/clocks_all.csv
gzip -c /tmp/clocks_all.csv >"$OUT/clocks.csv.gz"
# Per stage; per shape the benchmarks record the clock themselves (NVML, sm_mhz in their JSON).
python3 scripts/gpu/clocks_summary.py /tmp/clocks_all.csv | tee -a "$SUMMARY"
note "== done, status $status"
exit $status
