"""Merges bench_flash.cpp's and bench_torch.py's JSON (one run, one GPU) into one table of
TFLOP/s and ratios: tileattn / PyTorch FA2 and tileattn / cuDNN. Prints markdown; --json writes
the merged records."""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json_files", nargs="+", help="tileattn and torch benchmark JSON files")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rows = {}
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

    def fmt(x):
        return f"{x:7.1f}" if isinstance(x, (int, float)) else "      -"

    def ratio(a, b):
        return f"{a / b:5.2f}x" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "    -"

    sm80 = any("tileattn_sm80" in r for r in rows.values())
    print("| D | causal | L | tileattn | torch FA2 | torch cuDNN | vs FA2 | vs cuDNN |"
          + (" tileattn sm80 kernel |" if sm80 else ""))
    print("|---:|:---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if sm80 else ""))
    merged = []
    for (D, causal, L) in sorted(rows):
        r = rows[(D, causal, L)]
        t, fa2, cudnn = r.get("tileattn"), r.get("torch_fa2"), r.get("torch_cudnn")
        print(f"| {D} | {'yes' if causal else 'no'} | {L} | {fmt(t)} | {fmt(fa2)} | {fmt(cudnn)} | "
              f"{ratio(t, fa2)} | {ratio(t, cudnn)} |" + (f" {fmt(r.get('tileattn_sm80'))} |" if sm80 else ""))
        merged.append({"D": D, "causal": causal, "L": L, "tileattn": t, "torch_fa2": fa2,
                       "torch_cudnn": cudnn, "tileattn_sm80": r.get("tileattn_sm80")})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(merged, f, indent=1)


if __name__ == "__main__":
    main()
