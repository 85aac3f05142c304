#!/usr/bin/env python3
"""Helpers of bench/deepseek_v3_multi_gpu.sh (standard library only).

  deepseek_v3_multi_gpu.py layers --config C --workers W --quantization fp8|bf16 --gpu-mem-gib G
      --max-num-batched-tokens T --max-num-seqs S --kv-tokens N [--max-kv-len L] [--utilization 0.9]
      [--other-gib 2] [--margin-gib 1]
      prints the most decoder layers of C that fit one GPU of W (expert parallel) under utilization x G: the rank's
      weights (dummy, as the CUDA worker lays them out), its workspace for steps of T tokens and S sequences (the
      expert-parallel receive buffers hold W x T x top_k rows), the MLA runner's, the FP8 scratch, N tokens of KV
      cache, the CUDA context / cuBLAS / NCCL (--other-gib) and a margin; the breakdown on stderr;
  deepseek_v3_multi_gpu.py cut --config C --layers N --out DIR
      writes DIR/config.json: C with num_hidden_layers N;
  deepseek_v3_multi_gpu.py summary --out DIR
      reads every part's JSON under DIR, prints one table per part and writes DIR/summary.json and DIR/summary.md.
"""
import argparse
import glob
import json
import math
import os
import re
import sys

GiB = 1 << 30


def weight_bytes_per_gpu(c, layers, workers, fp8):
    """Bytes of one rank's weights for the first `layers` decoder layers of config c: every rank holds the
    embedding, LM head, attention, norms, routers, dense and shared MLPs (data-parallel attention) and its
    ceil(E / workers) routed experts of each MoE layer. FP8 as the CUDA worker's dummy weights: the linears e4m3 plus
    an fp32 scale per 128 x 128 block; MLA's kv_b, the routers, norms, embedding and LM head BF16."""
    H, V = c["hidden_size"], c["vocab_size"]

    def lin(n, k, quantized=True):
        if fp8 and quantized:
            return n * k + 4 * math.ceil(n / 128) * math.ceil(k / 128)
        return 2 * n * k

    def mlp(inter):
        return 2 * lin(inter, H) + lin(H, inter)

    heads = c["num_attention_heads"]
    if "kv_lora_rank" in c:
        r, dr, dn, dv = c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
        qr = c.get("q_lora_rank") or 0
        q = lin(qr, H) + lin(heads * (dn + dr), qr) + 2 * qr if qr else lin(heads * (dn + dr), H)
        attn = q + lin(r + dr, H) + 2 * r + lin(heads * (dn + dv), r, quantized=False) + lin(H, heads * dv)
    else:
        d = c.get("head_dim", H // heads)
        kv = c.get("num_key_value_heads", heads)
        attn = lin(heads * d + 2 * kv * d, H) + lin(H, heads * d)
    E = c.get("n_routed_experts", c.get("num_experts", 0)) or 0
    dense_layers = c.get("first_k_dense_replace", 0) if E else layers
    shared = c.get("n_shared_experts", 0) or 0
    moe_inter = c.get("moe_intermediate_size", 0) or 0
    total = 2 * V * H * (1 if c.get("tie_word_embeddings") else 2) + 2 * H
    for layer in range(layers):
        total += attn + 4 * H
        if layer < dense_layers:
            total += mlp(c["intermediate_size"])
        else:
            total += 2 * E * H + (mlp(moe_inter * shared) if shared else 0) + math.ceil(E / workers) * mlp(moe_inter)
    return total


def workspace_bytes(c, T, S, workers, fp8, max_kv_len):
    """The CUDA worker's buffers sized by the step shape, as workers/cuda/cuda_workspace.cpp, cuda_deepseek.cpp
    (mla_attention_runner) and cuda_fp8_linear.cpp allocate them (MLA models; the small ones left out):
    {"workspace": ..., "mla": ..., "fp8_scratch": ...}. Checked against one H100's start-up lines (FP8 8 layers at
    8 192 tokens / 256 sequences: 4 320 MiB workspace, 681 MiB FP8 scratch; BF16 5 layers, 64 sequences: 3 145)."""
    H, V, K = c["hidden_size"], c["vocab_size"], c["num_experts_per_tok"]
    E = c.get("n_routed_experts", 0) or 0
    inter = max(c["intermediate_size"], (c.get("moe_intermediate_size") or 0) * (c.get("n_shared_experts") or 0))
    moe_inter = c.get("moe_intermediate_size") or 0
    slots = math.ceil(E / workers)
    ep = workers > 1
    ws = 3 * T * H * 2 + T * 3 * inter * 2 + T * H * 2 + T * E * 4 + 3 * S * V * 4
    recv = workers * T * K if ep else 0
    rows = (recv + (slots + 1) * 127) if ep else (T * K + slots * 127)
    ws += rows * H * 2 + rows * moe_inter * 2
    if fp8:
        ws += rows * H + rows * (moe_inter + 15) // 16 * 16
    if ep:
        ws += 2 * T * K * H * 2 + 2 * recv * H * 2
    heads = c["num_attention_heads"]
    r, dr, dn, dv = c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
    qr = c.get("q_lora_rank") or 0
    mla = T * (qr * 2 + heads * (dn + dr) * 2 + (r + dr) * 2 + heads * r * 8 + heads * dv * 2)
    per_row = 2 * (r + heads * (dn + dr + dv))
    expand_rows = min((1 << 30) // per_row, math.ceil(max_kv_len / 64) * 64) // 64 * 64
    mla += expand_rows * per_row
    fp8_scratch = T * 83_000 if fp8 else 0  # 681 MiB at 8 192 rows (DeepSeek-V3's widest FP8 dense linears)
    return {"workspace": ws, "mla": mla, "fp8_scratch": fp8_scratch}


def cmd_layers(a):
    c = json.load(open(a.config))
    fp8 = a.quantization == "fp8"
    kv_per_token_layer = 2 * (c["kv_lora_rank"] + c["qk_rope_head_dim"])  # MLA: one latent + rope-key row, BF16
    parts = workspace_bytes(c, a.max_num_batched_tokens, a.max_num_seqs, a.workers, fp8,
                            a.max_kv_len or a.kv_tokens)
    fixed = sum(parts.values()) + (a.other_gib + a.margin_gib) * GiB
    limit = a.gpu_mem_gib * a.utilization * GiB

    def need(n):
        return weight_bytes_per_gpu(c, n, a.workers, fp8) + fixed + a.kv_tokens * kv_per_token_layer * n

    best = max((n for n in range(1, c["num_hidden_layers"] + 1) if need(n) <= limit), default=0)
    if best == 0:
        sys.exit(f"layers: not even one layer fits {limit / GiB:.1f} GiB")
    g = lambda b: f"{b / GiB:.1f}"
    print(f"layers: {best} of {c['num_hidden_layers']} fit one GPU of {a.workers} ({a.quantization}, steps of "
          f"{a.max_num_batched_tokens} tokens / {a.max_num_seqs} sequences): weights "
          f"{g(weight_bytes_per_gpu(c, best, a.workers, fp8))} + workspace {g(parts['workspace'])} + MLA "
          f"{g(parts['mla'])} + FP8 scratch {g(parts['fp8_scratch'])} + KV of {a.kv_tokens} tokens "
          f"{g(a.kv_tokens * kv_per_token_layer * best)} + other {a.other_gib} + margin {a.margin_gib} = "
          f"{g(need(best))} GiB of {g(limit)} ({a.gpu_mem_gib:.1f} x {a.utilization})", file=sys.stderr)
    print(best)


def cmd_cut(a):
    c = json.load(open(a.config))
    if not 1 <= a.layers <= c["num_hidden_layers"]:
        sys.exit(f"cut: --layers {a.layers} not in 1..{c['num_hidden_layers']}")
    c["num_hidden_layers"] = a.layers
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def span(values, fmt="{:.1f}"):
    """min-max of the numbers in values ("-" when none)."""
    v = [x for x in values if isinstance(x, (int, float)) and x > 0]
    if not v:
        return "-"
    lo, hi = min(v), max(v)
    return fmt.format(lo) if math.isclose(lo, hi, rel_tol=1e-3) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def summarize_exchange(out):
    j = load(os.path.join(out, "exchange", "bench_ep_exchange.json"))
    if not j:
        return None, None
    rows, data = [], []
    for ex in j.get("exchanges", []):
        bf16, fp8 = ex["ranks"], ex["fp8_dispatch_ranks"]
        g = lambda rs, k: [r[k] for r in rs]
        nccl_b = [r["fixed_dispatch_us"] + r["fixed_combine_us"] for r in bf16]
        nccl_f = [r["fixed_dispatch_us"] + r["fixed_combine_us"] for r in fp8]
        ratio = [f / b for f, b in zip(g(fp8, "fixed_graph_dispatch_combine_us"), g(bf16, "fixed_graph_dispatch_combine_us")) if b > 0]
        rows.append([ex["tokens_per_rank"], j["workers"], span(g(bf16, "fixed_graph_dispatch_combine_us")),
                     span(g(fp8, "fixed_graph_dispatch_combine_us")), span(ratio, "{:.2f}"),
                     span(g(bf16, "fixed_dispatch_us")), span(g(fp8, "fixed_dispatch_us")), span(nccl_b), span(nccl_f),
                     span(g(bf16, "p2p_graph_dispatch_combine_us")), span(g(fp8, "p2p_graph_dispatch_combine_us"))])
        data.append({"tokens_per_rank": ex["tokens_per_rank"], "workers": j["workers"],
                     "nccl_graph_dispatch_combine_us": {"bf16": g(bf16, "fixed_graph_dispatch_combine_us"),
                                                        "fp8": g(fp8, "fixed_graph_dispatch_combine_us")},
                     "nccl_dispatch_us": {"bf16": g(bf16, "fixed_dispatch_us"), "fp8": g(fp8, "fixed_dispatch_us")},
                     "nccl_combine_us": {"bf16": g(bf16, "fixed_combine_us"), "fp8": g(fp8, "fixed_combine_us")},
                     "p2p_graph_dispatch_combine_us": {"bf16": g(bf16, "p2p_graph_dispatch_combine_us"),
                                                       "fp8": g(fp8, "p2p_graph_dispatch_combine_us")}})
    md = ("Exchange per MoE layer (dispatch + combine, µs, range over ranks; `zmoe bench ep --exchange-only`). "
          "NCCL = the fixed window over NCCL send/recv (the path `--ep-transport nccl` serves with; FP8 dispatch = "
          "e4m3 records + scales, the combine BF16); p2p = the default peer-to-peer path.\n\n" +
          table(["tokens/rank", "GPUs", "NCCL graph d+c BF16", "NCCL graph d+c FP8", "FP8/BF16", "NCCL dispatch BF16",
                 "NCCL dispatch FP8", "NCCL eager d+c BF16", "NCCL eager d+c FP8", "p2p graph d+c BF16",
                 "p2p graph d+c FP8"], rows)) if rows else "Exchange: no timing (CPU run, or it failed)."
    return md, data


def served_rows(out):
    rows, data = [], []
    def key(p):
        m = re.search(r"served/(.+)_seqs(\d+)\.json$", p)
        return (m.group(1), int(m.group(2))) if m else (p, 0)

    for path in sorted(glob.glob(os.path.join(out, "served", "*_seqs*.json")), key=key):
        j = load(path)
        if not j:
            continue
        m = re.search(r"served/(.+)_seqs(\d+)\.json$", path)
        label, seqs = m.group(1), int(m.group(2))
        n = j.get("num_gpus", 0) or 1
        f = lambda k, spec="{:.1f}": spec.format(j[k]) if isinstance(j.get(k), (int, float)) else "-"
        rows.append([label, n, seqs, f"{j.get('completed', 0)}/{j.get('num_prompts', 0)}", f("decode_output_throughput_per_gpu"),
                     f("output_throughput_per_gpu"), f("mean_decode_step_ms", "{:.2f}"),
                     f("mean_floor_decode_step_ms", "{:.2f}"), f("decode_floor_fraction", "{:.2f}"),
                     f("median_ttft_ms"), f("median_tpot_ms", "{:.2f}")])
        data.append({"run": label, "seqs_per_gpu": seqs, **{k: j.get(k) for k in (
            "num_gpus", "completed", "failed", "num_prompts", "decode_output_throughput_per_gpu",
            "output_throughput_per_gpu", "decode_output_throughput", "output_throughput", "mean_decode_step_ms",
            "mean_floor_decode_step_ms", "decode_floor_fraction", "median_ttft_ms", "median_tpot_ms")}})
    return rows, data


def summarize_served(out):
    rows, data = served_rows(out)
    info = load(os.path.join(out, "served", "run.json")) or {}
    md = ("Served (`zmoe serve` + `zmoe bench serve`, dummy weights; decode tok/s per GPU = the engine core's "
          "decode-only steps, their served time; output tok/s per GPU = vLLM's output throughput / GPUs; floor = the "
          "bytes a decode step reads at the measured copy bandwidth).\n\n" +
          "\n".join(f"- {k}: {v}" for k, v in info.items()) + "\n\n" +
          table(["run", "GPUs", "seqs/GPU", "completed", "decode tok/s/GPU", "output tok/s/GPU", "decode step ms",
                 "floor ms", "floor/step", "TTFT p50 ms", "TPOT p50 ms"], rows)) if rows else "Served: no result."
    return md, {"runs": data, **info}


def summarize_ttft(out):
    j = load(os.path.join(out, "ttft", "summary.json"))
    if not j:
        return "TTFT: no result.", None
    f = lambda v, spec: "-" if v is None else spec.format(v)
    rows = [[r["prompt_tokens"], j.get("workers"), r.get("completed", 0), f(r.get("ttft_ms"), "{:.1f}"),
             f(r.get("floor_ms"), "{:.1f}"),
             f(r["ttft_ms"] / r["floor_ms"] if r.get("ttft_ms") and r.get("floor_ms") else None, "{:.2f}")]
            for r in j["rows"]]
    peak = j.get("gemm_peak_flops")
    md = (f"TTFT (`bench/prefill_ttft.sh`, one request at a time; floor = the prompt's matrix FLOPs, its routed "
          f"experts spread over the GPUs, at {f(peak and peak * 1e-12, '{:.0f}')} TFLOP/s):\n\n" +
          table(["prompt tokens", "GPUs", "completed", "TTFT p50 ms", "floor ms", "x floor"], rows))
    return md, j


def summarize_decode(out):
    rows, data = [], []
    for path in sorted(glob.glob(os.path.join(out, "decode", "*.json"))):
        j = load(path)
        if not j:
            continue
        name = os.path.basename(path)[:-5]
        if isinstance(j.get("steps"), list):  # bench ep
            for s in j["steps"]:
                rows.append([name, "bench ep", s["gpus"], s["tokens_per_gpu"], f"{s['median_step_ms']:.3f}",
                             f"{s['tok_per_s_per_gpu']:.0f}", f"{s['floor_ms']:.3f}" if "floor_ms" in s else "-",
                             f"{s['floor_fraction']:.2f}" if "floor_fraction" in s else "-"])
                data.append({"file": name, "bench": "ep", **{k: v for k, v in s.items() if k != "step_ms"}})
        elif "results" in j:  # bench step
            for s in j["results"]:
                rows.append([name, "bench step", 1, s["batch"], f"{s['median_step_ms']:.3f}",
                             f"{s['output_tok_per_s']:.0f}", f"{s['floor_ms']:.3f}", f"{s['floor_fraction']:.2f}"])
                data.append({"file": name, "bench": "step", **{k: v for k, v in s.items() if k != "step_ms"}})
    md = ("Decode steps (offline, median; floor = dense weights + the rank's share of the touched experts + KV cache "
          "at the measured copy bandwidth):\n\n" +
          table(["run", "bench", "GPUs", "seqs/GPU", "ms/step", "tok/s/GPU", "floor ms", "floor/step"], rows)
          ) if rows else "Decode: no result."
    return md, data


def cmd_summary(a):
    parts = {"exchange": summarize_exchange, "served": summarize_served, "ttft": summarize_ttft,
             "decode": summarize_decode}
    only = a.part.split(",") if a.part else list(parts)
    status = load(os.path.join(a.out, "status.json")) or {}
    md, js = [], {"status": status}
    for name in only:
        text, data = parts[name](a.out)
        if text is None:
            text = f"{name.capitalize()}: no result."
        st = status.get(name)
        md.append(f"## {name}" + (f" (exit {st['rc']}, {st['seconds']} s)" if st else "") + "\n\n" + text)
        js[name] = data
    text = "\n\n".join(md) + "\n"
    print(text)
    if not a.part:
        with open(os.path.join(a.out, "summary.md"), "w") as f:
            f.write(text)
        with open(os.path.join(a.out, "summary.json"), "w") as f:
            json.dump(js, f, indent=1)
            f.write("\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("layers")
    s.add_argument("--config", required=True)
    s.add_argument("--workers", type=int, required=True)
    s.add_argument("--quantization", choices=["fp8", "bf16"], required=True)
    s.add_argument("--gpu-mem-gib", type=float, required=True)
    s.add_argument("--max-num-batched-tokens", type=int, required=True)
    s.add_argument("--max-num-seqs", type=int, required=True)
    s.add_argument("--kv-tokens", type=int, required=True, help="KV cache positions per GPU the run needs")
    s.add_argument("--max-kv-len", type=int, default=0, help="--max-model-len (default: --kv-tokens)")
    s.add_argument("--utilization", type=float, default=0.9)
    s.add_argument("--other-gib", type=float, default=2.0,
                   help="CUDA context, cuBLAS, NCCL (1.0-1.1 GiB measured beside the rest on one H100)")
    s.add_argument("--margin-gib", type=float, default=1.0)
    s.set_defaults(fn=cmd_layers)
    s = sub.add_parser("cut")
    s.add_argument("--config", required=True)
    s.add_argument("--layers", type=int, required=True)
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_cut)
    s = sub.add_parser("summary")
    s.add_argument("--out", required=True)
    s.add_argument("--part", default="", help="only these parts (comma list), printed, no files written")
    s.set_defaults(fn=cmd_summary)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
