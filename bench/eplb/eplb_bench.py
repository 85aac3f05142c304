#!/usr/bin/env python3
"""EPLB benchmark: a checkpoint whose routers are skewed, served with and without expert-parallel load balancing
in the same run. Prints a table and writes JSON.

    python3 bench/eplb/eplb_bench.py [--zmoe build/bin/zmoe] [--workers 4] [--json OUT]

Balancedness = mean / max tokens per rank (1 = perfectly even), from the engine core's per-expert token counters:
 - without EPLB, over the fixed placement (rank r owns experts [r*E/N, (r+1)*E/N));
 - with EPLB, over the placement in force at the end, each expert's tokens split evenly over its replicas, and the
   engine core's own before/after figures of its last rebalance.
Step time = the engine core's step_ms histogram (send -> every rank's result).
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from generate_runs import add_common_args, make_demo, run_generate, write_requests  # noqa: E402


def expert_load(m, num_layers, num_experts):
    load = [[0.0] * num_experts for _ in range(num_layers)]
    for k, v in m["engine_core"]["counters"].items():
        if k.startswith("expert_tokens{"):
            lab = dict(p.split("=") for p in k[len("expert_tokens{"):-1].split(","))
            load[int(lab["layer"].strip('"'))][int(lab["expert"].strip('"'))] += v
    return load


def balancedness(load, placement, workers):
    """mean/max tokens per rank, averaged over layers; placement[l] = logical expert of each physical slot."""
    vals = []
    for l, row in enumerate(load):
        slots = placement[l]
        per_rank = len(slots) // workers
        replicas = [slots.count(e) for e in range(len(row))]
        ranks = [0.0] * workers
        for s, e in enumerate(slots):
            ranks[s // per_rank] += row[e] / replicas[e]
        vals.append((sum(ranks) / workers) / max(ranks) if max(ranks) > 0 else 1.0)
    return sum(vals) / len(vals)


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap, hidden=64, moe_intermediate=64, requests=64, max_tokens=64)
    ap.add_argument("--redundant", type=int, default=4)
    ap.add_argument("--skew", type=float, default=0.5)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--model", help="use this checkpoint instead of writing a skewed demo one")
    ap.add_argument("--max-num-seqs", type=int, help="running sequences per worker (default: the engine's)")
    ap.add_argument("--json")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="zmoe-eplb-")
    model = args.model or os.path.join(tmp, "skewed")
    if not args.model:
        make_demo(args.zmoe, model, args.experts, args.layers, args.hidden, args.moe_intermediate, args.skew)
    reqs = os.path.join(tmp, "requests.jsonl")
    write_requests(reqs, args.requests, lambda rng: rng.randrange(8, 64), args.max_tokens)
    common = ["--threads", str(args.threads), "--device", args.device]
    if args.max_num_seqs:
        common += ["--max-num-seqs", str(args.max_num_seqs)]
    base_m, base_wall, base_tokens = run_generate(args.zmoe, model, reqs, args.workers, common, tmp, "base")
    eplb_m, eplb_wall, eplb_tokens = run_generate(
        args.zmoe, model, reqs, args.workers,
        common + ["--enable-eplb", "--eplb-interval", "8", "--eplb-window", "32", "--num-redundant-experts",
                  str(args.redundant)], tmp, "eplb")
    E, L, N = args.experts, args.layers, args.workers
    identity = [list(range(E)) for _ in range(L)]
    base_bal = balancedness(expert_load(base_m, L, E), identity, N)
    eplb_load = expert_load(eplb_m, L, E)
    eplb_bal_end = balancedness(eplb_load, eplb_m["eplb_placement"], N)
    g = eplb_m["engine_core"]["gauges"]
    c = eplb_m["engine_core"]["counters"]
    rows = [
        ("placement", "fixed (E/N per rank)", f"EPLB, {args.redundant} redundant"),
        ("balancedness over the run", f"{base_bal:.3f}", f"{eplb_bal_end:.3f} (final placement)"),
        ("last rebalance: before -> after", "-",
         f"{g.get('eplb_balancedness_before', 0):.3f} -> {g.get('eplb_balancedness_after', 0):.3f}"),
        ("rebalances / expert moves", "-", f"{c.get('eplb_rebalances', 0):.0f} / {c.get('eplb_expert_moves', 0):.0f}"),
        ("bytes moved", "-", f"{c.get('eplb_bytes_moved', 0):.0f}"),
        ("step ms p50 / p90", f"{base_m['engine_core']['histograms']['step_ms']['p50']:.3g} / "
                              f"{base_m['engine_core']['histograms']['step_ms']['p90']:.3g}",
         f"{eplb_m['engine_core']['histograms']['step_ms']['p50']:.3g} / "
         f"{eplb_m['engine_core']['histograms']['step_ms']['p90']:.3g}"),
        ("step ms mean", f"{base_m['engine_core']['histograms']['step_ms']['sum'] / base_m['engine_core']['histograms']['step_ms']['count']:.3f}",
         f"{eplb_m['engine_core']['histograms']['step_ms']['sum'] / eplb_m['engine_core']['histograms']['step_ms']['count']:.3f}"),
        ("wall s (incl. start-up)", f"{base_wall:.2f}", f"{eplb_wall:.2f}"),
        ("tokens identical", "", str(base_tokens == eplb_tokens)),
    ]
    print(f"EPLB bench: hidden {args.hidden}, expert FFN {args.moe_intermediate}, {L} MoE layers x {E} experts (skew {args.skew}), {N} {args.device} workers, {args.requests} requests x "
          f"{args.max_tokens} tokens")
    for r in rows:
        print(f"  {r[0]:<34} {r[1]:<24} {r[2]}")
    result = {"device": args.device, "hidden": args.hidden, "moe_intermediate": args.moe_intermediate, "layers": L, "experts": E, "workers": N, "redundant": args.redundant, "skew": args.skew,
              "balancedness_fixed": base_bal, "balancedness_eplb_final": eplb_bal_end,
              "eplb_last_before": g.get("eplb_balancedness_before"), "eplb_last_after": g.get("eplb_balancedness_after"),
              "rebalances": c.get("eplb_rebalances", 0), "expert_moves": c.get("eplb_expert_moves", 0),
              "bytes_moved": c.get("eplb_bytes_moved", 0),
              "step_ms_fixed": base_m["engine_core"]["histograms"]["step_ms"],
              "step_ms_eplb": eplb_m["engine_core"]["histograms"]["step_ms"],
              "wall_s_fixed": base_wall, "wall_s_eplb": eplb_wall, "tokens_identical": base_tokens == eplb_tokens}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if base_tokens == eplb_tokens else 1


if __name__ == "__main__":
    sys.exit(main())
