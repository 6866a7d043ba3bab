"""Decode over a KV cache on the GPU (issue: KV cache + decode): tileattn's
flash_attn_with_kvcache against PyTorch's SDPA with the cuDNN and the FlashAttention-2 back ends
on the same shapes, and a device-to-device copy of the same bytes, in the same process on the
same card.

    python python/bench/decode.py [--batches 1,8,64 --lengths 1024,...,131072 --lq 1]

Shape: bf16, Hq 32, Hkv 8, D 128 (options). tileattn reads a contiguous [B, Lk, Hkv, D] cache
(FlashAttention's layout) or, with --block-sizes, a paged one with a shuffled block table;
PyTorch gets [B, Hkv, Lk, D] tensors (its preferred layout) with enable_gqa=True, or, for a back
end that refuses GQA, K and V repeated to Hq heads (said in the output: it then reads 4x the
bytes). Effective bandwidth = bytes of K and V of the cache / time, for every side (a repeated
K/V is still credited with the cache's bytes). The copy's bandwidth counts read + write bytes.

Timing: every call is timed alone with CUDA events after a 256 MB buffer write has pushed the
cache out of L2 (the caller's cache is cold in serving: other layers' caches ran in between);
sides alternate call by call, back to back (no idle gap); medians of --calls calls. Each side
is captured once into a CUDA graph and the graph replayed (--mode graph, the default: how
serving runs decode steps, and what times the GPU work rather than the Python call's host
time), or called from Python (--mode eager: a side whose host time exceeds the flush's GPU time
is timed with the excess). The host time of one eager call of each side (microseconds, B 1 and
the shortest length, 200 calls back to back) is printed first.
"""

import argparse
import random
import statistics
import time

import torch
import torch.nn.functional as F

import tileattn.torch as tt


def timed_cold(fn, flush: torch.Tensor) -> float:
    flush.fill_(1.0)  # evicts the inputs from L2
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def host_us(fn, calls: int = 200) -> float:
    """Microseconds of host time per call: GPU work this small finishes before the next launch."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def kernel_times(fn, flush: torch.Tensor, calls: int = 10) -> str:
    """The GPU kernels of one cold call of fn and their mean durations (torch profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.fill_(1.0)
            fn()
        torch.cuda.synchronize()
    parts = []
    for e in prof.key_averages():
        if e.count < calls or "fill" in e.key or "elementwise" in e.key.lower():
            continue  # the flush
        us = e.device_time_total / e.count
        parts.append(f"{e.key[:40]} {us:.1f} us x{e.count // calls}")
    return "; ".join(parts)


def as_graph(fn):
    """fn captured into a CUDA graph (after a warm-up call); returns its replay."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()

    def replay(fn=fn):  # fn holds the tensors the graph reads (a paged side's pages and table)
        graph.replay()

    return replay


def paged(k: torch.Tensor, v: torch.Tensor, block: int, seed: int):
    """The cache [B, L, H, D] as shuffled pages [num_blocks, block, H, D] and a block table."""
    batch, length, heads, dim = k.shape
    per_seq = (length + block - 1) // block
    order = list(range(batch * per_seq))
    random.Random(seed).shuffle(order)
    table = torch.tensor(order, dtype=torch.int32, device=k.device).view(batch, per_seq)
    pad = per_seq * block - length

    def pages(x: torch.Tensor) -> torch.Tensor:
        x = F.pad(x, (0, 0, 0, 0, 0, pad)).view(batch * per_seq, block, heads, x.shape[-1])
        out = torch.empty_like(x)
        out[table.view(-1).long()] = x
        return out

    return pages(k), pages(v), table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--lengths", default="1024,4096,16384,32768,131072")
    ap.add_argument("--lq", type=int, default=1)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--block-sizes", default="", help="also time paged caches, e.g. 16,256")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--max-gib", type=float, default=9.0, help="skip shapes whose K+V exceed it")
    ap.add_argument("--torch", default="cudnn,flash", help="PyTorch back ends to time")
    ap.add_argument("--mode", choices=["graph", "eager"], default="graph")
    ap.add_argument("--splits", default="",
                    help="also time tileattn with these num_splits, e.g. 1,4,16 (the library's "
                         "choice is the tileattn column)")
    ap.add_argument("--head-major", action="store_true",
                    help="also time tileattn on a head-major cache ([B, Hkv, Lk, D] memory seen "
                         "as [B, Lk, Hkv, D]: each head's keys contiguous, PyTorch's layout)")
    ap.add_argument("--kernels", action="store_true",
                    help="also print each side's GPU kernels and their mean durations (torch "
                         "profiler, cold calls)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    dtype = torch.bfloat16
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"bf16 Hq {args.heads} Hkv {args.kv_heads} D {args.dim} Lq {args.lq}; GB/s = K+V bytes "
          f"/ time (copy: read + write); median of {args.calls} cold calls, sides alternating, "
          f"{args.mode} mode")
    backends = {
        "cudnn": torch.nn.attention.SDPBackend.CUDNN_ATTENTION,
        "flash": torch.nn.attention.SDPBackend.FLASH_ATTENTION,
    }
    blocks = [int(x) for x in args.block_sizes.split(",") if x]
    splits = [int(x) for x in args.splits.split(",") if x]
    header = ["B", "Lk", "tileattn"] + [f"splits{n}" for n in splits] + \
        (["head-major"] if args.head_major else []) + \
        [f"paged{b}" for b in blocks] + \
        [f"torch-{n}" for n in args.torch.split(",") if n] + ["copy", "ta/copy", "ta/best-torch"]
    print(" | ".join(header))
    printed_host = False
    for batch in [int(x) for x in args.batches.split(",")]:
        for length in [int(x) for x in args.lengths.split(",")]:
            kv_bytes = 2 * batch * length * args.kv_heads * args.dim * 2
            if kv_bytes > args.max_gib * 2**30:
                continue
            torch.manual_seed(0)
            q = torch.randn(batch, args.lq, args.heads, args.dim, device=dev, dtype=dtype)
            k = torch.randn(batch, length, args.kv_heads, args.dim, device=dev, dtype=dtype)
            v = torch.randn_like(k)
            seqlens = torch.full((batch,), length, dtype=torch.int32, device=dev)
            sides = {"tileattn": lambda: tt.flash_attn_with_kvcache(
                q, k, v, cache_seqlens=seqlens, causal=True)}
            for n in splits:
                sides[f"splits{n}"] = (lambda n=n: tt.flash_attn_with_kvcache(
                    q, k, v, cache_seqlens=seqlens, causal=True, num_splits=n))
            for block in blocks:
                pk, pv, table = paged(k, v, block, seed=block)
                sides[f"paged{block}"] = (lambda pk=pk, pv=pv, table=table:
                                          tt.flash_attn_with_kvcache(
                                              q, pk, pv, cache_seqlens=seqlens,
                                              block_table=table, causal=True))
            qt = q.transpose(1, 2)
            kt, vt = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
            if args.head_major:
                sides["head-major"] = lambda: tt.flash_attn_with_kvcache(
                    q, kt.transpose(1, 2), vt.transpose(1, 2), cache_seqlens=seqlens, causal=True)
            notes = []
            for name in [n for n in args.torch.split(",") if n]:
                def sdpa(name=name, expand=False):
                    with torch.nn.attention.sdpa_kernel(backends[name]):
                        if expand:
                            rep = args.heads // args.kv_heads
                            return F.scaled_dot_product_attention(
                                qt, kt.repeat_interleave(rep, 1), vt.repeat_interleave(rep, 1),
                                is_causal=False)
                        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=False,
                                                              enable_gqa=True)
                try:
                    sdpa()
                    sides[f"torch-{name}"] = sdpa
                except RuntimeError:
                    try:
                        sdpa(expand=True)
                        sides[f"torch-{name}"] = lambda sdpa=sdpa: sdpa(expand=True)
                        notes.append(f"torch-{name}: K/V repeated to Hq heads (no GQA)")
                    except RuntimeError as e:
                        notes.append(f"torch-{name}: refused ({str(e).splitlines()[0][:80]})")
            src = torch.empty(kv_bytes // 2, dtype=dtype, device=dev)
            dst = torch.empty_like(src)
            sides["copy"] = lambda: dst.copy_(src)
            for fn in sides.values():  # warm-up (and lazy initialisation)
                fn()
            if not printed_host:
                print("host us per eager call: " + ", ".join(
                    f"{name} {host_us(fn):.1f}" for name, fn in sides.items()), flush=True)
                printed_host = True
            if args.mode == "graph":
                for name in list(sides):
                    try:
                        sides[name] = as_graph(sides[name])
                    except RuntimeError as e:
                        notes.append(f"{name}: eager (capture failed: {str(e).splitlines()[0][:60]})")
            times = {name: [] for name in sides}
            for _ in range(args.calls):
                for name, fn in sides.items():
                    times[name].append(timed_cold(fn, flush))
            gbps = {}
            for name, ts in times.items():
                t = statistics.median(ts)
                gbps[name] = (2 * kv_bytes if name == "copy" else kv_bytes) / t / 1e9
            torch_best = max([gbps[n] for n in gbps if n.startswith("torch-")], default=float("nan"))
            row = [str(batch), str(length)] + [f"{gbps[n]:.0f}" if n in gbps else "-"
                                               for n in header[2:-2]]
            row += [f"{gbps['tileattn'] / gbps['copy']:.3f}", f"{gbps['tileattn'] / torch_best:.3f}"]
            print(" | ".join(row) + ("   # " + "; ".join(notes) if notes else ""), flush=True)
            if args.kernels:
                for name, fn in sides.items():
                    if name != "copy":
                        print(f"   {name}: {kernel_times(fn, flush)}", flush=True)
            del q, k, v, src, dst, sides, times


if __name__ == "__main__":
    main()
