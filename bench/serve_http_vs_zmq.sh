#!/usr/bin/env bash
# The front door measured: one `zmoe serve --http-port` on this machine, then `zmoe bench serve` with both
# --endpoint (ZeroMQ) and --base-url (the OpenAI HTTP gateway) at each concurrency cap, the two passes on the same
# prompts in the same run; a table of output tok/s and TTFT p50 side by side, with the ratios the gateway is held to
# (HTTP output tok/s within 5% of ZeroMQ's; HTTP TTFT p50 <= 1.2 x ZeroMQ's + 2 ms).
#
#   bench/serve_http_vs_zmq.sh --model DIR [--tokenizer DIR] [--load-format dummy] [--device cuda|cpu]
#       [--caps 1,64,512,4096] [--in 128] [--out-len 128] [--zmoe BIN] [--out DIR] [-- SERVE_ARGS...]
#
# Requests per cap: 16 at cap 1, else the cap itself times `--waves` (default 1, at least 64 requests): every stream
# of the largest cap is open at once. Writes OUT/cap_C.json (bench serve's JSON: "zmq" and "http" objects),
# OUT/summary.json and OUT/serve.log.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
model="" tokenizer="" load_format="" device=cuda caps=1,64,512,4096 in_len=128 out_len=128 waves=1
zmoe=${ZMOE:-$top/build-cuda/bin/zmoe}
out=${OUT:-$top/build-cuda/serve_http_vs_zmq}
serve_args=()
while (($#)); do
  case $1 in
    --model) model=$2; shift ;;
    --tokenizer) tokenizer=$2; shift ;;
    --load-format) load_format=$2; shift ;;
    --device) device=$2; shift ;;
    --caps) caps=$2; shift ;;
    --in) in_len=$2; shift ;;
    --out-len) out_len=$2; shift ;;
    --waves) waves=$2; shift ;;
    --zmoe) zmoe=$2; shift ;;
    --out) out=$2; shift ;;
    --) shift; serve_args=("$@"); break ;;
    *) echo "serve_http_vs_zmq.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ -n $model ]] || { echo "usage: bench/serve_http_vs_zmq.sh --model DIR [options] (see the header)" >&2; exit 2; }
[[ -x $zmoe ]] || { echo "serve_http_vs_zmq.sh: no zmoe at $zmoe (--zmoe BIN)" >&2; exit 1; }
mkdir -p "$out"
ulimit -n "$(ulimit -Hn)" 2>/dev/null
port=$((20000 + RANDOM % 20000))
http_port=$((port + 1))
args=(serve --model "$model" --device "$device" --port "$port" --http-port "$http_port")
[[ -n $tokenizer ]] && args+=(--tokenizer "$tokenizer")
[[ -n $load_format ]] && args+=(--load-format "$load_format")
"$zmoe" "${args[@]}" "${serve_args[@]}" >"$out/serve.log" 2>&1 &
spid=$!
stop() { kill -TERM "$spid" 2>/dev/null; for _ in $(seq 1 300); do kill -0 "$spid" 2>/dev/null || return; sleep 0.1; done; kill -KILL "$spid" 2>/dev/null; }
trap stop EXIT
ok=0
for _ in $(seq 1 1800); do
  if "$zmoe" ctl health --endpoint "tcp://127.0.0.1:$port" --timeout-ms 500 >/dev/null 2>&1; then ok=1; break; fi
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.2
done
((ok)) || { echo "serve_http_vs_zmq.sh: the server did not come up (see $out/serve.log)" >&2; tail -20 "$out/serve.log" >&2; exit 1; }
# The gateway answers /health once it has heard from the frontend.
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$http_port/health" >/dev/null && break
  sleep 0.2
done
bench_model=$model
IFS=, read -ra cap_list <<<"$caps"
for c in "${cap_list[@]}"; do
  n=$((c == 1 ? 16 : c * waves))
  ((n < 64 && c > 1)) && n=64
  echo "== cap $c: $n requests of $in_len in / $out_len out, ZeroMQ then HTTP"
  "$zmoe" bench serve --endpoint "tcp://127.0.0.1:$port" --base-url "http://127.0.0.1:$http_port" \
    --model "$bench_model" --num-prompts "$n" --random-input-len "$in_len" --random-output-len "$out_len" \
    --max-concurrency "$c" --json "$out/cap_$c.json" >"$out/cap_$c.log" 2>&1 ||
    { echo "bench serve at cap $c failed:"; tail -20 "$out/cap_$c.log"; }
done
python3 - "$out" "${cap_list[@]}" <<'EOF'
import json, os, sys
out, caps = sys.argv[1], sys.argv[2:]
rows = []
print(f"{'cap':>5} {'reqs':>6} {'zmq ok':>6} {'http ok':>7} {'zmq tok/s':>10} {'http tok/s':>10} {'ratio':>6} "
      f"{'zmq TTFT p50':>12} {'http TTFT p50':>13} {'bound':>8} {'met':>4}")
for c in caps:
    p = os.path.join(out, f"cap_{c}.json")
    if not os.path.exists(p):
        print(f"{c:>5} (no result)")
        continue
    r = json.load(open(p))
    z, h = r["zmq"], r["http"]
    ratio = h["output_throughput"] / z["output_throughput"] if z["output_throughput"] else 0.0
    bound = 1.2 * z["median_ttft_ms"] + 2.0
    met = ratio >= 0.95 and h["median_ttft_ms"] <= bound and h["failed"] == 0 and z["failed"] == 0
    rows.append({"cap": int(c), "num_prompts": r.get("num_prompts"), "zmq_completed": z["completed"],
                 "http_completed": h["completed"], "zmq_output_throughput": z["output_throughput"],
                 "http_output_throughput": h["output_throughput"], "throughput_ratio": ratio,
                 "zmq_median_ttft_ms": z["median_ttft_ms"], "http_median_ttft_ms": h["median_ttft_ms"],
                 "ttft_bound_ms": bound, "met": met})
    print(f"{c:>5} {r.get('num_prompts', 0):>6} {z['completed']:>6} {h['completed']:>7} {z['output_throughput']:>10.0f} "
          f"{h['output_throughput']:>10.0f} {ratio:>6.3f} {z['median_ttft_ms']:>12.1f} {h['median_ttft_ms']:>13.1f} "
          f"{bound:>8.1f} {'yes' if met else 'NO':>4}")
json.dump({"rows": rows}, open(os.path.join(out, "summary.json"), "w"), indent=1)
EOF
