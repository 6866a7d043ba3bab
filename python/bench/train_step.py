"""Training speed through PyTorch: forward + backward of tileattn.torch's SDPA drop-in inside a
``torch.compile``d step, beside the same library's C++ benchmark (``tileattn bench``) on the
same shapes (issue: the Python layer's training speed).

    python python/bench/train_step.py --cli build/tools/tileattn

Shapes: bf16, D 128, 16k tokens per call (B = 16384 / L, H 16), L in --lengths, causal or not.
The step runs the compiled forward out = sdpa(q, k, v) and its compiled backward for a fixed
dout (torch.autograd.grad, so nothing accumulates into .grad). Times are CUDA-event medians of
--rounds rounds of --calls steps each; the CLI's forward and backward medians are added. The
two sides alternate shape by shape, CLI first, both back to back at steady state (no idle gap).
TFLOP/s count the forward's 4 B H L^2 D FLOPs (halved for causal) times 3.5 (forward +
backward), the C++ benchmark's convention.
"""

import argparse
import json
import statistics
import subprocess

import torch

import tileattn.torch as tt


def flops(batch: int, heads: int, length: int, dim: int, causal: bool) -> float:
    forward = 4.0 * batch * heads * length * length * dim
    return 3.5 * (forward / 2 if causal else forward)


def cli_seconds(cli: str, batch: int, heads: int, length: int, dim: int, causal: bool,
                iters: int) -> float:
    """Forward + backward median seconds per call from ``tileattn bench --backward --json``."""
    # bf16 out and dout, as in the PyTorch step (an f32 dout takes another backward kernel).
    cmd = [cli, "bench", "--backend", "cuda", "--dtype", "bf16", "--out-dtype", "bf16",
           "--batch", str(batch),
           "--heads", str(heads), "--lq", str(length), "--dim", str(dim), "--backward",
           "--iters", str(iters), "--warmup", "3",
           "--json", "--causal", "top-left" if causal else "none"]
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return result["flash_median_s"] + result["backward_median_s"]


def compiled_seconds(batch: int, heads: int, length: int, dim: int, causal: bool, calls: int,
                     rounds: int, profile: bool = False) -> float:
    """Median seconds per compiled forward + backward step through the drop-in."""
    # BSHD memory seen as SDPA's (B, H, L, D), as the C++ benchmark's tensors are laid out.
    shape = (batch, length, heads, dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
               .requires_grad_() for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16).transpose(1, 2)

    # The forward is compiled (AOTAutograd compiles its backward too); the gradients are taken
    # outside, since dynamo cannot trace torch.autograd.grad.
    forward = torch.compile(fullgraph=True)(
        lambda q, k, v: tt.scaled_dot_product_attention(q, k, v, is_causal=causal))

    def step(q, k, v, dout):
        return torch.autograd.grad(forward(q, k, v), (q, k, v), dout)

    for _ in range(3):  # compile, then warm up
        step(q, k, v, dout)
    torch.cuda.synchronize()
    if profile:  # every GPU kernel of `calls` steps, by total time
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                step(q, k, v, dout)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12,
                                        max_name_column_width=70))
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            step(q, k, v, dout)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True, help="the tileattn command-line tool (CUDA build)")
    parser.add_argument("--lengths", default="4096,8192,16384")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", action="store_true",
                        help="also print the compiled step's GPU kernels (torch.profiler)")
    a = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| L | causal | C++ bench fwd+bwd ms | compiled step ms | C++ TFLOP/s | step TFLOP/s |"
          " step / C++ time |")
    print("|---:|:---:|---:|---:|---:|---:|---:|")
    for length in (int(x) for x in a.lengths.split(",")):
        batch = max(1, a.tokens // length)
        for causal in (False, True):
            cli = cli_seconds(a.cli, batch, a.heads, length, a.dim, causal, a.rounds * a.calls)
            step = compiled_seconds(batch, a.heads, length, a.dim, causal, a.calls, a.rounds,
                                    a.profile)
            work = flops(batch, a.heads, length, a.dim, causal)
            print(f"| {length} | {'yes' if causal else 'no'} | {cli * 1e3:.3f} | {step * 1e3:.3f}"
                  f" | {work / cli / 1e12:.1f} | {work / step / 1e12:.1f} | {step / cli:.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
