"""Per-call cost of the drop-in SDPA against PyTorch's own, on tiny shapes (issue: the Python
layer's overhead). Medians over interleaved rounds, so that both sides see the same machine.

    python python/bench/overhead.py                 # CPU, B 1, H 8, L 64, D 64, f32
    python python/bench/overhead.py --device cuda   # also the host time a decode call adds

On the CPU it prints the median time per call of torch's SDPA, tileattn.torch's SDPA (eager, the
custom operator with autograd) and the plain tileattn.attention call on the same tensors. On CUDA
(decode-sized: Lq 1) it also prints, for each side, the host time per call (a short burst from an
idle GPU, so the host never waits) beside the GPU time per call (CUDA events over a long run).
"""

import argparse
import json
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

import tileattn
import tileattn.torch as tt


def per_call(fn, calls: int, sync) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--lq", type=int, default=None, help="default 64 (CPU), 1 (CUDA)")
    parser.add_argument("--lk", type=int, default=None, help="default 64 (CPU), 4096 (CUDA)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--dtype", default=None, help="default float32 (CPU), bfloat16 (CUDA)")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--burst", type=int, default=100, help="CUDA: calls per host-time burst")
    parser.add_argument("--cli", default=None,
                        help="CUDA: the tileattn tool, to time the C++ library's own enqueue "
                             "(tileattn bench --enqueue-burst) on the same shape")
    a = parser.parse_args()
    cuda = a.device.startswith("cuda")
    lq = a.lq or (1 if cuda else 64)
    lk = a.lk or (4096 if cuda else 64)
    dtype = getattr(torch, a.dtype or ("bfloat16" if cuda else "float32"))
    torch.manual_seed(0)
    q = torch.randn(a.batch, a.heads, lq, a.dim, device=a.device, dtype=dtype)
    k = torch.randn(a.batch, a.heads, lk, a.dim, device=a.device, dtype=dtype)
    v = torch.randn(a.batch, a.heads, lk, a.dim, device=a.device, dtype=dtype)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    sides = {
        "torch SDPA": lambda: F.scaled_dot_product_attention(q, k, v),
        "tileattn.torch SDPA": lambda: tt.scaled_dot_product_attention(q, k, v),
        "tileattn.attention": lambda: tileattn.attention(q, k, v, layout="bhsd"),
    }
    for fn in sides.values():  # warm-up (and the first call's one-time costs)
        per_call(fn, 50, sync)
    times = {name: [] for name in sides}
    for _ in range(a.rounds):
        for name, fn in sides.items():
            times[name].append(per_call(fn, a.calls, sync))
    print(f"{a.device} B {a.batch} H {a.heads} Lq {lq} Lk {lk} D {a.dim} {dtype}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    base = statistics.median(times["torch SDPA"])
    for name, t in times.items():
        m = statistics.median(t)
        print(f"  {name:22s} {m * 1e6:8.1f} us per call ({m / base:.2f}x torch SDPA)")

    library_us = None
    if cuda and a.cli:  # the C++ library's own host time for the same call (BSHD, same sizes)
        cmd = [a.cli, "bench", "--backend", "cuda", "--dtype", a.dtype or "bf16",
               "--out-dtype", a.dtype or "bf16", "--batch", str(a.batch), "--heads",
               str(a.heads), "--lq", str(lq), "--lk", str(lk), "--dim", str(a.dim),
               "--iters", "20", "--enqueue-burst", str(a.burst), "--json"]
        cmd = [c.replace("bfloat16", "bf16").replace("float16", "f16").replace("float32", "f32")
               for c in cmd]
        result = json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                           text=True).stdout)
        library_us = result["enqueue_host_us"]
        print(f"  C++ attention_forward  host {library_us:6.1f} us per call to enqueue "
              f"(tileattn bench --enqueue-burst {a.burst})")
    if cuda:  # host time per call beside the kernel's
        # Host: a burst of --burst calls from an idle GPU, fewer than the launch queue holds, so
        # that the host never waits for the GPU (a long run would time the GPU instead). GPU: CUDA
        # events over a long run. Medians over --rounds.
        for name, fn in sides.items():
            host, device = [], []
            for _ in range(a.rounds):
                sync()
                host_start = time.perf_counter()
                for _ in range(a.burst):
                    fn()
                host.append((time.perf_counter() - host_start) / a.burst)
                sync()
                start_event = torch.cuda.Event(enable_timing=True)
                end_event = torch.cuda.Event(enable_timing=True)
                start_event.record()
                for _ in range(a.calls):
                    fn()
                end_event.record()
                sync()
                device.append(start_event.elapsed_time(end_event) * 1e-3 / a.calls)
            host_us = statistics.median(host) * 1e6
            print(f"  {name:22s} host {host_us:6.1f} us per call to enqueue,"
                  f" GPU {statistics.median(device) * 1e6:6.1f} us per call", end="")
            print(f", {host_us - library_us:+6.1f} us over the C++ call" if library_us else "")


if __name__ == "__main__":
    main()
