#!/usr/bin/env python3
"""f32 storage on CUDA: accuracy and speed of tileattn's f32 path, its bf16 opt-in
(Context::cuda_f32_via_bf16) and PyTorch's f32 scaled_dot_product_attention, on one card.

Accuracy: against a float64 reference computed on the GPU (PyTorch math in float64, autograd for
the gradients), forward (out) and backward (dq, dk, dv): max |err| / max |ref|, mean |err| / mean
|ref| and the relative L2 error. The bar (issue 43, item 6): ours within 2x PyTorch's f32 error.
Speed: forward and backward of each, back to back at steady state (warm-up, then one event pair
around --iters calls), in ms and TFLOP/s.

Run on the GPU machine after `bash scripts/gpu/check.sh build` (BUILD_DIR: build-gpu):
    python3 scripts/gpu/f32_accuracy.py [--dims 64,128] [--lengths 1024] [--json out.json]
It builds scripts/gpu/f32_shim.cpp (a C entry point over the static library) with g++ and calls
it through ctypes on PyTorch's device tensors.
"""
import argparse
import ctypes
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_shim(build_dir, path):
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cmd = ["g++", "-O2", "-std=c++20", "-shared", "-fPIC", "-o", path,
           os.path.join(ROOT, "scripts/gpu/f32_shim.cpp"), "-I" + os.path.join(ROOT, "include"),
           os.path.join(build_dir, "src/libtileattn.a"), "-L" + os.path.join(cuda, "lib64"),
           "-lcudart", "-fopenmp", "-Wl,-rpath," + os.path.join(cuda, "lib64")]
    subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(path)
    lib.tileattn_f32_call.restype = ctypes.c_int
    lib.tileattn_f32_call.argtypes = [ctypes.c_int] * 7 + [ctypes.c_void_p] * 10
    return lib


class Tileattn:
    def __init__(self, lib, via_bf16):
        self.lib, self.via_bf16 = lib, via_bf16

    def call(self, backward, causal, q, k, v, out, lse, dout=None, dq=None, dk=None, dv=None):
        B, L, H, D = q.shape
        ptr = lambda t: ctypes.c_void_p(t.data_ptr()) if t is not None else None
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        rc = self.lib.tileattn_f32_call(int(backward), int(self.via_bf16), int(causal), B, L, H, D,
                                        ptr(q), ptr(k), ptr(v), ptr(out), ptr(lse), ptr(dout),
                                        ptr(dq), ptr(dk), ptr(dv), stream)
        if rc != 0:
            raise RuntimeError("tileattn call failed")

    def forward(self, causal, q, k, v):
        B, L, H, D = q.shape
        out = torch.empty_like(q)
        lse = torch.empty(B, H, L, device=q.device, dtype=torch.float32)
        self.call(False, causal, q, k, v, out, lse)
        return out, lse

    def backward(self, causal, q, k, v, out, lse, dout):
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        self.call(True, causal, q, k, v, out, lse, dout, dq, dk, dv)
        return dq, dk, dv


def torch_sdpa(q, k, v, causal):
    """PyTorch f32 SDPA on BSHD tensors (default backends); returns out in BSHD."""
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       is_causal=causal)
    return o.transpose(1, 2)


def reference(q, k, v, dout, causal):
    """float64 math attention and its gradients (BSHD)."""
    q64, k64, v64 = (t.double().transpose(1, 2).detach().requires_grad_(True) for t in (q, k, v))
    s = (q64 @ k64.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        L = s.shape[-1]
        s = s.masked_fill(torch.ones(L, L, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    o = torch.softmax(s, dim=-1) @ v64
    o.backward(dout.double().transpose(1, 2))
    bshd = lambda t: t.transpose(1, 2).contiguous()
    return bshd(o.detach()), bshd(q64.grad), bshd(k64.grad), bshd(v64.grad)


def errors(got, ref):
    err = (got.double() - ref).abs()
    return {"max_rel": (err.max() / ref.abs().max()).item(),
            "mean_rel": (err.mean() / ref.abs().mean()).item(),
            "rel_l2": (err.norm() / ref.norm()).item()}


def timed(fn, iters, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-gpu"))
    ap.add_argument("--shim", default="/tmp/libtileattn_f32_shim.so")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--lengths", default="1024")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    lib = build_shim(args.build, args.shim)
    ours, ours_bf16 = Tileattn(lib, False), Tileattn(lib, True)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"allow_tf32 {torch.backends.cuda.matmul.allow_tf32}")
    records = []
    ok = True
    for L in (int(x) for x in args.lengths.split(",")):
        for D in (int(x) for x in args.dims.split(",")):
            for causal in (False, True):
                torch.manual_seed(args.seed)
                B, H = args.batch, args.heads
                q, k, v, dout = (torch.randn(B, L, H, D, device="cuda") for _ in range(4))
                ref = reference(q, k, v, dout, causal)
                rec = {"B": B, "H": H, "L": L, "D": D, "causal": causal, "errors": {}, "ms": {}}
                # PyTorch f32 SDPA (autograd for the gradients).
                qt, kt, vt = (t.clone().requires_grad_(True) for t in (q, k, v))
                o = torch_sdpa(qt, kt, vt, causal)
                o.backward(dout)
                got = {"torch_f32": (o.detach(), qt.grad, kt.grad, vt.grad)}
                for name, impl in (("tileattn_f32", ours), ("tileattn_via_bf16", ours_bf16)):
                    out, lse = impl.forward(causal, q, k, v)
                    got[name] = (out,) + impl.backward(causal, q, k, v, out, lse, dout)
                for name, tensors in got.items():
                    rec["errors"][name] = {n: errors(t, r) for n, t, r in
                                           zip(("out", "dq", "dk", "dv"), tensors, ref)}
                # Speed, back to back on the same card.
                out, lse = ours.forward(causal, q, k, v)
                out16, lse16 = ours_bf16.forward(causal, q, k, v)
                qt, kt, vt = (t.clone().requires_grad_(True) for t in (q, k, v))
                o = torch_sdpa(qt, kt, vt, causal)
                rec["ms"] = {
                    "tileattn_f32_fwd": timed(lambda: ours.forward(causal, q, k, v), args.iters),
                    "tileattn_via_bf16_fwd":
                        timed(lambda: ours_bf16.forward(causal, q, k, v), args.iters),
                    "torch_f32_fwd": timed(lambda: torch_sdpa(q, k, v, causal), args.iters),
                    "tileattn_f32_bwd":
                        timed(lambda: ours.backward(causal, q, k, v, out, lse, dout), args.iters),
                    "tileattn_via_bf16_bwd": timed(
                        lambda: ours_bf16.backward(causal, q, k, v, out16, lse16, dout),
                        args.iters),
                    "torch_f32_bwd": timed(
                        lambda: torch.autograd.grad(o, (qt, kt, vt), dout, retain_graph=True),
                        args.iters),
                }
                flops = 4.0 * B * H * L * L * D * (0.5 if causal else 1.0)
                print(f"\n== B {B} H {H} L {L} D {D} {'causal' if causal else 'non-causal'}")
                for name, errs in rec["errors"].items():
                    print(f"  {name:18s} " + "  ".join(
                        f"{n}: max {e['max_rel']:.2e} mean {e['mean_rel']:.2e} l2 {e['rel_l2']:.2e}"
                        for n, e in errs.items()))
                for n in ("out", "dq", "dk", "dv"):
                    for metric in ("max_rel", "mean_rel"):
                        mine = rec["errors"]["tileattn_f32"][n][metric]
                        theirs = rec["errors"]["torch_f32"][n][metric]
                        if mine > 2 * theirs:
                            ok = False
                            print(f"  BAR MISSED: {n} {metric}: ours {mine:.2e} > 2 x torch "
                                  f"{theirs:.2e}")
                for name, ms in rec["ms"].items():
                    f = flops * (2.5 if name.endswith("bwd") else 1.0)
                    print(f"  {name:24s} {ms:8.3f} ms  {f / ms / 1e9:7.1f} TFLOP/s")
                records.append(rec)
    print("\nbar (ours within 2x PyTorch f32, max and mean relative error):",
          "met" if ok else "MISSED")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "records": records}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
