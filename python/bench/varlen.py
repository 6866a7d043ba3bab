"""Packed variable-length batches on the GPU (issue: varlen): tileattn's varlen forward (and
forward + backward where the CUDA backend has it) against the same library's dense kernel on an
equal-length batch of the same total, and against PyTorch's SDPA on the same batch as a nested
(jagged) tensor, whose fastest back end PyTorch picks itself. Same process, same card.

    python python/bench/varlen.py [--tokens 65536 --lo 128 --hi 8192 --causal]

Lengths are drawn uniformly from [lo, hi] (seed --seed) until the total would pass --tokens;
the last sequence takes what is left (if that is below lo it joins the one before). FLOPs are
counted per sequence: 4 H D sum(L_i^2), halved for causal (top-left within a sequence, which
equals bottom-right for Lq = Lk), times 3.5 for forward + backward. The dense side is B x L with
L = --dense-length and B = tokens / L. Times are CUDA-event medians of --rounds rounds of
--calls calls; the sides alternate round by round, back to back (no idle gap), with a 256 MB
buffer written between rounds so that no round starts with the inputs in L2.
"""

import argparse
import random
import statistics

import torch
import torch.nn.functional as F

import tileattn
import tileattn.torch as tt


def draw_lengths(tokens: int, lo: int, hi: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    lengths: list[int] = []
    left = tokens
    while left > 0:
        n = min(rng.randint(lo, hi), left)
        if n < lo and lengths:
            lengths[-1] += n
        else:
            lengths.append(n)
        left -= n
    return lengths


def flops(lengths: list[int], heads: int, dim: int, causal: bool, backward: bool) -> float:
    forward = sum(4.0 * heads * dim * n * n for n in lengths)
    forward = forward / 2 if causal else forward
    return forward * (3.5 if backward else 1.0)


def timed(fn, calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--lo", type=int, default=128)
    ap.add_argument("--hi", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dense-length", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backward", action="store_true", help="forward + backward")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    dt, dev, H, D = torch.bfloat16, "cuda", args.heads, args.dim
    lengths = draw_lengths(args.tokens, args.lo, args.hi, args.seed)
    total = sum(lengths)
    cu = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0, dtype=torch.int32).to(dev)
    longest = max(lengths)
    grad = args.backward

    def packed():
        return torch.randn(total, H, D, device=dev, dtype=dt, requires_grad=grad)

    q, k, v = packed(), packed(), packed()
    dout = torch.randn(total, H, D, device=dev, dtype=dt)
    L = args.dense_length
    B = total // L
    dq_, dk_, dv_ = (torch.randn(B, L, H, D, device=dev, dtype=dt, requires_grad=grad)
                     for _ in range(3))
    ddout = torch.randn(B, L, H, D, device=dev, dtype=dt)
    # PyTorch's jagged layout: (B, j, H, D) transposed to SDPA's (B, H, j, D).
    offsets = cu.to(torch.int64)
    nq, nk, nv = (torch.nested.nested_tensor_from_jagged(t.detach().clone().requires_grad_(grad),
                                                         offsets).transpose(1, 2)
                  for t in (q, k, v))
    ndout = torch.nested.nested_tensor_from_jagged(dout, offsets).transpose(1, 2)

    def run_varlen():
        out = tt.flash_attn_varlen_func(q, k, v, cu, cu, longest, longest, causal=args.causal)
        if grad:
            torch.autograd.grad(out, (q, k, v), dout)

    def run_dense():
        out = tt.flash_attn_func(dq_, dk_, dv_, causal=args.causal)
        if grad:
            torch.autograd.grad(out, (dq_, dk_, dv_), ddout)

    def run_nested():
        out = F.scaled_dot_product_attention(nq, nk, nv, is_causal=args.causal)
        if grad:
            torch.autograd.grad(out, (nq, nk, nv), ndout)

    sides = {"tileattn varlen": run_varlen, "tileattn dense": run_dense,
             "torch nested SDPA": run_nested}
    work = {"tileattn varlen": flops(lengths, H, D, args.causal, grad),
            "tileattn dense": flops([L] * B, H, D, args.causal, grad),
            "torch nested SDPA": flops(lengths, H, D, args.causal, grad)}
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    available = {}
    for name, fn in sides.items():
        try:
            fn()
            torch.cuda.synchronize()
            available[name] = fn
        except (RuntimeError, NotImplementedError, tileattn.Error) as e:
            print(f"{name}: not run ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
    times: dict[str, list[float]] = {name: [] for name in available}
    for _ in range(args.rounds):
        for name, fn in available.items():
            flush.fill_(1)
            times[name].append(timed(fn, args.calls))
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, bf16, H {H}, "
          f"D {D}, {'causal' if args.causal else 'non-causal'}, "
          f"{'forward + backward' if grad else 'forward'}")
    print(f"varlen: {len(lengths)} sequences, {total} tokens, lengths uniform in "
          f"[{args.lo}, {args.hi}] (seed {args.seed}), longest {longest}; dense: B {B} x L {L}")
    tflops = {}
    for name in available:
        t = statistics.median(times[name])
        tflops[name] = work[name] / t / 1e12
        print(f"  {name:18s} {t * 1e3:8.3f} ms  {tflops[name]:7.1f} TFLOP/s")
    if "tileattn varlen" in tflops:
        for other in ("tileattn dense", "torch nested SDPA"):
            if other in tflops:
                print(f"  varlen / {other}: {tflops['tileattn varlen'] / tflops[other]:.3f}")


if __name__ == "__main__":
    main()
