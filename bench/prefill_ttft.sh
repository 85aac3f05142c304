#!/usr/bin/env bash
# Time to first token of one long prompt at a time, beside its FLOP floor: one `zmoe serve` on this machine (dummy
# weights by default), then `zmoe bench serve` at concurrency 1 with prompts of each --lens length and one output
# token; the floor is the prompt's matrix FLOPs (every projection, the routed and shared experts of top_k, the causal
# attention products, the LM head of the last token) at the device's BF16 GEMM rate measured in the same run
# (prefill_attention_bench's cuBLASLt 8192^3 median). MLA models count the expanded prefill form the CUDA worker runs
# (kv_b over every position, attention with qk = nope + rope and v = v_head_dim). With `--workers N` among the serve
# arguments (expert parallelism over N GPUs), the prompt runs on one rank and its routed experts on all N: the floor
# counts the routed experts' FLOPs at N times the rate, the rest (attention, dense and shared MLPs, LM head) at one.
# --device cpu serves on CPU workers (a dry run of the same commands): no GEMM rate there, so no floor.
#
#   bench/prefill_ttft.sh --model DIR [--lens 1024,8192,32000] [--prompts 3] [--zmoe BIN] [--out DIR]
#       [--device cuda|cpu] [-- SERVE_ARGS...]
#
# Defaults to bench/configs/deepseek-v2-lite, --max-model-len 32768 (the longest prompt + 1 must fit) and the
# server's other defaults (pass --max-num-batched-tokens N after -- to change the prefill chunk). Writes
# OUT/len_L.json (bench serve's JSON), OUT/summary.json and OUT/serve.log.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
model=$top/bench/configs/deepseek-v2-lite lens=1024,8192,32000 prompts=3 device=cuda
zmoe=${ZMOE:-$top/build-cuda/bin/zmoe}
peak_bin=${PEAK_BIN:-$top/build-cuda/bin/prefill_attention_bench}
out=${OUT:-$top/build-cuda/prefill_ttft}
serve_args=()
while (($#)); do
  case $1 in
    --model) model=$2; shift ;;
    --lens) lens=$2; shift ;;
    --prompts) prompts=$2; shift ;;
    --zmoe) zmoe=$2; shift ;;
    --out) out=$2; shift ;;
    --device) device=$2; shift ;;
    --) shift; serve_args=("$@"); break ;;
    *) echo "prefill_ttft.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ -x $zmoe ]] || { echo "prefill_ttft.sh: no zmoe at $zmoe (--zmoe BIN)" >&2; exit 1; }
[[ $device == cuda || $device == cpu ]] || { echo "prefill_ttft.sh: --device cuda or cpu, not $device" >&2; exit 2; }
mkdir -p "$out"
if [[ $device == cuda ]]; then
  [[ -x $peak_bin ]] || { echo "prefill_ttft.sh: no prefill_attention_bench at $peak_bin (PEAK_BIN=...)" >&2; exit 1; }
  echo "+ $peak_bin --seqs 1024 --layouts contiguous --impls mma --iters 2 --json $out/peak.json"
  "$peak_bin" --seqs 1024 --layouts contiguous --impls mma --iters 2 --json "$out/peak.json" >"$out/peak.log" 2>&1 ||
    { echo "prefill_ttft.sh: the GEMM rate measurement failed:"; tail -5 "$out/peak.log"; exit 1; }
else
  rm -f "$out/peak.json"
fi
has_len=0 workers=1
for ((i = 0; i < ${#serve_args[@]}; ++i)); do
  [[ ${serve_args[i]} == --max-model-len ]] && has_len=1
  [[ ${serve_args[i]} == --workers ]] && workers=${serve_args[i + 1]}
done
((has_len)) || serve_args+=(--max-model-len 32768)
port=$((20000 + RANDOM % 20000))
echo "+ $zmoe serve --model $model --device $device --load-format dummy --port $port ${serve_args[*]}"
"$zmoe" serve --model "$model" --device "$device" --load-format dummy --port "$port" "${serve_args[@]}" >"$out/serve.log" 2>&1 &
spid=$!
stop() { kill -TERM "$spid" 2>/dev/null; for _ in $(seq 1 300); do kill -0 "$spid" 2>/dev/null || return; sleep 0.1; done; kill -KILL "$spid" 2>/dev/null; }
trap stop EXIT
ok=0
for _ in $(seq 1 1800); do
  if "$zmoe" ctl health --endpoint "tcp://127.0.0.1:$port" --timeout-ms 500 >/dev/null 2>&1; then ok=1; break; fi
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.2
done
((ok)) || { echo "prefill_ttft.sh: the server did not come up (see $out/serve.log)" >&2; tail -20 "$out/serve.log" >&2; exit 1; }
IFS=, read -ra len_list <<<"$lens"
# One warm-up request (lazy module loads, cuBLASLt plans) per worker, side by side so that each rank takes one, of the
# shortest length asked (its shapes); then each length. The warm-up and each length draw their prompts from seeds of
# their own: with one seed the warm-up would send the measured prompts themselves, and a longer length's prompts would
# begin with a shorter one's tokens, which the prefix cache would then serve.
warm_len=$(printf '%s\n' "${len_list[@]}" | sort -n | head -1)
echo "+ $zmoe bench serve --endpoint tcp://127.0.0.1:$port --model $model --num-prompts $workers" \
  "--random-input-len $warm_len --random-output-len 1 --max-concurrency $workers --seed 987654"
"$zmoe" bench serve --endpoint "tcp://127.0.0.1:$port" --model "$model" --num-prompts "$workers" \
  --random-input-len "$warm_len" --random-output-len 1 --max-concurrency "$workers" --seed 987654 \
  >"$out/warmup.log" 2>&1
for l in "${len_list[@]}"; do
  echo "== $prompts prompts of $l tokens, one at a time"
  echo "+ $zmoe bench serve --endpoint tcp://127.0.0.1:$port --model $model --num-prompts $prompts" \
    "--random-input-len $l --random-output-len 1 --max-concurrency 1 --seed $((100000 + l)) --json $out/len_$l.json"
  "$zmoe" bench serve --endpoint "tcp://127.0.0.1:$port" --model "$model" --num-prompts "$prompts" \
    --random-input-len "$l" --random-output-len 1 --max-concurrency 1 --seed $((100000 + l)) \
    --json "$out/len_$l.json" >"$out/len_$l.log" 2>&1 ||
    { echo "bench serve at $l tokens failed:"; tail -20 "$out/len_$l.log"; }
done
# The engine's counters after the run: its prefix-cache hits must be none (every prompt computed in full).
"$zmoe" ctl metrics --json --endpoint "tcp://127.0.0.1:$port" >"$out/metrics.json" 2>/dev/null
python3 - "$out" "$model/config.json" "$workers" "${len_list[@]}" <<'PY'
import json, os, sys
out, config_path, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    hits = json.load(open(os.path.join(out, "metrics.json")))["engine_core"]["counters"].get("prefix_cache_hits", 0)
except (OSError, ValueError, KeyError):
    hits = None
lens = [int(x) for x in sys.argv[4:]]
c = json.load(open(config_path))
peak_path = os.path.join(out, "peak.json")
peak = json.load(open(peak_path))["gemm_peak_flops"] if os.path.exists(peak_path) else None
H, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
heads = c["num_attention_heads"]
mla = "kv_lora_rank" in c
E = c.get("n_routed_experts", c.get("num_experts", 0)) or 0
top_k = c.get("num_experts_per_tok", 0) or 0
shared = c.get("n_shared_experts", 0) or 0
moe_inter = c.get("moe_intermediate_size", 0) or 0
dense_layers = c.get("first_k_dense_replace", 0) if E else L


def floor_flops(T):
    """(FLOPs on the prompt's rank, routed-expert FLOPs spread over the ranks)."""
    f = 0.0
    if mla:
        r, dr, dn, dv = c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
        qk, qr = dn + dr, c.get("q_lora_rank")
        q = (H * qr + qr * heads * qk) if qr else H * heads * qk
        per_tok = q + H * (r + dr) + r * heads * (dn + dv) + heads * dv * H
        attn = heads * (qk + dv) * T * T  # causal: 2 products x 2 FLOPs x T^2 / 2
    else:
        d = c.get("head_dim", H // heads)
        kv = c.get("num_key_value_heads", heads)
        per_tok = H * (heads + 2 * kv) * d + heads * d * H
        attn = heads * 2 * d * T * T
    f += L * (2 * per_tok * T + attn)
    f += dense_layers * 2 * 3 * H * c["intermediate_size"] * T
    routed = 0.0
    if E:
        f += (L - dense_layers) * (2 * 3 * H * moe_inter * shared * T + 2 * H * E * T)
        routed = (L - dense_layers) * 2 * 3 * H * moe_inter * top_k * T
    return f + 2 * H * V, routed  # the last token's logits


def floor_ms_of(T):
    if peak is None:
        return None
    local, routed = floor_flops(T)
    return (local + routed / workers) / peak * 1e3


rows = []
rate = f"BF16 GEMM rate {peak * 1e-12:.0f} TFLOP/s (cuBLASLt 8192^3, this run)" if peak else "no floor (CPU)"
print(f"\n{os.path.basename(os.path.dirname(config_path))}, dummy weights, {workers} worker(s), one request at a "
      f"time; {rate}")
print(f"{'prompt':>7} {'ok':>3} {'TTFT p50 ms':>12} {'floor ms':>9} {'x floor':>8} {'prompt tok/s':>13}")
fmt = lambda v, spec: "-" if v is None else format(v, spec)
for T in lens:
    p = os.path.join(out, f"len_{T}.json")
    floor_ms = floor_ms_of(T)
    local, routed = floor_flops(T)
    if not os.path.exists(p):
        print(f"{T:>7} {'-':>3} {'failed':>12} {fmt(floor_ms, '9.1f'):>9}")
        rows.append({"prompt_tokens": T, "floor_ms": floor_ms, "ttft_ms": None})
        continue
    j = json.load(open(p))
    ttft = j["median_ttft_ms"]
    ratio = ttft / floor_ms if floor_ms else None
    print(f"{T:>7} {j['completed']:>3} {ttft:>12.1f} {fmt(floor_ms, '9.1f'):>9} {fmt(ratio, '8.2f'):>8} "
          f"{T / ttft * 1e3 if ttft > 0 else 0:>13.0f}")
    rows.append({"prompt_tokens": T, "completed": j["completed"], "ttft_ms": ttft, "p99_ttft_ms": j.get("p99_ttft_ms"),
                 "floor_ms": floor_ms, "floor_flops": local + routed, "floor_flops_one_rank": local,
                 "floor_flops_routed_experts": routed})
if hits:
    print(f"WARNING: {hits:.0f} prefix-cache hits: some prompt was served from the cache, its TTFT is not a prefill's")
json.dump({"model": config_path, "workers": workers, "gemm_peak_flops": peak, "prefix_cache_hits": hits, "rows": rows},
          open(os.path.join(out, "summary.json"), "w"), indent=1)
PY
