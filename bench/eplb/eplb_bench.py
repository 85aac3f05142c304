#!/usr/bin/env python3
"""EPLB benchmark: a model whose routers are skewed, served with the fixed placement and with expert-parallel load
balancing in the same run (the fixed placement is the peer). Prints tables and writes JSON with every step.

    python3 bench/eplb/eplb_bench.py [--zmoe build/bin/zmoe] [--workers 4] [--json OUT]
        # a make-demo checkpoint with --router-skew (CPU or CUDA workers)
    python3 bench/eplb/eplb_bench.py --device cuda --workers 2 --config bench/configs/qwen3-30b-a3b --layers 8 \\
        --dummy-router-skew 2 --redundant 16 --requests 512 --max-tokens 128 --max-num-seqs 256 --json OUT
        # a real model's dimensions with dummy weights skewed on the device (CUDA workers)

Runs: the fixed placement (E/N experts per rank), the initial placement with the redundant slots and no
rebalancing, and EPLB at each --stage-steps. Every run is traced (--trace-steps): each step's served time (from
when the workers could start it to every rank's result), tokens, sequences, kind
(decode: every sequence feeds one token; else prefill/mixed) and EPLB events (the step before which a rebalance
is staged, the step from which it serves). Reported per run: every step, the decode steps, the decode steps after
--warmup steps (the steady state the p90 is about), the prefill/mixed steps, the steps carrying EPLB events, and
the slowest steps with their kind. EPLB runs also report their moves: bytes, the transfer's own time per rank, and
what the switch cost at its step boundary (the staging -> slot copies, on the step stream).

Balancedness = mean / max tokens per rank (1 = perfectly even), from the engine core's per-expert token counters:
without EPLB over the fixed placement, with EPLB over the placement in force at the end, each expert's tokens
split evenly over its replicas. Floor: the engine core's memory floor of the decode steps (every weight byte the
step's tokens touch, read once at the measured copy bandwidth).
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


def pct(xs, q):
    """The q-quantile of xs by the nearest-rank rule (an observed step time, not a bucket bound)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(-(-q * len(s) // 1)) - 1))]


def step_ms(s):
    """A step's served time: from when the workers could start it (sent, and the previous step done) to its last
    result; its time from send also counts the wait behind the step before it (async scheduling)."""
    return s["served_ms"]


def summary(steps):
    ms = [step_ms(s) for s in steps]
    if not ms:
        return {"count": 0}
    return {"count": len(ms), "mean": sum(ms) / len(ms), "p50": pct(ms, 0.5), "p90": pct(ms, 0.9),
            "p99": pct(ms, 0.99), "max": max(ms), "tokens_mean": sum(s["tokens"] for s in steps) / len(steps)}


def analyse(m, warmup):
    steps = m.get("steps", [])
    decode = [s for s in steps if s["decode"]]
    # Steady decode: decode steps from the warmup-th step of the run on (the first steps capture nothing new but
    # start the pipeline), whatever their batch.
    steady = [s for s in decode if s["step"] >= warmup]
    events = [s for s in steps if s.get("eplb")]
    switch_steps = [s["step"] for s in steps if "switch" in s.get("eplb", "")]
    first_switch = min(switch_steps) if switch_steps else None
    return {
        "all": summary(steps),
        "decode": summary(decode),
        "decode_steady": summary(steady),
        "prefill_or_mixed": summary([s for s in steps if not s["decode"]]),
        "decode_steady_after_first_switch": summary([s for s in steady if first_switch is not None
                                                     and s["step"] >= first_switch]),
        "decode_steady_without_eplb_events": summary([s for s in steady if not s.get("eplb")]),
        "eplb_event_steps": [{k: s[k] for k in ("step", "served_ms", "ms", "tokens", "decode", "eplb")}
                             for s in events],
        "slowest": [{k: s.get(k) for k in ("step", "served_ms", "ms", "tokens", "seqs", "decode", "eplb")}
                    for s in sorted(steps, key=lambda s: -step_ms(s))[:10]],
        "first_switch_step": first_switch,
    }


def hist(m, name):
    return m["engine_core"]["histograms"].get(name, {"count": 0, "sum": 0, "max": 0})


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap, hidden=64, moe_intermediate=64, requests=64, max_tokens=64)
    ap.add_argument("--redundant", type=int, default=4)
    ap.add_argument("--skew", type=float, default=0.5, help="make-demo --router-skew")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--model", help="use this checkpoint instead of writing a skewed demo one")
    ap.add_argument("--config", help="a model's config.json directory: dummy weights of its dimensions (CUDA), "
                                     "--layers decoder layers of it")
    ap.add_argument("--dummy-router-skew", type=float, default=0.5, help="with --config")
    ap.add_argument("--max-num-seqs", type=int, help="running sequences per worker (default: the engine's)")
    ap.add_argument("--max-num-batched-tokens", type=int)
    ap.add_argument("--gpu-memory-utilization", type=float)
    ap.add_argument("--prompt-len", default="8,64", help="prompt lengths drawn uniformly from [lo, hi)")
    ap.add_argument("--interval", type=int, default=8, help="--eplb-interval")
    ap.add_argument("--window", type=int, default=32, help="--eplb-window")
    ap.add_argument("--stage-steps", default="4,0",
                    help="EPLB runs, one per --eplb-stage-steps value (0: the next step waits for the transfer)")
    ap.add_argument("--warmup", type=int, default=8, help="steps of each run left out of the steady decode")
    ap.add_argument("--run-timeout", type=float, help="seconds one generate run may take")
    ap.add_argument("--json")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="zmoe-eplb-")
    common = ["--threads", str(args.threads), "--device", args.device, "--trace-steps"]
    if args.config:
        with open(os.path.join(args.config, "config.json")) as f:
            cfg = json.load(f)
        cfg["num_hidden_layers"] = args.layers
        model = os.path.join(tmp, "config")
        os.makedirs(model)
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump(cfg, f)
        E = cfg.get("num_experts", cfg.get("num_local_experts"))
        H, I = cfg["hidden_size"], cfg["moe_intermediate_size"]
        common += ["--load-format", "dummy", "--dummy-router-skew", str(args.dummy_router_skew)]
        skew_desc = f"dummy weights, --dummy-router-skew {args.dummy_router_skew}"
        L = sum(1 for l in range(args.layers) if l not in cfg.get("mlp_only_layers", []))
    else:
        model = args.model or os.path.join(tmp, "skewed")
        if not args.model:
            make_demo(args.zmoe, model, args.experts, args.layers, args.hidden, args.moe_intermediate, args.skew)
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        E, H, I, L = cfg["num_experts"], cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["num_hidden_layers"]
        skew_desc = f"make-demo --router-skew {args.skew}"
    lo, hi = (int(x) for x in args.prompt_len.split(","))
    reqs = os.path.join(tmp, "requests.jsonl")
    write_requests(reqs, args.requests, lambda rng: rng.randrange(lo, hi), args.max_tokens)
    for flag in ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization"):
        if getattr(args, flag) is not None:
            common += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    N = args.workers
    runs = {"fixed": run_generate(args.zmoe, model, reqs, N, common, tmp, "fixed", args.run_timeout)}
    failed = {}
    # The initial placement with the redundant slots, never rebalanced: what the slots alone give.
    runs["fixed_redundant"] = run_generate(args.zmoe, model, reqs, N,
                                           common + ["--num-redundant-experts", str(args.redundant)], tmp,
                                           "fixed_redundant", args.run_timeout)
    for st in [int(x) for x in args.stage_steps.split(",") if x != ""]:
        try:
            runs[f"eplb_stage{st}"] = run_generate(
                args.zmoe, model, reqs, N,
                common + ["--enable-eplb", "--eplb-interval", str(args.interval), "--eplb-window", str(args.window),
                          "--num-redundant-experts", str(args.redundant), "--eplb-stage-steps", str(st)],
                tmp, f"eplb{st}", args.run_timeout)
        except RuntimeError as e:  # reported, and the other runs still are
            failed[f"eplb_stage{st}"] = str(e)
            print(f"eplb_stage{st} failed: {e}", file=sys.stderr)
    base_tokens = runs["fixed"][2]
    result = {"device": args.device, "model": args.config or args.model or "make-demo", "hidden": H,
              "moe_intermediate": I, "moe_layers": L, "experts": E, "top_k": cfg.get("num_experts_per_tok"),
              "workers": N, "redundant": args.redundant, "skew": skew_desc, "requests": args.requests,
              "max_tokens": args.max_tokens, "prompt_len": [lo, hi], "warmup_steps": args.warmup,
              "eplb_interval": args.interval, "eplb_window": args.window, "runs": {}, "failed_runs": failed}
    print(f"EPLB bench: {L} MoE layers x {E} experts (top-{cfg.get('num_experts_per_tok')}), hidden {H}, expert "
          f"FFN {I}, {skew_desc}; {N} {args.device} workers, {args.requests} requests x {args.max_tokens} tokens")
    for name, (m, wall, tokens) in runs.items():
        c = m["engine_core"]["counters"]
        g = m["engine_core"]["gauges"]
        placement = m.get("eplb_placement") if name != "fixed" else [list(range(E)) for _ in range(L)]
        r = analyse(m, args.warmup)
        r["balancedness"] = balancedness(expert_load(m, L, E), placement, N)
        r["wall_s"] = wall
        r["tokens_identical_to_fixed"] = tokens == base_tokens
        r["decode_floor_ms_mean"] = (c.get("decode_floor_step_ms", 0) / c["decode_steps"]
                                     if c.get("decode_steps") else None)
        if name.startswith("eplb"):
            r["moves"] = {"rebalances": c.get("eplb_rebalances", 0), "slot_moves": c.get("eplb_expert_moves", 0),
                          "bytes_moved": c.get("eplb_bytes_moved", 0),
                          "switches_waited": c.get("eplb_switches_waited", 0),
                          "transfer_ms": hist(m, "eplb_transfer_ms"), "install_ms": hist(m, "eplb_install_ms"),
                          "switch_ms": hist(m, "eplb_switch_ms"), "stage_to_switch_ms": hist(m, "eplb_move_ms"),
                          "last_before": g.get("eplb_balancedness_before"),
                          "last_after": g.get("eplb_balancedness_after")}
        r["steps"] = m.get("steps", [])
        result["runs"][name] = r
    names = list(runs)
    print(f"  {'':<44}" + "".join(f"{n:>18}" for n in names))

    def row(label, f):
        print(f"  {label:<44}" + "".join(f"{f(result['runs'][n]):>18}" for n in names))

    row("balancedness (mean/max tokens per rank)", lambda r: fmt(r["balancedness"], 3))
    for key, label in (("all", "all steps"), ("decode", "decode steps"),
                       ("decode_steady", f"decode steps from step {args.warmup}"),
                       ("decode_steady_without_eplb_events", "  same, without stage/switch steps"),
                       ("prefill_or_mixed", "prefill/mixed steps")):
        row(f"{label}: count", lambda r, k=key: str(r[k]["count"]))
        row(f"{label}: p50 / p90 / p99 ms", lambda r, k=key: "/".join(
            fmt(r[k].get(q), 1) for q in ("p50", "p90", "p99")))
        row(f"{label}: mean ms", lambda r, k=key: fmt(r[k].get("mean")))
    row("decode floor ms (mean)", lambda r: fmt(r["decode_floor_ms_mean"]))
    row("rebalances / slot moves", lambda r: "-" if "moves" not in r else
        f"{r['moves']['rebalances']:.0f}/{r['moves']['slot_moves']:.0f}")
    row("GB moved (received, all ranks)", lambda r: "-" if "moves" not in r else
        fmt(r["moves"]["bytes_moved"] / 1e9, 3))
    row("transfer ms per rank: mean / max", lambda r: "-" if "moves" not in r or not r["moves"]["transfer_ms"]["count"]
        else f"{r['moves']['transfer_ms']['sum'] / r['moves']['transfer_ms']['count']:.2f}/"
             f"{r['moves']['transfer_ms']['max']:.2f}")
    row("switch install ms per rank: mean / max", lambda r: "-" if "moves" not in r or
        not r["moves"]["install_ms"]["count"] else
        f"{r['moves']['install_ms']['sum'] / r['moves']['install_ms']['count']:.2f}/{r['moves']['install_ms']['max']:.2f}")
    row("switches that waited for the transfer", lambda r: "-" if "moves" not in r else
        f"{r['moves']['switches_waited']:.0f}")
    row("wall s (incl. start-up)", lambda r: fmt(r["wall_s"]))
    row("greedy tokens identical to fixed", lambda r: str(r["tokens_identical_to_fixed"]))
    for n in names:
        r = result["runs"][n]
        print(f"  {n}: slowest steps: " + ", ".join(
            f"#{s['step']} {step_ms(s):.1f}ms {'decode' if s['decode'] else 'prefill'} {s['tokens']}t"
            + (f" [{s['eplb'].strip()}]" if s.get("eplb") else "") for s in r["slowest"][:6]))
        if r["eplb_event_steps"]:
            print(f"  {n}: EPLB event steps: " + ", ".join(
                f"#{s['step']} {step_ms(s):.1f}ms [{s['eplb'].strip()}]" for s in r["eplb_event_steps"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if not failed and all(result["runs"][n]["tokens_identical_to_fixed"] for n in names) else 1


if __name__ == "__main__":
    sys.exit(main())
