#!/usr/bin/env bash
# Installs everything the build and the tests need on a fresh Debian 12 machine, fetches the real tokenizers,
# and builds zmoe into build/ (build/bin/zmoe). Safe to run again.
#   ZMOE_CUDA=ON scripts/setup.sh   also builds the CUDA kernels and worker (needs /usr/local/cuda).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
sudo_cmd=""
[[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
packages=(build-essential cmake ninja-build pkg-config
          libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libboost-dev libboost-program-options-dev libgtest-dev libgmock-dev
          nlohmann-json3-dev libonig-dev libicu-dev libcairo2-dev curl python3 python3-zmq
          python3-msgpack python3-jinja2 python3-jsonschema)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# npm fetches the real tokenizers and the OpenAI Node SDK (node runs its test); a machine with Node.js from elsewhere
# already has both (Debian's npm conflicts).
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi
scripts/fetch_tokenizers.sh
# The official OpenAI Node SDK, pinned by tests/gateway/node/package-lock.json, for the gateway's SDK test.
if [[ ! -d tests/gateway/node/node_modules/openai ]]; then
  (cd tests/gateway/node && npm ci --no-audit --no-fund --silent)
fi
cmake -S . -B build -G Ninja -DZMOE_CUDA="${ZMOE_CUDA:-OFF}" >/dev/null
cmake --build build -j"$(nproc)"
echo "zmoe built: build/bin/zmoe"
