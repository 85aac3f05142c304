#!/usr/bin/env bash
# Builds the CUDA kernels' tests and benchmark here (no GPU needed to build), bundles them for the GPU machine
# into .device/ with ../shared/device/bundle.sh, and prints the `run` command that executes them there.
#   scripts/gpu_check.sh [--no-build]     BUILD_DIR (default build-kernels) picks the build directory.
#   scripts/gpu_check.sh workers [--no-build]   the CUDA worker backend instead (BUILD_DIR default build-cuda):
#     workers_cuda_test (HF reference, batching, chunked prefill, moves, 2/4-GPU expert parallel) and
#     `zmoe generate --device cuda --workers N` on the fixtures checked against the reference tokens.
# The command runs the kernel tests (kernels_test, label gpu), the MoE layer benchmark and its PyTorch peer, and
# leaves kernels_test.xml, kernels_test.log, moe_layer_zmoe.json, moe_layer_torch.json and bench.log under $OUT.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [[ ${1:-} == workers ]]; then
  shift
  build=${BUILD_DIR:-build-cuda}
  bundle=${BUNDLE_SH:-$top/../shared/device/bundle.sh}
  [[ -x $bundle ]] || bundle=/work/shared/device/bundle.sh
  if [[ ${1:-} != --no-build ]]; then
    cmake -S . -B "$build" -G Ninja -DZMOE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
    cmake --build "$build" -j2 --target zmoe workers_cuda_test
  fi
  rm -rf .device
  "$bundle" "$build/bin/zmoe" "$build/bin/workers_cuda_test"
  # On the GPU machine: the test binary (gtest filter as $1), then generate with 1, 2, 4 workers where the GPUs
  # exist; a summary goes to stdout, logs and outputs under $OUT.
  cat >.device/run_workers_cuda.sh <<'SH'
#!/usr/bin/env bash
set -u
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 ZMOE_FIXTURES_DIR=$PWD/../tests/fixtures
OUT=${OUT:-/tmp/zmoe-out}; mkdir -p "$OUT"
ngpu=$(nvidia-smi -L | wc -l); nvidia-smi -L
timeout ${TEST_TIMEOUT:-300} ./bin/workers_cuda_test --gtest_filter="${1:-*}" >"$OUT/workers_cuda_test.log" 2>&1
echo "workers_cuda_test rc=$?"
grep -E "^\[cuda\]|FAILED|Failure|PASSED|SKIPPED|Expected|Which is|actual|error" "$OUT/workers_cuda_test.log" | head -80
for w in ${WORLDS:-1 2 4}; do
  [[ $w -le $ngpu ]] || continue
  for a in qwen3_moe qwen2_moe mixtral olmoe; do
    m=$ZMOE_FIXTURES_DIR/models/$a
    python3 check_generate.py make "$m" >"$OUT/in_$a.jsonl"
    timeout 120 ./bin/zmoe generate --model "$m" --input "$OUT/in_$a.jsonl" --output "$OUT/gen_${a}_w$w.jsonl" \
      --device cuda --workers $w --num-kv-blocks 512 >"$OUT/gen_${a}_w$w.log" 2>&1
    echo "generate $a workers=$w rc=$? $(python3 check_generate.py check "$m" "$OUT/gen_${a}_w$w.jsonl")"
  done
done
SH
  cat >.device/check_generate.py <<'PY'
# make MODEL: one greedy request per reference prompt; check MODEL OUT: tokens equal to the reference up to the
# first step whose reference top-2 margin is below 0.1 (BF16 activations cannot settle closer calls; see
# tests/workers_cuda/cuda_reference_test.cpp).
import json, sys
ref = json.load(open(sys.argv[2] + "/reference.json"))["prompts"]
if sys.argv[1] == "make":
    for p in ref:
        print(json.dumps({"prompt_token_ids": p["token_ids"], "max_tokens": len(p["greedy"]), "temperature": 0,
                          "ignore_eos": True}))
    sys.exit(0)
try:
    out = [json.loads(l) for l in open(sys.argv[3]) if l.strip()]
except OSError as e:
    print("FAIL no output:", e); sys.exit(1)
bad, compared = [], 0
for i, p in enumerate(ref):
    got = out[i]["token_ids"] if i < len(out) else []
    for t, want in enumerate(p["greedy"]):
        if p["margins"][t] < 0.1: break
        if t >= len(got) or got[t] != want:
            bad.append(f"prompt {i} step {t}: {got[t] if t < len(got) else None} != {want}"); break
        compared += 1
print(("OK" if not bad else "FAIL") + f" {compared} tokens compared" + ("; " + "; ".join(bad) if bad else ""))
sys.exit(1 if bad else 0)
PY
  chmod +x .device/run_workers_cuda.sh
  cat <<'CMD'
run with carry [".device"], kind nvidia-h100-x1 (or nvidia-h200-x4 for 2/4 GPUs), command:
OUT=$OUT bash .device/run_workers_cuda.sh
CMD
  exit 0
fi
build=${BUILD_DIR:-build-kernels}
bundle=${BUNDLE_SH:-$top/../shared/device/bundle.sh}
[[ -x $bundle ]] || bundle=/work/shared/device/bundle.sh
if [[ ${1:-} != --no-build ]]; then
  cmake -S . -B "$build" -G Ninja -DZMOE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DZMOE_BUILD_BENCH=ON >/dev/null
  cmake --build "$build" -j2 --target kernels_test moe_layer_bench
fi
rm -rf .device
"$bundle" "$build/bin/kernels_test" "$build/bin/moe_layer_bench" -- scripts/bench_moe_torch.py
cat <<'CMD'
run with carry [".device"], timeout_s 240, command:
cd .device && export LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH && nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; ./bin/kernels_test --gtest_brief=1 --gtest_output=xml:$OUT/kernels_test.xml > $OUT/kernels_test.log 2>&1; echo "kernels_test rc=$?"; grep -E "FAILED|PASSED|Failure|error" $OUT/kernels_test.log | head -40; ./bin/moe_layer_bench --json $OUT/moe_layer_zmoe.json 2>&1 | tee $OUT/bench.log; PYTHONUNBUFFERED=1 python3 bench_moe_torch.py --json $OUT/moe_layer_torch.json 2>&1 | tee -a $OUT/bench.log
CMD
