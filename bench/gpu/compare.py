"""Merges bench_flash.cpp's and bench_torch.py's JSON (one run, one GPU) into one table of
TFLOP/s and ratios: tileattn / PyTorch FA2 and tileattn / cuDNN. Prints markdown; --json writes
the merged records. Where the records carry the SM clock sampled during each shape (sm_mhz), a
last column gives it for every tileattn column and cuDNN, in the table's column order."""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json_files", nargs="+", help="tileattn and torch benchmark JSON files")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rows, clocks = {}, {}
    for path in args.json_files:
        try:
            with open(path) as f:
                records = json.load(f)
        except (OSError, ValueError) as e:
            print(f"(could not read {path}: {e})")
            records = []
        for r in records:
            key = (r["D"], r["causal"], r["L"])
            rows.setdefault(key, {})[r["impl"]] = r.get("tflops")
            if r.get("sm_mhz"):
                clocks.setdefault(key, {})[r["impl"]] = r["sm_mhz"]

    def fmt(x):
        return f"{x:7.1f}" if isinstance(x, (int, float)) else "      -"

    def ratio(a, b):
        return f"{a / b:5.2f}x" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "    -"

    # Extra tileattn columns: the sm80 kernel and any scheduling variants (labels tileattn_*).
    extra = sorted({impl for r in rows.values() for impl in r if impl.startswith("tileattn_")})
    clocked = [n for n in ["tileattn"] + extra + ["torch_cudnn"]
               if any(n in c for c in clocks.values())]
    clock_header = f" SM MHz ({' / '.join(clocked)}) |" if clocked else ""
    print("| D | causal | L | tileattn | torch FA2 | torch cuDNN | vs FA2 | vs cuDNN |"
          + "".join(f" {name} |" for name in extra) + clock_header)
    print("|---:|:---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(extra) + ("---:|" if clocked else ""))
    merged = []
    for (D, causal, L) in sorted(rows):
        r = rows[(D, causal, L)]
        t, fa2, cudnn = r.get("tileattn"), r.get("torch_fa2"), r.get("torch_cudnn")
        print(f"| {D} | {'yes' if causal else 'no'} | {L} | {fmt(t)} | {fmt(fa2)} | {fmt(cudnn)} | "
              f"{ratio(t, fa2)} | {ratio(t, cudnn)} |" + "".join(f" {fmt(r.get(n))} |" for n in extra)
              + (" " + " / ".join(f"{clocks.get((D, causal, L), {}).get(n, 0):.0f}" for n in clocked) + " |"
                 if clocked else ""))
        record = {"D": D, "causal": causal, "L": L, "tileattn": t, "torch_fa2": fa2,
                  "torch_cudnn": cudnn}
        record.update({n: r.get(n) for n in extra})
        record.update({f"{n}_sm_mhz": clocks.get((D, causal, L), {}).get(n) for n in clocked})
        merged.append(record)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(merged, f, indent=1)


if __name__ == "__main__":
    main()
