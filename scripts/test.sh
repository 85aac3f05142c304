#!/usr/bin/env bash
# Runs every test that can run on this machine (all but the `gpu` label) after set-up and build.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
scripts/setup.sh
cd build
ctest --output-on-failure -LE gpu -j"$(nproc)" --timeout 600
