#!/usr/bin/env bash
# End-to-end checks of the CUDA workers on this machine's GPUs, on the zmoe that `scripts/gpu_check.sh` (or
# scripts/build_cuda.sh) built: `scripts/gpu_e2e.sh [--build-dir DIR]` (or ZMOE_BUILD_DIR; default build-cuda,
# relative to the repository); OUT (default DIR/gpu_e2e) receives the logs and results.
#   1. zmoe serve --device cuda --workers 2 (1 on a one-GPU machine) with 4 concurrent `zmoe client` processes (68
#      streaming requests): every reply equals the transformers reference (up to BF16-settleable margins), SIGTERM
#      exits 0 within 10 s;
#   2. zmoe generate --device cuda --workers W --enable-eplb (NCCL expert moves): reference tokens, rebalances > 0;
#   3. bench/eplb/eplb_bench.py --device cuda on a skewed-router checkpoint (balancedness and step time).
# Parts 2 and 3 need 2 GPUs or more (one worker per GPU) and are skipped, saying so, on one. Needs python3.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=${ZMOE_BUILD_DIR:-${BUILD_DIR:-build-cuda}}
while (($#)); do
  case $1 in
    --build-dir) [[ $# -ge 2 ]] || { echo "usage: scripts/gpu_e2e.sh [--build-dir DIR]" >&2; exit 2; }; build=$2; shift ;;
    *) echo "usage: scripts/gpu_e2e.sh [--build-dir DIR]" >&2; exit 2 ;;
  esac
  shift
done
[[ $build == /* ]] || build=$top/$build
Z=$build/bin/zmoe
[[ -x $Z ]] || { echo "gpu_e2e.sh: no $Z: run scripts/gpu_check.sh (or scripts/build_cuda.sh) first" >&2; exit 1; }
command -v nvidia-smi >/dev/null || { echo "gpu_e2e.sh: no nvidia-smi: this machine has no NVIDIA GPU" >&2; exit 1; }
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-$build/gpu_e2e}
mkdir -p "$OUT"
ngpu=$(nvidia-smi -L | wc -l)
W=$((ngpu >= 4 ? 4 : ngpu))
serve_workers=$((ngpu >= 2 ? 2 : 1))
check=scripts/check_generate.py
fails=0

# 1. serve + concurrent clients
m=tests/fixtures/models/qwen3_moe
python3 $check make $m >"$OUT/in6.jsonl"
for c in 0 1 2 3; do
  for rep in $(seq 0 16); do cat "$OUT/in6.jsonl"; done | sed -n "$((c * 17 + 1)),$((c * 17 + 17))p" >"$OUT/client_$c.jsonl"
done
port=5700
$Z serve --model $m --device cuda --workers $serve_workers --port $port --num-kv-blocks 2048 --skip-tokenizer-init \
  >"$OUT/serve.log" 2>&1 &
spid=$!
for _ in $(seq 1 600); do
  $Z ctl health --endpoint tcp://127.0.0.1:$port --timeout-ms 500 >/dev/null 2>&1 && break
  sleep 0.2
done
cpids=()
for c in 0 1 2 3; do
  $Z client --endpoint tcp://127.0.0.1:$port --input "$OUT/client_$c.jsonl" --output "$OUT/client_$c.out.jsonl" &
  cpids+=($!)
done
for p in "${cpids[@]}"; do wait "$p" || { echo "client failed"; fails=$((fails + 1)); }; done
python3 - "$m" "$OUT" <<'PY' || fails=$((fails + 1))
import json, sys
ref = json.load(open(sys.argv[1] + "/reference.json"))["prompts"]
n, bad, compared = 0, [], 0
for c in range(4):
    outs = [json.loads(l) for l in open(f"{sys.argv[2]}/client_{c}.out.jsonl")]
    for i, o in enumerate(outs):
        p = ref[(c * 17 + i) % len(ref)]
        n += 1
        for t, want in enumerate(p["greedy"]):
            if p["margins"][t] < 0.1: break
            if o["token_ids"][t] != want: bad.append((c, i, t)); break
            compared += 1
print(f"serve --device cuda: {n} concurrent requests, {compared} tokens compared, {len(bad)} mismatches {bad[:5]}")
sys.exit(1 if bad or n != 68 else 0)
PY
kill -TERM $spid
t0=$(date +%s.%N)
wait $spid
src=$?
echo "serve exit status $src after SIGTERM in $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"
[[ $src -eq 0 ]] || fails=$((fails + 1))

if ((ngpu < 2)); then
  echo "generate --enable-eplb (NCCL expert moves) and the CUDA EPLB benchmark: skipped, one GPU ($ngpu)"
  echo "gpu_e2e failures: $fails"
  exit $fails
fi

# 2. EPLB with NCCL moves
for a in qwen3_moe olmoe; do
  m=tests/fixtures/models/$a
  python3 $check make $m >"$OUT/in_$a.jsonl"
  $Z generate --model $m --input "$OUT/in_$a.jsonl" --output "$OUT/eplb_$a.jsonl" --device cuda --workers $W \
    --enable-eplb --eplb-interval 4 --num-redundant-experts 4 --num-kv-blocks 512 \
    --metrics-json "$OUT/eplb_$a.metrics.json" >"$OUT/eplb_$a.log" 2>&1
  r=$?
  res=$(python3 $check check $m "$OUT/eplb_$a.jsonl") || fails=$((fails + 1))
  reb=$(python3 -c "import json;c=json.load(open('$OUT/eplb_$a.metrics.json'))['engine_core']['counters'];print(c.get('eplb_rebalances',0), c.get('eplb_bytes_moved',0))")
  echo "generate --enable-eplb $a workers=$W rc=$r $res; rebalances, bytes moved: $reb"
  [[ ${reb%% *} != 0 && ${reb%% *} != 0.0 ]] || fails=$((fails + 1))
done

# 3. EPLB benchmark on GPUs
set -o pipefail
python3 bench/eplb/eplb_bench.py --zmoe $Z --device cuda --workers $W --experts 32 --layers 4 --redundant 8 \
  --hidden 1024 --moe-intermediate 512 \
  --requests 256 --max-tokens 64 --json "$OUT/eplb_bench_cuda.json" 2>&1 | tee "$OUT/eplb_bench_cuda.txt" ||
  fails=$((fails + 1))
echo "gpu_e2e failures: $fails"
exit $fails
