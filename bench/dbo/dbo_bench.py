#!/usr/bin/env python3
"""Dual-batch overlap benchmark on CPU workers: the same requests with DBO off and forced on (thresholds 1) in the
same run, over N worker processes exchanging tokens through ZeroMQ. Prints a table and writes JSON.

    python3 bench/dbo/dbo_bench.py [--zmoe build/bin/zmoe] [--workers 4] [--json OUT]

Step time = the engine core's step_ms histogram (send -> every rank's result), over the prefill-heavy steps of long
prompts and the decode steps after them; worker compute = the workers' step_compute_ms. The tokens of both runs must
be identical (exit status 1 otherwise).
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from generate_runs import add_common_args, make_demo, run_generate, write_requests  # noqa: E402


def step_stats(m):
    h = m["engine_core"]["histograms"]["step_ms"]
    compute = [v["histograms"]["step_compute_ms"] for k, v in m.items()
               if k.startswith("worker") and "step_compute_ms" in v.get("histograms", {})]
    if not compute:  # the engine core keeps per-rank worker metrics under its own name
        compute = [v["histograms"]["step_compute_ms"] for v in m.values()
                   if isinstance(v, dict) and "step_compute_ms" in v.get("histograms", {})]
    c_sum = sum(x["sum"] for x in compute)
    c_cnt = sum(x["count"] for x in compute)
    return {"steps": h["count"], "step_ms_mean": h["sum"] / max(1, h["count"]), "step_ms_p50": h["p50"],
            "step_ms_p90": h["p90"], "worker_compute_ms_mean": c_sum / max(1, c_cnt),
            "dbo_steps": m["engine_core"]["counters"].get("dbo_steps", 0)}


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap, hidden=256, moe_intermediate=256, requests=32, max_tokens=8)
    ap.add_argument("--prompt-len", type=int, default=192)
    ap.add_argument("--model", help="use this checkpoint instead of writing a demo one")
    # Synchronous scheduling by default: under async scheduling the steps depend on timing, and on this random
    # checkpoint two runs may then differ in tokens with DBO off too, which would hide the comparison.
    ap.add_argument("--extra", default="--no-async", help="more engine options for both runs")
    ap.add_argument("--repeat", type=int, default=3, help="off/on run pairs, alternated (this machine is noisy)")
    ap.add_argument("--json")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="zmoe-dbo-")
    model = args.model or os.path.join(tmp, "demo")
    if not args.model:
        make_demo(args.zmoe, model, args.experts, args.layers, args.hidden, args.moe_intermediate)
    reqs = os.path.join(tmp, "requests.jsonl")
    write_requests(reqs, args.requests, lambda rng: args.prompt_len, args.max_tokens)
    common = ["--threads", str(args.threads)] + args.extra.split()
    dbo = ["--enable-dbo", "--dbo-decode-token-threshold", "1", "--dbo-prefill-token-threshold", "1"]
    runs = {"off": [], "on": []}
    same = True
    for i in range(args.repeat):
        for tag, extra in (("off", []), ("on", dbo)):
            m, wall, tokens = run_generate(args.zmoe, model, reqs, args.workers, common + extra, tmp, f"{tag}{i}")
            st = step_stats(m)
            st["wall_s"] = wall
            runs[tag].append(st)
            if i == 0 and tag == "off":
                ref_tokens = tokens
            same = same and tokens == ref_tokens

    def mean(tag, key):
        return sum(r[key] for r in runs[tag]) / len(runs[tag])

    off = {k: mean("off", k) for k in runs["off"][0]}
    on = {k: mean("on", k) for k in runs["on"][0]}
    off_wall, on_wall = off["wall_s"], on["wall_s"]
    print(f"DBO bench: hidden {args.hidden}, expert FFN {args.moe_intermediate}, {args.layers} MoE layers x "
          f"{args.experts} experts, {args.workers} CPU workers x {args.threads} thread(s), {args.requests} requests x "
          f"{args.prompt_len} prompt tokens + {args.max_tokens} new")
    print(f"  means over {args.repeat} run(s) each")
    print(f"  {'':<30} {'DBO off':>12} {'DBO on':>12}")
    for key, label in [("steps", "steps"), ("dbo_steps", "steps run with DBO"), ("step_ms_mean", "step ms mean"),
                       ("step_ms_p50", "step ms p50 (bucket bound)"), ("step_ms_p90", "step ms p90 (bucket bound)"),
                       ("worker_compute_ms_mean", "worker step ms mean")]:
        print(f"  {label:<30} {off[key]:>12.3f} {on[key]:>12.3f}")
    print(f"  {'wall s (incl. start-up)':<30} {off_wall:>12.2f} {on_wall:>12.2f}")
    print(f"  tokens identical: {same}")
    result = {"workers": args.workers, "threads": args.threads, "hidden": args.hidden,
              "moe_intermediate": args.moe_intermediate, "layers": args.layers, "experts": args.experts,
              "requests": args.requests, "prompt_len": args.prompt_len, "max_tokens": args.max_tokens,
              "repeat": args.repeat, "runs": runs, "dbo_off": off, "dbo_on": on, "wall_s_off": off_wall, "wall_s_on": on_wall, "tokens_identical": same}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
