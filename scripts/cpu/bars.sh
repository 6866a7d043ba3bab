#!/usr/bin/env bash
# Measures the CPU bars of docs/perf/cpu.md in one run and prints a Markdown table.
#   scripts/cpu/bars.sh [BUILD_DIR]     (default: build; after `cmake --build --preset default`)
# The flash forward, the naive OpenBLAS baseline and the FMA peak come from
# bench/baselines/tileattn_bench_baselines; the memory bar from the tileattn tool itself.
# Shape: B=1, Hq=16, Lq=Lk=2048, D=128. Every ratio compares figures from this one run.
set -euo pipefail
build=${1:-build}
bench=$build/bench/baselines/tileattn_bench_baselines
tool=$build/tools/tileattn
shape=(--batch 1 --heads 16 --lq 2048 --lk 2048 --dim 128 --iters 7 --warmup 2)
out=$(mktemp -d)

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) threads; $($tool info | head -1)" >&2
"$bench" "${shape[@]}" --dtype f32 --json >"$out/f32.json"
"$bench" "${shape[@]}" --dtype f32 --causal bottom-right --json --peak-seconds 0 >"$out/f32_causal.json"
"$bench" "${shape[@]}" --dtype bf16 --no-baseline --peak-seconds 0 --json >"$out/bf16.json"
"$bench" "${shape[@]}" --dtype f32 --no-baseline --json >"$out/f32_again.json"
/usr/bin/time -v "$tool" bench --batch 1 --heads 8 --lq 32768 --lk 32768 --dim 128 --dtype f32 \
  --iters 1 --warmup 0 --json >"$out/rss.json" 2>"$out/rss.time"

python3 - "$out" <<'PY'
import json, re, sys, pathlib
d = pathlib.Path(sys.argv[1])
load = lambda n: json.loads((d / f"{n}.json").read_text())
f32, causal, bf16, f32b, rss = (load(n) for n in ("f32", "f32_causal", "bf16", "f32_again", "rss"))
max_rss_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", (d / "rss.time").read_text()).group(1))
qkvo = 4 * 1 * 32768 * 8 * 128 * 4
f32_ref = max(f32["flash_gflops"], f32b["flash_gflops"])
# The machine's FMA peak: the larger of the two peak-loop measurements (host noise only lowers
# it), so a depressed peak loop cannot flatter the ratio.
peak = max(f32["peak_gflops"], f32b["peak_gflops"])
rows = [
  ("f32 non-causal: flash / naive OpenBLAS", f"{f32['flash_gflops']:.1f} / {f32['baseline_gflops']:.1f} GFLOP/s", f"{f32['ratio']:.2f}x", ">= 1.25x"),
  ("f32 non-causal: % of FMA peak", f"{f32['flash_gflops']:.1f} / {peak:.1f} GFLOP/s ({f32['peak_isa']}, best of 2 peak loops)", f"{100 * f32['flash_gflops'] / peak:.1f}%", ">= 80%"),
  ("f32 causal (half FLOPs): flash / naive", f"{causal['flash_gflops']:.1f} / {causal['baseline_gflops']:.1f} GFLOP/s", f"{causal['ratio']:.2f}x", ">= 2.2x"),
  ("bf16 / f32 flash", f"{bf16['flash_gflops']:.1f} ({bf16['isa']}) / {f32_ref:.1f} GFLOP/s", f"{bf16['flash_gflops'] / f32_ref:.2f}x", ">= 1.6x"),
  ("peak RSS at L=32768, H=8, D=128 f32", f"{max_rss_kib / 1024:.0f} MiB vs q+k+v+out {qkvo / 2**20:.0f} MiB", f"{max_rss_kib * 1024 / qkvo:.2f}x", "< 1.5x"),
]
print("| bar | figures | measured | required |\n|---|---|---|---|")
for r in rows: print("| " + " | ".join(r) + " |")
PY
rm -rf "$out"
