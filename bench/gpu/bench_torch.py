"""PyTorch SDPA on the same grid as bench_flash.cpp: bf16, BSHD storage seen as [B, H, L, D],
FlashAttention-2 and cuDNN back ends, median of --iters runs timed with CUDA events after
--warmup runs. Writes one JSON record per (backend, shape). --backward times the backward pass
(torch.autograd.grad of one forward's output, graph kept) with 2.5x the forward FLOPs."""
import argparse
import json
import time
import statistics

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

from clock_sampler import ClockSampler

TOKENS, CHANNELS = 16384, 2048


def time_ms(fn, iters, warmup, sampler, cooldown_ms=0, sustain_ms=0):
    time.sleep(cooldown_ms / 1000.0)  # as bench_flash.cpp: the same state before every shape
    t0 = time.time()
    for _ in range(warmup):
        fn()
    while time.time() - t0 < sustain_ms / 1000.0:
        for _ in range(4):
            fn()
        torch.cuda.synchronize()
    sampler.start()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    clocks = sampler.stop()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)), clocks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--lengths", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", default="")
    ap.add_argument("--cooldown-ms", type=int, default=500)
    ap.add_argument("--sustain-ms", type=int, default=0)
    ap.add_argument("--backward", type=int, default=0)
    ap.add_argument("--backends", default="torch_fa2,torch_cudnn")
    ap.add_argument("--causal", default="both", choices=["0", "1", "both"])
    args = ap.parse_args()
    dims = [int(x) for x in args.dims.split(",")]
    lengths = [int(x) for x in args.lengths.split(",")]
    backends = {"torch_fa2": SDPBackend.FLASH_ATTENTION, "torch_cudnn": SDPBackend.CUDNN_ATTENTION}
    backends = {name: backends[name] for name in args.backends.split(",")}
    print(f"torch {torch.__version__}, cuda {torch.version.cuda}, cudnn {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}")
    sampler = ClockSampler(uuid="GPU-" + str(getattr(torch.cuda.get_device_properties(0), "uuid", "")))
    records = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for D in dims:
        H = CHANNELS // D
        base = [torch.randn(TOKENS * CHANNELS, device="cuda", dtype=torch.bfloat16, generator=gen)
                for _ in range(3)]
        for causal in {"0": (False,), "1": (True,), "both": (False, True)}[args.causal]:
            for L in lengths:
                B = TOKENS // L
                q, k, v = (t.view(B, L, H, D).transpose(1, 2) for t in base)  # [B, H, L, D] views
                flops = 4.0 * B * H * L * L * D / (2.0 if causal else 1.0)
                if args.backward:
                    flops *= 2.5
                    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
                    dout = torch.randn_like(q)
                for name, backend in backends.items():
                    rec = {"impl": name, "D": D, "causal": causal, "L": L, "B": B, "H": H,
                           "pass": "backward" if args.backward else "forward"}
                    try:
                        with sdpa_kernel(backend):
                            if args.backward:
                                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                                fn = lambda: torch.autograd.grad(out, (q, k, v), dout,
                                                                 retain_graph=True)
                            else:
                                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            ms, clocks = time_ms(fn, args.iters, args.warmup, sampler,
                                                 args.cooldown_ms, args.sustain_ms)
                        rec.update(ms=ms, tflops=flops / (ms * 1e-3) / 1e12)
                        rec.update(clocks)
                    except Exception as e:  # a back end that refuses a shape is recorded, not fatal
                        rec.update(error=str(e).splitlines()[0][:200])
                    records.append(rec)
                    print(json.dumps(rec), flush=True)
        del base
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
