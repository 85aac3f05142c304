#!/usr/bin/env bash
# Long-context measurements on one GPU, Qwen3-30B-A3B dims with dummy weights, each step under its own time limit
# (a failing step does not stop the others); logs and JSON into OUT:
#   tests    kernels_test's decode attention tests
#   kernel   decode_attention_bench at 32 000 tokens of context, batch 1 and 4, the step's split and a sweep of others
#            (9 and 33: the counts before they were rounded to multiples of 8), 2 and 4 stages at the step's split,
#            each back to back and isolated (--isolated: no overlap with the launch before, as in the step);
#            and batch 1 / 64 / 256 at 128 and 4 096 (the short-context cases must not get slower)
#   step     zmoe bench step --context 32000 --batch-sizes 1,4: the decode step beside its memory floor (KV + weights);
#            and the usual table (context 128, batch 1 / 64 / 256)
#   prefill  zmoe bench prefill: 8 192 and 32 000-token prompts per chunk size, beside the FLOP floor
#   profile  ncu over one 8 192-token prefill of a 4-layer cut of the model (one step, and chunks of 2 048), kernel
#            time by name (bench/ncu_kernel_summary.py)
#   mixed    (only when named) zmoe bench mixed: an 8 192 / 32 000-token prompt arriving while 32 sequences decode,
#            per --max-num-batched-tokens: its TTFT beside the decodes' inter-token latency
#
#   workers  (only when named) workers_cuda_test's decode graph and transformers-reference tests
#   layers   (only when named) ncu over ~5 layers of one decode step at 32 000 tokens, batch 1 and 4, clocks and caches
#            as they are: each launch's time and DRAM bytes (bench/ncu_launch_table.py)
#
# ZMOE_DECODE_TUNING (kernels/decode_tuning.hpp) in the environment applies to every step: unset, the default
# decode-step kernel variants; `none` the older kernels, or a list of variants.
#   bench/longctx.sh [--out DIR] [--bin DIR] [--only tests,kernel,step,prefill,profile,mixed,workers,layers]
#                    [--peak-tflops 790] [--chunks 2048,4096,8192,16384,32768]
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
out=${OUT:-$top/build-cuda/longctx} bin=$top/build-cuda/bin only=tests,kernel,step,prefill,profile peak=790
chunks=2048,4096,8192,16384,32768
while (($#)); do
  case $1 in
    --out) out=$2; shift ;;
    --bin) bin=$2; shift ;;
    --only) only=$2; shift ;;
    --peak-tflops) peak=$2; shift ;;
    --chunks) chunks=$2; shift ;;
    *) echo "longctx.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
model=$top/bench/configs/qwen3-30b-a3b
want() { [[ ,$only, == *,$1,* ]]; }
step() {  # step NAME LIMIT_S CMD...: runs CMD under the limit, output to OUT/NAME.log and to stdout's tail
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  tail -40 "$out/$name.log"
}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
if want tests; then
  step tests 120 "$bin/kernels_test" --gtest_filter='*DecodeAttention*' --gtest_brief=1
fi
if want workers; then
  step workers 200 env NCCL_NVLS_ENABLE=0 "$bin/workers_cuda_test" --gtest_brief=1 \
    --gtest_filter='CudaGraphs*:CudaReference*:DecodeGraphBatchSizes*'
fi
if want kernel; then
  step kernel_32k 90 "$bin/decode_attention_bench" --batches 1,4 --contexts 32000 --stages 2,4 \
    --splits 8,9,16,24,32,33,48,99 --iters 10 --isolated --json "$out/decode_attention_32k.json"
  step kernel_short 60 "$bin/decode_attention_bench" --batches 1,64,256 --contexts 128,4096 --iters 10 \
    --json "$out/decode_attention_short.json"
fi
if want step; then
  step step_32k 150 "$bin/zmoe" bench step --model "$model" --load-format dummy --batch-sizes 1,4 --context 32000 \
    --steps 16 --json "$out/bench_step_32k.json"
  step step_128 120 "$bin/zmoe" bench step --model "$model" --load-format dummy --batch-sizes 1,64,256 \
    --json "$out/bench_step_128.json"
fi
if want prefill; then
  step prefill 150 "$bin/zmoe" bench prefill --model "$model" --load-format dummy --lens 8192,32000 \
    --chunks 2048,8192,32768 --reps 2 --peak-tflops "$peak" --steps --json "$out/prefill.json"
fi
if want profile; then
  cut=$out/qwen3-4layers
  mkdir -p "$cut"
  python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['num_hidden_layers']=4; json.dump(c, open(sys.argv[2], 'w'))" \
    "$model/config.json" "$cut/config.json"
  for chunk in 8192 2048; do
    step "ncu_$chunk" 120 ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --print-units base \
      --log-file "$out/ncu_$chunk.csv" "$bin/zmoe" bench prefill --model "$cut" --load-format dummy --lens 8192 \
      --chunks "$chunk" --reps 1 --profile-len 8192 --profile-chunk "$chunk"
    python3 bench/ncu_kernel_summary.py "$out/ncu_$chunk.csv" --layers 4 --json "$out/ncu_$chunk.json" 2>&1 | head -40
  done
fi
if want layers; then
  for b in 1 4; do
    step "layers_b$b" 150 ncu --profile-from-start off --launch-skip 90 --launch-count 45 --clock-control none \
      --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv \
      --print-units base --log-file "$out/layers_b$b.csv" "$bin/zmoe" bench step --model "$model" --load-format dummy \
      --batch-sizes "$b" --context 32000 --steps 1 --warmup 2 --profile
    python3 bench/ncu_launch_table.py "$out/layers_b$b.csv" --json "$out/layers_b$b.json" 2>&1 | head -70
  done
fi
if want mixed; then
  step mixed 240 "$bin/zmoe" bench mixed --model "$model" --load-format dummy --decodes 32 --decode-context 1024 \
    --lens 8192,32000 --chunks "$chunks" --json "$out/mixed.json"
fi
