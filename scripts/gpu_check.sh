#!/usr/bin/env bash
# Builds zmoe with CUDA (sm_90a) and runs its GPU checks on this machine's GPUs.
#   scripts/gpu_check.sh [kernels|workers|all] [--no-build] [--build-dir DIR]     (default: all)
#   kernels: the kernel tests (kernels_test: every CUDA kernel against its CPU reference over shapes), the MoE
#            layer benchmark and its PyTorch peer (bench/kernels; needs python3 with torch, else skipped);
#   workers: the CUDA worker tests (workers_cuda_test: transformers references, batching, chunked prefill, expert
#            moves, 2/4-GPU expert parallel where the GPUs are there), then `zmoe generate --device cuda
#            --workers N` (N = 1, 2, 4 up to the GPU count) on every fixture, checked against the reference tokens.
# --build-dir DIR (or ZMOE_BUILD_DIR; default build-cuda, relative to the repository) is the build directory; with
# --no-build the binaries already there are run (e.g. a build-cuda/ made by scripts/build_cuda.sh on another machine).
# OUT (default DIR/gpu_check) receives the logs and JSON results; TEST_TIMEOUT (seconds, default 600) and
# GTEST_FILTER bound and select the CUDA worker tests. Exits non-zero when a check fails.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
what=all
build_it=1
build=${ZMOE_BUILD_DIR:-${BUILD_DIR:-build-cuda}}
usage="usage: scripts/gpu_check.sh [kernels|workers|all] [--no-build] [--build-dir DIR]"
while (($#)); do
  case $1 in
    kernels | workers | all) what=$1 ;;
    --no-build) build_it=0 ;;
    --build-dir) [[ $# -ge 2 ]] || { echo "$usage" >&2; exit 2; }; build=$2; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
[[ $build == /* ]] || build=$top/$build
OUT=${OUT:-$build/gpu_check}
mkdir -p "$OUT"
command -v nvidia-smi >/dev/null || { echo "gpu_check.sh: no nvidia-smi: this machine has no NVIDIA GPU" >&2; exit 1; }
if ((!build_it)); then
  for b in zmoe kernels_test workers_cuda_test moe_layer_bench; do
    [[ -x $build/bin/$b ]] || { echo "gpu_check.sh: no $build/bin/$b (build it, or drop --no-build)" >&2; exit 1; }
  done
fi
if ((build_it)); then
  nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
  cmake -S . -B "$build" -G Ninja -DZMOE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DZMOE_BUILD_BENCH=ON >/dev/null || exit 1
  cmake --build "$build" -j"$(nproc)" --target zmoe kernels_test workers_cuda_test moe_layer_bench || exit 1
fi
export NCCL_NVLS_ENABLE=0 ZMOE_FIXTURES_DIR=$top/tests/fixtures
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
ngpu=$(nvidia-smi -L | wc -l)
fails=0

if [[ $what == kernels || $what == all ]]; then
  "$build/bin/kernels_test" --gtest_brief=1 --gtest_output="xml:$OUT/kernels_test.xml" >"$OUT/kernels_test.log" 2>&1
  rc=$?
  echo "kernels_test rc=$rc"
  grep -E "FAILED|PASSED|Failure" "$OUT/kernels_test.log" | head -40
  ((rc == 0)) || fails=$((fails + 1))
  "$build/bin/moe_layer_bench" --json "$OUT/moe_layer_zmoe.json" 2>&1 | tee "$OUT/bench.log" || fails=$((fails + 1))
  if python3 -c "import torch" 2>/dev/null; then
    PYTHONUNBUFFERED=1 python3 scripts/bench_moe_torch.py --json "$OUT/moe_layer_torch.json" 2>&1 | tee -a "$OUT/bench.log"
  else
    echo "moe_layer peer skipped: no python3 with torch"
  fi
fi

if [[ $what == workers || $what == all ]]; then
  timeout "${TEST_TIMEOUT:-600}" "$build/bin/workers_cuda_test" --gtest_filter="${GTEST_FILTER:-*}" \
    >"$OUT/workers_cuda_test.log" 2>&1
  rc=$?
  echo "workers_cuda_test rc=$rc"
  grep -E "^\[cuda\]|FAILED|Failure|PASSED|SKIPPED|Expected|Which is|actual|error" "$OUT/workers_cuda_test.log" | head -80
  ((rc == 0)) || fails=$((fails + 1))
  for w in 1 2 4; do
    ((w <= ngpu)) || continue
    for a in qwen3_moe qwen2_moe mixtral olmoe deepseek_v3 deepseek_v3_flat deepseek_v2 deepseek_v2_greedy; do
      m=$ZMOE_FIXTURES_DIR/models/$a
      python3 scripts/check_generate.py make "$m" >"$OUT/in_$a.jsonl"
      timeout 120 "$build/bin/zmoe" generate --model "$m" --input "$OUT/in_$a.jsonl" \
        --output "$OUT/gen_${a}_w$w.jsonl" --device cuda --workers $w --num-kv-blocks 512 >"$OUT/gen_${a}_w$w.log" 2>&1
      rc=$?
      res=$(python3 scripts/check_generate.py check "$m" "$OUT/gen_${a}_w$w.jsonl") || fails=$((fails + 1))
      echo "generate $a workers=$w rc=$rc $res"
      ((rc == 0)) || fails=$((fails + 1))
    done
  done
fi
echo "gpu_check failures: $fails (logs and results in $OUT)"
exit $((fails > 0))
