#!/usr/bin/env bash
# Builds the CUDA kernels' tests and benchmark here (no GPU needed to build), bundles them for the GPU machine
# into .device/ with ../shared/device/bundle.sh, and prints the `run` command that executes them there.
#   scripts/gpu_check.sh [--no-build]     BUILD_DIR (default build-kernels) picks the build directory.
# The command runs the kernel tests (kernels_test, label gpu), the MoE layer benchmark and its PyTorch peer, and
# leaves kernels_test.xml, kernels_test.log, moe_layer_zmoe.json, moe_layer_torch.json and bench.log under $OUT.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
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
