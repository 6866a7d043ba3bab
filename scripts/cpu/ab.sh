#!/usr/bin/env bash
# A/B of two tileattn binaries on a noisy host: the runs alternate (A, B, A, B, ...) so that both
# see the same load, and the best and the median GFLOP/s of each are printed.
#   scripts/cpu/ab.sh A_BINARY B_BINARY [ROUNDS] [-- bench options]
# Default shape: single thread, B=1, H=4, L=2048, D=128, f32 (the per-core kernel rate).
# AB_METRIC picks the figure from the bench JSON (default flash_gflops; with --backward in the
# bench options, backward_gflops).
set -euo pipefail
a=$1 b=$2 rounds=8
shift 2
if [ $# -gt 0 ] && [ "$1" != "--" ]; then rounds=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then shift; fi
opts=("$@")
[ ${#opts[@]} -eq 0 ] && opts=(--batch 1 --heads 4 --lq 2048 --dim 128 --threads 1)
run() { "$1" bench "${opts[@]}" --iters 3 --warmup 1 --json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "${AB_METRIC:-flash_gflops}"; }
fa=() fb=()
for ((i = 0; i < rounds; ++i)); do fa+=("$(run "$a")"); fb+=("$(run "$b")"); done
python3 - "${fa[*]}" "${fb[*]}" <<'PY'
import statistics, sys
a, b = ([float(x) for x in s.split()] for s in sys.argv[1:3])
for name, v in (("A", a), ("B", b)):
    print(f"{name}: best {max(v):7.1f}  median {statistics.median(v):7.1f}  GFLOP/s  ({' '.join(f'{x:.1f}' for x in v)})")
print(f"B/A: best {max(b) / max(a):.3f}  median {statistics.median(b) / statistics.median(a):.3f}")
PY
