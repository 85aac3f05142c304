#!/usr/bin/env bash
# Checks that two scripts/launch.sh "nodes" on this host (one worker each; with --device cuda each on its own GPU,
# NCCL between them) serve like one node with both workers: the same greedy tokens for the same requests. Each
# prompt's greedy continuation is also compared with the checkpoint's reference.json when it has one.
#
#   scripts/launch_two_nodes_check.sh --model DIR [--device cpu|cuda] [--zmoe PATH] [--max-tokens N] [--out DIR]
#
# Exit status 0 when the two runs agree token for token. Needs python3 (to write and compare the JSONL).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
zmoe=$here/../build/bin/zmoe model="" device=cpu max_tokens=16 out=""
while (($#)); do
  case $1 in
    --model) model=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --zmoe) zmoe=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "launch_two_nodes_check.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n $model ]] || { echo "launch_two_nodes_check.sh: --model is required" >&2; exit 2; }
[[ -n $out ]] || out=$(mktemp -d)
mkdir -p "$out"
# reserve_port VAR: a loopback port below the kernel's ephemeral range (no outgoing connection of a test running
# beside this one can take it between our check and the server's bind), locked for this script's life with an flock
# on /tmp/zmoe-test-ports/PORT (the lock tests/cli/e2e_util.hpp takes), and checked bindable.
mkdir -p /tmp/zmoe-test-ports 2>/dev/null && chmod 777 /tmp/zmoe-test-ports 2>/dev/null
reserve_port() {
  local lo p fd
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  ((lo > 12000)) || lo=32768
  for _ in $(seq 1 2000); do
    p=$((10000 + (RANDOM * 32768 + RANDOM) % (lo - 10000)))
    exec {fd}>"/tmp/zmoe-test-ports/$p" || continue
    if flock -n "$fd" && python3 -c "import socket; socket.socket().bind(('127.0.0.1', $p))" 2>/dev/null; then
      printf -v "$1" %s "$p"
      return 0
    fi
    exec {fd}>&-
  done
  echo "launch_two_nodes_check.sh: no free loopback port below $lo" >&2
  exit 1
}

# Requests: every reference prompt (else four fixed ones), greedy.
python3 - "$model" "$max_tokens" >"$out/requests.jsonl" <<'EOF'
import json, os, sys
model, n = sys.argv[1], int(sys.argv[2])
ref = os.path.join(model, "reference.json")
prompts = [p["token_ids"] for p in json.load(open(ref))["prompts"]] if os.path.exists(ref) else \
    [[3, 4, 5, 6], [7, 8, 9], [10, 11, 12, 13, 14], [15, 16]]
for i, ids in enumerate(prompts):
    print(json.dumps({"prompt_token_ids": ids, "max_tokens": n, "temperature": 0, "ignore_eos": True}))
EOF

pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# run TAG NODES: serves the requests with NODES nodes (2 workers in all), writes $out/TAG.jsonl.
run() {
  local tag=$1 nodes=$2 wpn=$((2 / $2)) port engine_port
  reserve_port port
  reserve_port engine_port
  pids=()
  export ZMOE_RUN_SECRET=two-node-check-$RANDOM$RANDOM
  for ((r = nodes - 1; r >= 0; r--)); do
    bash "$here/launch.sh" --model "$model" --nodes "$nodes" --node-rank "$r" --engine-host 127.0.0.1 \
      --node-host 127.0.0.1 --engine-port "$engine_port" --port "$port" --workers-per-node "$wpn" \
      --device "$device" --zmoe "$zmoe" --skip-tokenizer-init >"$out/$tag.node$r.log" 2>&1 &
    pids+=("$!")
  done
  # The frontend answers "still starting" until every worker has loaded: ask again until it serves.
  local tries=0
  while true; do
    "$zmoe" client --endpoint "tcp://127.0.0.1:$port" --input "$out/requests.jsonl" --output "$out/$tag.jsonl" \
      --timeout 180 2>/dev/null && break
    grep -q "still starting" "$out/$tag.jsonl" && ((++tries < 300)) || { echo "$tag: requests failed" >&2; return 1; }
    sleep 0.5
  done
  # Stopping node 0 drains the whole run, the other node's workers too.
  kill -TERM "${pids[-1]}"
  for p in "${pids[@]}"; do wait "$p" || true; done
  pids=()
}

run one_node 1
run two_nodes 2
python3 - "$out" "$model" <<'EOF'
import json, os, sys
out, model = sys.argv[1], sys.argv[2]
def tokens(tag):
    return {j["index"]: j["token_ids"] for j in map(json.loads, open(os.path.join(out, tag + ".jsonl")))}
one, two = tokens("one_node"), tokens("two_nodes")
same = one == two
ref_path = os.path.join(model, "reference.json")
ref_match = None
if os.path.exists(ref_path):
    ref = json.load(open(ref_path))["prompts"]
    ref_match = sum(1 for i, p in enumerate(ref) if one.get(i) and one[i] == p.get("greedy", [])[:len(one[i])])
print(json.dumps({"requests": len(one), "two_nodes_equal_one_node": same,
                  "one_node_prompts_equal_reference_prefix": ref_match}))
sys.exit(0 if same and len(one) > 0 else 1)
EOF
