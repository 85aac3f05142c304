#!/usr/bin/env bash
# Compiles and links everything with ZMOE_CUDA=ON (sm_90a) into build-cuda/: the CUDA kernels, the CUDA worker, the
# gpu-labelled tests and the benchmarks. Runs nothing: scripts/gpu_check.sh builds and runs the GPU tests on a GPU.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
if [[ ! -x $nvcc ]]; then
  echo "build_cuda.sh: no CUDA toolkit at $nvcc; skipping the CUDA build" >&2
  exit 0
fi
cmake -S . -B build-cuda -G Ninja -DZMOE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build build-cuda -j"$(nproc)"
echo "CUDA build: build-cuda/bin/zmoe and the gpu tests compiled and linked"
