#!/usr/bin/env bash
# One GPU call for the prefill attention work: the attention tests (every kernel and variant against the CPU
# reference), then prefill_attention_bench per kernel (each under its own time limit, so that a hung variant costs
# only its own rows), then the PyTorch SDPA peer (cuDNN, FlashAttention-2) in the same call. Expects build-cuda/ built
# (kernels_test, prefill_attention_bench).
#
# usage: bench/kernels/prefill_attention_run.sh [--seqs 4096,8192,32768] [--impls automatic,ws,...] [--peer PATH]
#                                               [--out DIR]
set -uo pipefail
seqs=4096,8192,32768
impls=wgmma_128,ws,ws_panels,ws_k3,ws_2,ws_box128,ws_stride,ws_tail8,ws_split,ws_split_tail8
peer=../shared/peers/attention_prefill_peer.py
out=${OUT:-/tmp}
while [[ $# -gt 0 ]]; do
  case $1 in
    --seqs) seqs=$2; shift 2 ;;
    --impls) impls=$2; shift 2 ;;
    --peer) peer=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--seqs S,...] [--impls I,...] [--peer PATH] [--out DIR]" >&2; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
echo "== tests"
timeout 150 build-cuda/bin/kernels_test --gtest_filter='*PagedAttention*' >"$out/kernels_test.log" 2>&1
echo "tests exit: $?"
# Each failure with the kernel / variant it ran (the SCOPED_TRACE lines), then the summary.
grep -A8 "Failure$" "$out/kernels_test.log" | grep -E "Failure$|actual|paged_attention_test.cpp:[0-9]+: [a-z_0-9]+$" | head -120
grep -E "^\[  (PASSED|FAILED) |tests ran" "$out/kernels_test.log" | head -40
echo "== bench"
IFS=, read -ra list <<<"$impls"
for impl in "${list[@]}"; do
  timeout 90 build-cuda/bin/prefill_attention_bench --seqs "$seqs" --impls "$impl" --json "$out/prefill_${impl}.json" \
    | grep -v "^measured"
  echo "bench $impl exit: ${PIPESTATUS[0]}"
done
if [[ -f $peer ]]; then
  echo "== peer"
  timeout 120 python3 "$peer" --seqs "$seqs"
fi
