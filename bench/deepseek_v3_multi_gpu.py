#!/usr/bin/env python3
"""Helpers of bench/deepseek_v3_multi_gpu.sh (standard library only).

  deepseek_v3_multi_gpu.py layers --config C --workers W --quantization fp8|bf16 --gpu-mem-gib G
      [--utilization 0.9] [--reserve-gib 10]
      prints the most decoder layers of C whose weights fit one GPU of W (expert parallel, dummy weights as the
      CUDA worker lays them out), with the bytes per GPU on stderr;
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


def cmd_layers(a):
    c = json.load(open(a.config))
    budget = a.gpu_mem_gib * a.utilization * GiB - a.reserve_gib * GiB
    fp8 = a.quantization == "fp8"
    best = 0
    for n in range(1, c["num_hidden_layers"] + 1):
        if weight_bytes_per_gpu(c, n, a.workers, fp8) <= budget:
            best = n
    if best == 0:
        sys.exit(f"layers: not even one layer fits {budget / GiB:.1f} GiB")
    print(f"layers: {best} of {c['num_hidden_layers']} fit: {weight_bytes_per_gpu(c, best, a.workers, fp8) / GiB:.1f}"
          f" GiB of {a.quantization} weights per GPU of {a.workers} (budget {budget / GiB:.1f} GiB = "
          f"{a.gpu_mem_gib:.1f} x {a.utilization} - {a.reserve_gib} GiB for workspace and KV cache)", file=sys.stderr)
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
    for path in sorted(glob.glob(os.path.join(out, "served", "*_seqs*.json")),
                       key=lambda p: (p, int(re.search(r"seqs(\d+)", p).group(1)))):
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
    s.add_argument("--utilization", type=float, default=0.9)
    s.add_argument("--reserve-gib", type=float, default=10)
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
