#!/usr/bin/env python3
"""The MoE layer of bench/kernels/moe_layer_bench.cu in PyTorch, as the peer it is compared with.

Qwen3-30B-A3B shapes (hidden 2048, 128 experts, top-8, expert FFN 768, BF16): router GEMM, softmax, top-k with
renormalisation, sort into expert order, torch._grouped_mm for gate/up and down (int32 cumulative row offsets),
SiLU(gate) * up, weighted combine with index_add_. Falls back to a per-expert loop where torch._grouped_mm is
missing. Timed with CUDA events (warm-up, median); writes JSON in the format of moe_layer_bench --json.

    python3 scripts/bench_moe_torch.py [--tokens 1,4,...] [--iters N] [--warmup N] [--json PATH]
"""
import argparse
import datetime
import json

import torch

HIDDEN, EXPERTS, TOP_K, INTER = 2048, 128, 8, 768
PEAK_BYTES_PER_S, PEAK_FLOPS_PER_S = 3.35e12, 989e12


def make_layer(max_tokens):
    g = torch.Generator(device="cuda").manual_seed(0)

    def uniform(shape, scale):
        return ((torch.rand(shape, generator=g, device="cuda") * 2 - 1) * scale).to(torch.bfloat16)

    return {
        "x": uniform((max_tokens, HIDDEN), 1.0),
        "gate_w": uniform((EXPERTS, HIDDEN), 0.05),
        "w1": uniform((EXPERTS, 2 * INTER, HIDDEN), 0.03),  # gate rows then up rows, as zmoe's gate_up
        "w2": uniform((EXPERTS, HIDDEN, INTER), 0.03),
    }


def grouped_available():
    if not hasattr(torch, "_grouped_mm"):
        return False
    try:
        a = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(2, 128, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        offs = torch.tensor([16, 32], device="cuda", dtype=torch.int32)
        out = torch._grouped_mm(a, b, offs=offs)
        ref = torch.cat([a[:16] @ b[0], a[16:] @ b[1]])
        return bool(torch.allclose(out.float(), ref.float(), rtol=2e-2, atol=2e-1))
    except Exception as e:  # noqa: BLE001 - any failure means: use the loop
        print(f"torch._grouped_mm unusable: {e}")
        return False


def moe_layer(p, x, use_grouped):
    t = x.shape[0]
    logits = (x @ p["gate_w"].t()).float()
    probs = torch.softmax(logits, dim=-1)
    top_w, top_i = torch.topk(probs, TOP_K, dim=-1)
    top_w = top_w / top_w.sum(dim=-1, keepdim=True)
    flat = top_i.flatten()
    order = torch.argsort(flat, stable=True)
    token_of_row = order // TOP_K
    counts = torch.bincount(flat, minlength=EXPERTS)
    xs = x[token_of_row]
    if use_grouped:
        offs = torch.cumsum(counts, 0).to(torch.int32)
        h = torch._grouped_mm(xs, p["w1"].transpose(1, 2), offs=offs)
        act = torch.nn.functional.silu(h[:, :INTER]) * h[:, INTER:]
        y = torch._grouped_mm(act, p["w2"].transpose(1, 2), offs=offs)
    else:
        y = torch.empty(xs.shape[0], HIDDEN, device="cuda", dtype=torch.bfloat16)
        start = 0
        for e, n in enumerate(counts.tolist()):
            if n:
                h = xs[start:start + n] @ p["w1"][e].t()
                act = torch.nn.functional.silu(h[:, :INTER]) * h[:, INTER:]
                y[start:start + n] = act @ p["w2"][e].t()
            start += n
    weighted = y.float() * top_w.flatten()[order, None]
    out = torch.zeros(t, HIDDEN, device="cuda", dtype=torch.float32)
    out.index_add_(0, token_of_row, weighted)
    return out.to(torch.bfloat16), counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,4,16,64,256,1024,4096,16384")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    tokens_list = [int(v) for v in args.tokens.split(",")]
    p = make_layer(max(tokens_list))
    use_grouped = grouped_available()
    impl = "torch_grouped_mm" if use_grouped else "torch_expert_loop"
    results = []
    with torch.inference_mode():
        for t in tokens_list:
            x = p["x"][:t]
            for _ in range(args.warmup):
                moe_layer(p, x, use_grouped)
            torch.cuda.synchronize()
            times = []
            for _ in range(args.iters):
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                _, counts = moe_layer(p, x, use_grouped)
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop))
            times.sort()
            active = int((counts > 0).sum().item())
            nbytes = active * 3.0 * HIDDEN * INTER * 2 + EXPERTS * HIDDEN * 2.0 + 2.0 * t * HIDDEN * 2
            flops = 2.0 * t * TOP_K * 3.0 * HIDDEN * INTER + 2.0 * t * HIDDEN * EXPERTS
            floor_ms = max(nbytes / PEAK_BYTES_PER_S, flops / PEAK_FLOPS_PER_S) * 1e3
            results.append({"tokens": t, "median_ms": times[len(times) // 2], "graph_median_ms": None,
                            "floor_ms": floor_ms, "bytes": nbytes, "flops": flops, "active_experts": active})
    name = torch.cuda.get_device_name()
    print(f"MoE layer ({impl}), hidden {HIDDEN}, {EXPERTS} experts, top-{TOP_K}, expert FFN {INTER}, BF16 on {name}"
          f" (torch {torch.__version__}, median of {args.iters})")
    print(f"{'tokens':>7} {'active':>6} {'median_ms':>10} {'floor_ms':>10} {'floor%':>7} {'TFLOP/s':>8} {'GB/s':>8}")
    for r in results:
        print(f"{r['tokens']:>7} {r['active_experts']:>6} {r['median_ms']:>10.4f} {r['floor_ms']:>10.4f} "
              f"{100 * r['floor_ms'] / r['median_ms']:>6.1f}% {r['flops'] / r['median_ms'] * 1e-9:>8.1f} "
              f"{r['bytes'] / r['median_ms'] * 1e-6:>8.0f}")
    if args.json:
        doc = {"bench": "moe_layer", "impl": impl, "device": name,
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "shape": {"hidden": HIDDEN, "experts": EXPERTS, "top_k": TOP_K, "inter": INTER, "dtype": "bf16"},
               "peak": {"hbm_bytes_per_s": PEAK_BYTES_PER_S, "bf16_flops_per_s": PEAK_FLOPS_PER_S},
               "iters": args.iters, "torch": torch.__version__, "results": results}
        with open(args.json, "w") as f:
            json.dump(doc, f)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
