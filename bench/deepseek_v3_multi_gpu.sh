#!/usr/bin/env bash
# DeepSeek-V3 dimensions on several GPUs of one host (issues 28 and 29), dummy weights cut to the layers that fit, in
# four parts, each under its own timeout so that one failure loses only itself:
#   exchange  `zmoe bench ep --exchange-only`: the MoE exchange per layer (dispatch + combine) at each
#             --exchange-tokens per rank, BF16 and FP8 dispatch, peer to peer and over NCCL;
#   served    `zmoe serve --quantization fp8 --ep-transport nccl` (FP8 weights, the FP8 dispatch) + `zmoe bench serve`
#             at each --seqs-per-gpu: decode and output tok/s per GPU beside the served decode step's floor; then
#             the same with --ep-transport auto (peer to peer, BF16 rows) for comparison (--served-transports);
#   ttft      bench/prefill_ttft.sh on the BF16 cut over the same workers: TTFT of one --ttft-len prompt at a time
#             beside its FLOP floor;
#   decode    BF16 decode steps beside their memory floor: `zmoe bench ep` (2+ workers) or `zmoe bench step` (1).
# The layer cuts: as many layers as fit one GPU (deepseek_v3_multi_gpu.py layers: the rank's weights, its workspace for
# the part's step shape — the expert-parallel receive buffers hold workers x tokens x top_k rows —, the MLA runner's,
# the KV cache the part needs, under --gpu-memory-utilization x the GPU's memory), or --fp8-layers / --bf16-layers.
# The served run takes prefill chunks of --served-batched-tokens (2048: its workspace leaves room for more layers;
# the decode steps it measures hold 128-256 tokens), the TTFT server one step of --ttft-len. Everything goes to --out: commands.sh (every command, as run), each part's logs and JSON,
# status.json (exit code and seconds per part), summary.md and summary.json (one table per part).
#
#   bench/deepseek_v3_multi_gpu.sh [--workers 4] [--device cuda|cpu] [--model bench/configs/deepseek-v3]
#       [--fp8-layers auto|N] [--bf16-layers auto|N] [--gpu-mem-gib auto|G] [--gpu-memory-utilization 0.9]
#       [--served-batched-tokens 2048] [--seqs-per-gpu 128,256] [--input-len 128] [--output-len 128] [--exchange-tokens 128,256]
#       [--ttft-len 8192] [--ttft-prompts 2] [--decode-batches 128,256] [--decode-fp8]
#       [--served-transports nccl,auto] [--only exchange,served,ttft,decode] [--timeouts exchange=90,...]
#       [--bin DIR] [--out DIR] [--plan]
# --plan: only print the layer cuts (and write their configs), run nothing.
#
# A CPU dry run of the same code paths (tiny fixture, CPU workers):
#   bench/deepseek_v3_multi_gpu.sh --device cpu --workers 2 --model tests/fixtures/models/deepseek_v3 \
#       --fp8-layers 3 --bf16-layers 3 --seqs-per-gpu 4,8 --ttft-len 256 --decode-batches 4 --bin build/bin
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
helper=$top/bench/deepseek_v3_multi_gpu.py
workers=4 device=cuda model=$top/bench/configs/deepseek-v3
fp8_layers=auto bf16_layers=auto gpu_mem_gib=auto util=0.9 served_batched_tokens=2048
seqs_per_gpu=128,256 input_len=128 output_len=128 exchange_tokens=128,256
ttft_len=8192 ttft_prompts=2 decode_batches=128,256 decode_fp8=0 served_transports=nccl,auto
only=exchange,served,ttft,decode plan=0
bin=$top/build-cuda/bin out=$top/build-cuda/deepseek_v3_multi_gpu
# Defaults sum to 540 s (one 4-GPU call of at most 600 s); on one H100 the parts took 11 / 3 / 3 s.
declare -A timeout_s=([exchange]=90 [served]=210 [ttft]=120 [decode]=120)
while (($#)); do
  case $1 in
    --workers) workers=$2; shift ;;
    --device) device=$2; shift ;;
    --model) model=$2; shift ;;
    --fp8-layers) fp8_layers=$2; shift ;;
    --bf16-layers) bf16_layers=$2; shift ;;
    --gpu-mem-gib) gpu_mem_gib=$2; shift ;;
    --gpu-memory-utilization) util=$2; shift ;;
    --served-batched-tokens) served_batched_tokens=$2; shift ;;
    --seqs-per-gpu) seqs_per_gpu=$2; shift ;;
    --input-len) input_len=$2; shift ;;
    --output-len) output_len=$2; shift ;;
    --exchange-tokens) exchange_tokens=$2; shift ;;
    --ttft-len) ttft_len=$2; shift ;;
    --ttft-prompts) ttft_prompts=$2; shift ;;
    --decode-batches) decode_batches=$2; shift ;;
    --decode-fp8) decode_fp8=1 ;;
    --served-transports) served_transports=$2; shift ;;
    --only) only=$2; shift ;;
    --timeouts)
      IFS=, read -ra kv <<<"$2"
      for x in "${kv[@]}"; do
        k=${x%%=*} v=${x#*=}
        [[ -n ${timeout_s[$k]+set} && $v =~ ^[0-9]+$ ]] || { echo "deepseek_v3_multi_gpu.sh: bad --timeouts entry '$x'" >&2; exit 2; }
        timeout_s[$k]=$v
      done
      shift ;;
    --bin) bin=$2; shift ;;
    --out) out=$2; shift ;;
    --plan) plan=1 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "deepseek_v3_multi_gpu.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $device == cuda || $device == cpu ]] || { echo "deepseek_v3_multi_gpu.sh: --device cuda or cpu" >&2; exit 2; }
for p in ${only//,/ }; do
  [[ -n ${timeout_s[$p]+set} ]] || { echo "deepseek_v3_multi_gpu.sh: --only: unknown part '$p'" >&2; exit 2; }
done
bin=$(cd "$bin" 2>/dev/null && pwd) || { echo "deepseek_v3_multi_gpu.sh: no --bin directory" >&2; exit 1; }
zmoe=$bin/zmoe
[[ -x $zmoe ]] || { echo "deepseek_v3_multi_gpu.sh: no zmoe at $zmoe (--bin DIR)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
model=$(cd "$model" && pwd)
: >"$out/commands.sh"
: >"$out/layers.log"
echo '{}' >"$out/status.json"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off (the GPU hosts do not support it)
echo "# $(date -u +%FT%TZ) $(cd "$top" && git rev-parse --short HEAD 2>/dev/null)" >>"$out/commands.sh"
echo "export NCCL_NVLS_ENABLE=0" >>"$out/commands.sh"

# Runs a command, printed and recorded first, under `timeout`; its output to $log (also shown at the end on failure).
run() {
  local t=$1 log=$2
  shift 2
  ((t >= 1)) || t=1  # a part's time already spent: fail fast (timeout 0 would mean none)
  local q
  q=$(printf '%q ' "$@")
  echo "+ $q" | tee -a "$out/commands.sh"
  timeout --kill-after=20 "$t" "$@" >"$log" 2>&1
  local rc=$?
  ((rc == 0)) || { echo "  exit $rc (log: $log)"; tail -15 "$log" | sed 's/^/  | /'; }
  return $rc
}

record() {  # part rc seconds
  python3 - "$out/status.json" "$1" "$2" "$3" <<'PY'
import json, sys
p, part, rc, s = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
j = json.load(open(p))
j[part] = {"rc": rc, "seconds": s}
json.dump(j, open(p, "w"), indent=1)
PY
}

max_of() { tr , '\n' <<<"$1" | sort -n | tail -1; }
if [[ $gpu_mem_gib == auto ]]; then
  if [[ $device == cuda ]] && command -v nvidia-smi >/dev/null; then
    mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | head -1)
    gpu_mem_gib=$(python3 -c "print($mib / 1024)")
  elif [[ $fp8_layers == auto || $bf16_layers == auto ]]; then
    echo "deepseek_v3_multi_gpu.sh: give --gpu-mem-gib (no nvidia-smi) or --fp8-layers and --bf16-layers" >&2
    exit 2
  fi
fi
served_max_seqs=$(max_of "$seqs_per_gpu")
served_max_len=$((input_len + output_len + 64))
decode_max_batch=$(max_of "$decode_batches")
decode_tokens=$((decode_max_batch > 4096 ? decode_max_batch : 4096))  # bench ep's and bench step's step budget
layers_for() {  # quantization max_num_batched_tokens max_num_seqs kv_tokens max_kv_len
  python3 "$helper" layers --config "$model/config.json" --workers "$workers" --quantization "$1" \
    --gpu-mem-gib "$gpu_mem_gib" --utilization "$util" --max-num-batched-tokens "$2" --max-num-seqs "$3" \
    --kv-tokens "$4" --max-kv-len "$5" 2>>"$out/layers.log"
}
if [[ $fp8_layers == auto ]]; then
  fp8_layers=$(layers_for fp8 "$served_batched_tokens" "$served_max_seqs" $((served_max_seqs * served_max_len)) \
    "$served_max_len") || exit 1
fi
if [[ $bf16_layers == auto ]]; then
  # One cut for the TTFT server (one prompt of --ttft-len in one step) and the decode steps: the smaller fit.
  a=$(layers_for bf16 "$ttft_len" 64 $((ttft_len + 64)) $((ttft_len + 64))) || exit 1
  b=$(layers_for bf16 "$decode_tokens" "$decode_max_batch" $((decode_max_batch * 140)) 140) || exit 1
  bf16_layers=$((a < b ? a : b))
fi
fp8_model=$out/configs/$(basename "$model")-${fp8_layers}l-fp8
bf16_model=$out/configs/$(basename "$model")-${bf16_layers}l-bf16
python3 "$helper" cut --config "$model/config.json" --layers "$fp8_layers" --out "$fp8_model" || exit 1
python3 "$helper" cut --config "$model/config.json" --layers "$bf16_layers" --out "$bf16_model" || exit 1
echo "deepseek_v3_multi_gpu.sh: $workers $device worker(s); FP8 cut $fp8_layers layers, BF16 cut $bf16_layers layers;" \
  "out $out"
[[ -s $out/layers.log ]] && sed 's/^/  /' "$out/layers.log"
((plan)) && exit 0

# A port below the kernel's ephemeral range (no outgoing connection is handed it meanwhile) that binds now.
free_port() {
  python3 - <<'PY'
import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(1000):
    port = random.randrange(10000, max(lo, 10001))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
PY
}

server_pid=
stop_server() {
  [[ -n $server_pid ]] || return 0
  kill -TERM "$server_pid" 2>/dev/null
  for _ in $(seq 1 300); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  server_pid=
}
trap stop_server EXIT

# Starts `zmoe serve ARGS` on a free port (log $1), waits for health at most $2 seconds; sets port, server_pid.
start_server() {
  local log=$1 wait_s=$2
  shift 2
  port=$(free_port)
  local q
  q=$(printf '%q ' "$zmoe" serve --port "$port" "$@")
  echo "+ $q &" | tee -a "$out/commands.sh"
  "$zmoe" serve --port "$port" "$@" >"$log" 2>&1 &
  server_pid=$!
  local deadline=$((SECONDS + wait_s))
  while ((SECONDS < deadline)); do
    "$zmoe" ctl health --endpoint "tcp://127.0.0.1:$port" --timeout-ms 500 >/dev/null 2>&1 && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.5
  done
  echo "  the server did not come up (log: $log)"
  tail -20 "$log" | sed 's/^/  | /'
  stop_server
  return 1
}

part_exchange() {
  mkdir -p "$out/exchange"
  if ((workers < 2)); then
    echo "  skipped: the exchange needs 2 or more workers"
    return 0
  fi
  # Dimensions only (no weights are loaded): the whole model's config.
  run "$1" "$out/exchange/bench_ep_exchange.log" "$zmoe" bench ep --model "$model" --device "$device" \
    --load-format dummy --workers "$workers" --exchange-only --exchange-tokens "$exchange_tokens" \
    --json "$out/exchange/bench_ep_exchange.json"
}

part_served() {
  mkdir -p "$out/served"
  local deadline=$((SECONDS + $1)) max_seqs=$served_max_seqs max_len=$served_max_len rc=0 ex
  python3 - "$out/served/run.json" <<PY
import json, sys
json.dump({"model": "$fp8_model", "layers": $fp8_layers, "workers": $workers, "device": "$device",
           "quantization": "fp8", "input_len": $input_len, "output_len": $output_len,
           "max_num_batched_tokens": $served_batched_tokens,
           "gpu_memory_utilization": $util}, open(sys.argv[1], "w"), indent=1)
PY
  for ex in ${served_transports//,/ }; do
    local log=$out/served/serve_$ex.log
    start_server "$log" $((deadline - SECONDS)) --model "$fp8_model" --device "$device" --workers "$workers" \
      --load-format dummy --quantization fp8 --ep-transport "$ex" --skip-tokenizer-init --max-num-seqs "$max_seqs" \
      --max-model-len "$max_len" --max-num-batched-tokens "$served_batched_tokens" --gpu-memory-utilization "$util" ||
      { rc=1; continue; }
    # What the workers say they loaded and how they exchange (FP8 dispatch or not).
    grep -h "cuda worker .* MiB weights" "$log" | sed 's/^/  /'
    local dispatch
    dispatch=$(grep -c "FP8 dispatch" "$log")
    python3 - "$out/served/run.json" "$ex" "$dispatch" "$(grep -h 'cuda worker .* MiB weights' "$log" | head -1)" <<'PY'
import json, sys
p, ex, n, line = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
j = json.load(open(p))
j[f"workers_with_fp8_dispatch[{ex}]"] = n
if line:
    j["worker_0_memory"] = line[line.find("cuda worker"):]
json.dump(j, open(p, "w"), indent=1)
PY
    # One untimed pass (lazy module loads, the first prefill shapes), then each load. Every pass draws its prompts
    # from its own seed: the prefix cache must not serve a prompt an earlier pass sent.
    run $((deadline - SECONDS)) "$out/served/warmup_$ex.log" "$zmoe" bench serve --endpoint "tcp://127.0.0.1:$port" \
      --model "$fp8_model" --num-prompts $((workers * 4)) --max-concurrency $((workers * 4)) \
      --random-input-len "$input_len" --random-output-len 16 --seed 987654 || rc=1
    for s in ${seqs_per_gpu//,/ }; do
      local n=$((s * workers))
      run $((deadline - SECONDS)) "$out/served/${ex}_seqs$s.log" "$zmoe" bench serve \
        --endpoint "tcp://127.0.0.1:$port" --model "$fp8_model" --num-prompts "$n" --max-concurrency "$n" \
        --random-input-len "$input_len" --random-output-len "$output_len" --seed $((1000 + s)) \
        --json "$out/served/fp8_${ex}_seqs$s.json" ||
        rc=1
    done
    "$zmoe" ctl metrics --json --endpoint "tcp://127.0.0.1:$port" >"$out/served/metrics_$ex.json" 2>&1
    python3 - "$out/served/run.json" "$ex" "$out/served/metrics_$ex.json" <<'PY'
import json, sys
p, ex, m = sys.argv[1], sys.argv[2], sys.argv[3]
j = json.load(open(p))
try:
    j[f"prefix_cache_hits[{ex}]"] = json.load(open(m))["engine_core"]["counters"].get("prefix_cache_hits", 0)
except (OSError, ValueError, KeyError):
    j[f"prefix_cache_hits[{ex}]"] = None
json.dump(j, open(p, "w"), indent=1)
PY
    stop_server
  done
  return $rc
}

part_ttft() {
  mkdir -p "$out/ttft"
  local q
  q=$(printf '%q ' env ZMOE="$zmoe" PEAK_BIN="$bin/prefill_attention_bench" "$top/bench/prefill_ttft.sh" \
    --device "$device" --model "$bf16_model" --lens "$ttft_len" --prompts "$ttft_prompts" --out "$out/ttft" -- \
    --workers "$workers" --skip-tokenizer-init --max-model-len $((ttft_len + 64)) --max-num-batched-tokens "$ttft_len" \
    --gpu-memory-utilization "$util")
  echo "+ $q" | tee -a "$out/commands.sh"
  timeout --kill-after=20 "$1" env ZMOE="$zmoe" PEAK_BIN="$bin/prefill_attention_bench" "$top/bench/prefill_ttft.sh" \
    --device "$device" --model "$bf16_model" --lens "$ttft_len" --prompts "$ttft_prompts" --out "$out/ttft" -- \
    --workers "$workers" --skip-tokenizer-init --max-model-len $((ttft_len + 64)) --max-num-batched-tokens "$ttft_len" \
    --gpu-memory-utilization "$util" >"$out/ttft/prefill_ttft.log" 2>&1
  local rc=$?
  grep '^+ ' "$out/ttft/prefill_ttft.log" | sed 's/^/  /' | tee -a "$out/commands.sh"  # the commands it ran
  ((rc == 0)) || { echo "  exit $rc (log: $out/ttft/prefill_ttft.log)"; tail -15 "$out/ttft/prefill_ttft.log" | sed 's/^/  | /'; }
  return $rc
}

part_decode() {
  mkdir -p "$out/decode"
  local deadline=$((SECONDS + $1)) rc=0 b
  local -a runs=("bf16:$bf16_model:")
  ((decode_fp8)) && runs+=("fp8:$fp8_model:fp8")
  for r in "${runs[@]}"; do
    IFS=: read -r tag dir quant <<<"$r"
    if ((workers >= 2)); then
      for b in ${decode_batches//,/ }; do
        run $((deadline - SECONDS)) "$out/decode/bench_ep_${tag}_b$b.log" "$zmoe" bench ep --model "$dir" \
          --device "$device" --load-format dummy --quantization "$quant" --workers "$workers" --batch "$b" \
          --context 128 --steps 8 --warmup 2 --skip-single --skip-dbo --skip-exchange \
          --json "$out/decode/bench_ep_${tag}_b$b.json" || rc=1
      done
    else
      run $((deadline - SECONDS)) "$out/decode/bench_step_$tag.log" "$zmoe" bench step --model "$dir" \
        --device "$device" --load-format dummy --quantization "$quant" --batch-sizes "$decode_batches" --context 128 \
        --steps 8 --warmup 2 --gpu-memory-utilization "$util" --json "$out/decode/bench_step_$tag.json" || rc=1
    fi
  done
  return $rc
}

for p in ${only//,/ }; do
  echo "== $p (timeout ${timeout_s[$p]} s)"
  echo "# part $p" >>"$out/commands.sh"
  t0=$SECONDS
  "part_$p" "${timeout_s[$p]}"
  rc=$?
  stop_server
  record "$p" "$rc" $((SECONDS - t0))
  python3 "$helper" summary --out "$out" --part "$p" | tee "$out/$p/table.md"
done
python3 "$helper" summary --out "$out" >/dev/null
echo "== summary: $out/summary.md, $out/summary.json; commands: $out/commands.sh"
