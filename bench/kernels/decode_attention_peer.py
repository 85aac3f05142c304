"""The peer of decode_attention_bench: PyTorch's scaled_dot_product_attention with enable_gqa at the same decode
shapes (one query token per sequence, 32 query / 4 KV heads of 128, BF16), over a contiguous KV cache of `context`
keys per sequence. Like the bench, each shape is timed as a CUDA graph of back-to-back calls cycling over enough copies
of the KV cache that every call reads its KV from memory; prints one "<batch> <context> <ms per call>" line per shape,
after a line naming the backend."""

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

COLD_BYTES = 256 << 20


def ints(s):
    return [int(x) for x in s.split(",")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=ints, default=[1, 64, 256])
    ap.add_argument("--contexts", type=ints, default=[128, 1024, 4096])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=128)
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)

    # The fastest backend that takes these shapes with enable_gqa, tried on a small case first.
    backend = None
    for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        q = torch.randn(2, a.q_heads, 1, a.head_dim, device=dev, dtype=torch.bfloat16)
        k = torch.randn(2, a.kv_heads, 64, a.head_dim, device=dev, dtype=torch.bfloat16)
        try:
            with sdpa_kernel([b]):
                F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
            torch.cuda.synchronize()
            backend = b
            break
        except RuntimeError:
            continue
    print(f"torch {torch.__version__} scaled_dot_product_attention(enable_gqa=True), backend {backend.name}", flush=True)

    for batch in a.batches:
        for context in a.contexts:
            kv_bytes = 2 * batch * a.kv_heads * context * a.head_dim * 2
            copies = max(1, min(1024, -(-COLD_BYTES // kv_bytes)))
            launches = max(copies, 16)
            q = torch.randn(batch, a.q_heads, 1, a.head_dim, device=dev, dtype=torch.bfloat16)
            kv = torch.randn(copies, 2, batch, a.kv_heads, context, a.head_dim, device=dev, dtype=torch.bfloat16)

            def call(c):
                with sdpa_kernel([backend]):
                    F.scaled_dot_product_attention(q, kv[c, 0], kv[c, 1], enable_gqa=True)

            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for c in range(min(copies, 3)):
                    call(c)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(launches):
                    call(i % copies)
            times = []
            for i in range(a.iters + 2):
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                g.replay()
                stop.record()
                stop.synchronize()
                if i >= 2:
                    times.append(start.elapsed_time(stop))
            times.sort()
            print(f"{batch} {context} {times[len(times) // 2] / launches:.6f}", flush=True)
            del g, kv, q
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
