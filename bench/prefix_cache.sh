#!/usr/bin/env bash
# The prefix cache measured at the door users use: `zmoe serve --load-format dummy` at Qwen3-30B-A3B's dimensions
# (bench/configs/qwen3-30b-a3b) on this machine's GPUs, and `zmoe bench serve --dataset multi-turn` against it:
# 64 conversations x 6 turns, a 2 000-token system prompt shared by all, 200 new user tokens and 128 output tokens
# per turn, every conversation in flight at once; each turn resends the whole history and the answers.
#
#   bench/prefix_cache.sh [--mode single|dp] [--gpus N] [--conversations 64] [--turns 6] [--system-len 2000]
#       [--user-len 200] [--out-len 128] [--max-concurrency 64] [--model DIR] [--device cuda|cpu] [--zmoe BIN]
#       [--out DIR] [-- SERVE_ARGS...]
#
# --mode single (default, one GPU): the same run twice, prefix caching on (the default) and off
#   ($NO_PREFIX_CACHING_FLAG), each on a fresh server; prints both side by side with the ratios the cache is held to
#   (TTFT p50 over turns 2..T at least 5x lower with it, output tok/s at least 1.5x higher).
# --mode dp (--gpus 2 or 4; default: 4 where the machine has 4 or more, else 2): one GPU with caching on (the
#   reference hit rate), then N data-parallel ranks with each placement policy ($DP_PLACEMENT_FLAG
#   $DP_PLACEMENT_CACHE_AWARE, then $DP_PLACEMENT_ROUND_ROBIN); prints each run's hit rate (cache-aware's is held to
#   at least 90% of the one-GPU rate) and each rank's running / waiting requests read every 0.5 s during the run
#   (no rank should sit idle while another has requests waiting).
#
# --device cpu runs the same on CPU workers: a smoke test of this script with a small --model (any config.json: the
# weights are dummy; e.g. zmoe make-demo's) and small lengths; its summary goes to OUT, not bench/results.
# Each run starts with a short warm-up (16 random prompts) that is not measured. Writes OUT/<run>.json (bench
# serve's JSON), OUT/<run>.log, OUT/serve_<run>.log and one summary bench/results/<date>_<device>_prefix_cache_<mode>.json
# (device from nvidia-smi).
set -u

# The prefix cache's and the placement policy's serve flags: confirm against `zmoe serve --help` of the build (the
# environment may override each).
NO_PREFIX_CACHING_FLAG=${NO_PREFIX_CACHING_FLAG:---no-enable-prefix-caching}
DP_PLACEMENT_FLAG=${DP_PLACEMENT_FLAG:---dp-placement}
DP_PLACEMENT_CACHE_AWARE=${DP_PLACEMENT_CACHE_AWARE:-cache-aware}
DP_PLACEMENT_ROUND_ROBIN=${DP_PLACEMENT_ROUND_ROBIN:-round-robin}

top=$(cd "$(dirname "$0")/.." && pwd)
mode=single gpus="" device_kind=cuda conversations=64 turns=6 system_len=2000 user_len=200 out_len=128 concurrency=64
model=$top/bench/configs/qwen3-30b-a3b
zmoe=${ZMOE:-$top/build-cuda/bin/zmoe}
out=${OUT:-$top/build-cuda/prefix_cache}
serve_args=()
while (($#)); do
  case $1 in
    --mode) mode=$2; shift ;;
    --gpus) gpus=$2; shift ;;
    --conversations) conversations=$2; shift ;;
    --turns) turns=$2; shift ;;
    --system-len) system_len=$2; shift ;;
    --user-len) user_len=$2; shift ;;
    --out-len) out_len=$2; shift ;;
    --max-concurrency) concurrency=$2; shift ;;
    --model) model=$2; shift ;;
    --device) device_kind=$2; shift ;;
    --zmoe) zmoe=$2; shift ;;
    --out) out=$2; shift ;;
    --) shift; serve_args=("$@"); break ;;
    *) echo "prefix_cache.sh: unknown option $1 (see the header)" >&2; exit 2 ;;
  esac
  shift
done
[[ $mode == single || $mode == dp ]] || { echo "prefix_cache.sh: --mode single or dp, not '$mode'" >&2; exit 2; }
[[ -x $zmoe ]] || { echo "prefix_cache.sh: no zmoe at $zmoe (scripts/build_cuda.sh, or --zmoe BIN)" >&2; exit 1; }
if [[ $device_kind == cuda ]]; then
  command -v nvidia-smi >/dev/null || { echo "prefix_cache.sh: no nvidia-smi: this runs on a GPU machine" >&2; exit 1; }
  num_gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
else
  num_gpus=4 device=cpu
fi
if [[ $mode == dp ]]; then
  [[ -n $gpus ]] || gpus=$((num_gpus >= 4 ? 4 : 2))
  ((gpus >= 2 && gpus <= num_gpus)) || { echo "prefix_cache.sh: --gpus $gpus, but this machine has $num_gpus" >&2; exit 1; }
fi
mkdir -p "$out"
tokenizer=$top/third_party/tokenizers/qwen3
if [[ -f $tokenizer/tokenizer.json ]]; then tok_args=(--tokenizer "$tokenizer"); else tok_args=(--skip-tokenizer-init); fi

spid=""
stop() {
  [[ -n $spid ]] || return 0
  kill -TERM "$spid" 2>/dev/null
  for _ in $(seq 1 300); do kill -0 "$spid" 2>/dev/null || { spid=""; return 0; }; sleep 0.1; done
  kill -KILL "$spid" 2>/dev/null
  spid=""
}
trap stop EXIT

# run_case NAME WORKERS [SERVE FLAGS...]: a fresh server, a warm-up, the measured multi-turn run, the server stopped.
run_case() {
  local name=$1 workers=$2
  shift 2
  local port=$((20000 + RANDOM % 20000))
  local endpoint=tcp://127.0.0.1:$port
  echo "== $name: $workers GPU(s), serve flags: ${*:-(none)}"
  "$zmoe" serve --model "$model" "${tok_args[@]}" --load-format dummy --device "$device_kind" --workers "$workers" \
    --port "$port" "$@" "${serve_args[@]}" >"$out/serve_$name.log" 2>&1 &
  spid=$!
  local ok=0
  for _ in $(seq 1 3000); do
    if "$zmoe" ctl health --endpoint "$endpoint" --timeout-ms 500 >/dev/null 2>&1; then ok=1; break; fi
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.2
  done
  if ((!ok)); then
    echo "prefix_cache.sh: the $name server did not come up (see $out/serve_$name.log):" >&2
    tail -20 "$out/serve_$name.log" >&2
    stop
    return 1
  fi
  "$zmoe" bench serve --endpoint "$endpoint" --model "$model" --num-prompts 16 --random-input-len 256 \
    --random-output-len 16 --max-concurrency 16 --seed 1 >"$out/warmup_$name.log" 2>&1 ||
    echo "prefix_cache.sh: the $name warm-up failed (see $out/warmup_$name.log)" >&2
  local sample=()
  ((workers > 1)) && sample=(--rank-sample-interval 0.5)
  "$zmoe" bench serve --endpoint "$endpoint" --model "$model" --dataset multi-turn \
    --multi-turn-num-conversations "$conversations" --multi-turn-num-turns "$turns" \
    --multi-turn-system-prompt-len "$system_len" --multi-turn-user-len "$user_len" \
    --multi-turn-output-len "$out_len" --max-concurrency "$concurrency" --seed 0 "${sample[@]}" \
    --json "$out/$name.json" >"$out/$name.log" 2>&1 ||
    { echo "prefix_cache.sh: bench serve ($name) failed:" >&2; tail -20 "$out/$name.log" >&2; }
  stop
}

if [[ $mode == single ]]; then
  cases=(on off)
  run_case on 1
  run_case off 1 "$NO_PREFIX_CACHING_FLAG"
else
  cases=(one_gpu cache_aware round_robin)
  run_case one_gpu 1
  run_case cache_aware "$gpus" "$DP_PLACEMENT_FLAG" "$DP_PLACEMENT_CACHE_AWARE"
  run_case round_robin "$gpus" "$DP_PLACEMENT_FLAG" "$DP_PLACEMENT_ROUND_ROBIN"
fi

results=$top/bench/results
[[ $device_kind == cuda ]] || results=$out
python3 - "$out" "$mode" "${gpus:-1}" "$device" "$results" "$conversations" "$turns" "$system_len" \
  "$user_len" "$out_len" "$concurrency" "$NO_PREFIX_CACHING_FLAG $DP_PLACEMENT_FLAG" "${cases[@]}" <<'EOF'
import datetime, json, os, re, sys
(out, mode, gpus, device, results, conversations, turns, system_len, user_len, out_len, concurrency, flags,
 *cases) = sys.argv[1:]
gpus = int(gpus)
runs = {}
for c in cases:
    p = os.path.join(out, c + ".json")
    runs[c] = json.load(open(p)) if os.path.exists(p) else None

def fmt(v, spec, unit=""):
    return "n/a" if v is None else format(v, spec) + unit

def pick(r):
    if r is None:
        return None
    return {"completed": r["completed"], "failed": r["failed"], "output_throughput": r["output_throughput"],
            "median_ttft_ms": r["median_ttft_ms"], "median_ttft_ms_later_turns": r.get("median_ttft_ms_later_turns"),
            "median_ttft_ms_by_turn": [t["median_ttft_ms"] for t in r.get("ttft_by_turn", [])],
            "prefix_cache_hit_rate": r.get("prefix_cache_hit_rate"),
            "prefix_cache_queries": r.get("prefix_cache_queries"), "prefix_cache_hits": r.get("prefix_cache_hits"),
            "prefix_cache_per_rank": r.get("prefix_cache_per_rank"), "ranks": r.get("ranks"),
            "idle_while_others_wait_fraction": r.get("idle_while_others_wait_fraction")}

summary = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "device": device,
           "gpus": gpus if mode == "dp" else 1, "mode": mode, "model": "qwen3-30b-a3b (dummy weights)",
           "workload": {"dataset": "multi-turn", "conversations": int(conversations), "turns": int(turns),
                        "system_prompt_len": int(system_len), "user_len": int(user_len), "output_len": int(out_len),
                        "max_concurrency": int(concurrency)},
           "flags": flags, "runs": {c: pick(r) for c, r in runs.items()}}

print()
head = f"{'run':>12} {'ok':>5} {'failed':>6} {'out tok/s':>10} {'TTFT p50':>9} {'TTFT p50 t2+':>13} {'hit rate':>9}"
print(head + "   TTFT p50 per turn (ms)")
for c, r in runs.items():
    if r is None:
        print(f"{c:>12} (no result: see {out}/{c}.log)")
        continue
    rate = r.get("prefix_cache_hit_rate")
    per_turn = " ".join(f"{t['median_ttft_ms']:.0f}" for t in r.get("ttft_by_turn", []))
    print(f"{c:>12} {r['completed']:>5} {r['failed']:>6} {r['output_throughput']:>10.1f} {r['median_ttft_ms']:>9.1f} "
          f"{fmt(r.get('median_ttft_ms_later_turns'), '.1f'):>13} {fmt(None if rate is None else 100 * rate, '.1f', '%'):>9}"
          f"   {per_turn}")

if mode == "single" and runs.get("on") and runs.get("off"):
    on, off = runs["on"], runs["off"]
    ttft_ratio = (off["median_ttft_ms_later_turns"] / on["median_ttft_ms_later_turns"]
                  if on.get("median_ttft_ms_later_turns") else None)
    tput_ratio = on["output_throughput"] / off["output_throughput"] if off["output_throughput"] else None
    summary["ttft_p50_later_turns_off_over_on"] = ttft_ratio
    summary["output_throughput_on_over_off"] = tput_ratio
    summary["met"] = bool(ttft_ratio and tput_ratio and ttft_ratio >= 5.0 and tput_ratio >= 1.5
                          and on["failed"] == 0 and off["failed"] == 0)
    print()
    print(f"TTFT p50 over turns 2..{turns}, off / on: {fmt(ttft_ratio, '.2f')}x (held to >= 5x)")
    print(f"output tok/s, on / off:               {fmt(tput_ratio, '.2f')}x (held to >= 1.5x)")
    print(f"met: {'yes' if summary['met'] else 'NO'}")
elif mode == "dp":
    ref = runs.get("one_gpu") or {}
    ref_rate = ref.get("prefix_cache_hit_rate")
    print()
    for c in ("cache_aware", "round_robin"):
        r = runs.get(c)
        if not r:
            continue
        rate = r.get("prefix_cache_hit_rate")
        rel = rate / ref_rate if rate is not None and ref_rate else None
        summary["runs"][c]["hit_rate_over_one_gpu"] = rel
        print(f"{c}: hit rate {fmt(None if rate is None else 100 * rate, '.1f', '%')} = {fmt(rel, '.3f')} x the one-GPU "
              f"rate; reads with a rank idle while another had requests waiting: "
              f"{fmt(r.get('idle_while_others_wait_fraction'), '.3f')}")
        print(f"  {'rank':>4} {'hit rate':>9} {'mean running':>13} {'mean waiting':>13} {'max waiting':>12} "
              f"{'idle reads':>11} {'idle, others wait':>18}")
        hits = {str(x["rank"]): x.get("hit_rate") for x in (r.get("prefix_cache_per_rank") or [])}
        for x in r.get("ranks") or []:
            h = hits.get(str(x["rank"]))
            print(f"  {x['rank']:>4} {fmt(None if h is None else 100 * h, '.1f', '%'):>9} {x['mean_running']:>13.2f} "
                  f"{x['mean_waiting']:>13.2f} {x['max_waiting']:>12.0f} {x['idle_samples']:>11} "
                  f"{x['idle_while_others_wait_samples']:>18}")
    ca = summary["runs"].get("cache_aware") or {}
    summary["met"] = bool(ca.get("hit_rate_over_one_gpu") and ca["hit_rate_over_one_gpu"] >= 0.9
                          and not ca.get("idle_while_others_wait_fraction"))
    print(f"met (cache-aware hit rate >= 0.9 x one GPU's, no rank idle while others wait): "
          f"{'yes' if summary['met'] else 'NO'}")

tag = re.search(r"(H100|H200|H20|B200|GB200|A100|L40S|L4)", device.upper())
tag = tag.group(1).lower() if tag else re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
if mode == "dp":
    tag = f"{gpus}x{tag}"
day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
path = os.path.join(results, f"{day}_{tag}_prefix_cache_{mode}.json")
json.dump(summary, open(path, "w"), indent=1)
print(f"\nwrote {path}")
EOF
