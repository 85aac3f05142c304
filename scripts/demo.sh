#!/usr/bin/env bash
# The main job, end to end on a fresh machine: set up and build, write the demo checkpoint (a small random
# qwen3_moe paired with the real Qwen3 tokenizer), serve it with 2 CPU workers, stream a reply with
# `zmoe client`, show every actor's metrics, and stop the server with SIGTERM.
#   MODEL=DIR scripts/demo.sh     serves another checkpoint instead
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
scripts/setup.sh
zmoe=build/bin/zmoe
model=${MODEL:-build/demo-model}
if [[ ! -f $model/config.json ]]; then
  $zmoe make-demo --out "$model"
fi
port=${ZMOE_PORT:-5555}
endpoint=tcp://127.0.0.1:$port
$zmoe serve --model "$model" --workers 2 --port "$port" &
server=$!
trap 'kill -TERM $server 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  $zmoe ctl health --endpoint "$endpoint" --timeout-ms 500 >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || { echo "demo: the server exited" >&2; exit 1; }
  sleep 0.2
done
echo "== streaming a reply (interactive client; the model is random, so is its text)"
echo "Hello! What is a mixture-of-experts model?" | $zmoe client --endpoint "$endpoint" --interactive --max-tokens 32 --temperature 0.8
echo "== the same request through the JSONL client"
echo '{"prompt": "Hello! What is a mixture-of-experts model?", "max_tokens": 32}' |
  $zmoe client --endpoint "$endpoint" --input - --output -
echo "== metrics"
$zmoe ctl metrics --endpoint "$endpoint" >"$model/.metrics.txt"
head -n 40 "$model/.metrics.txt"
echo "== stopping the server"
kill -TERM $server
trap - EXIT
wait $server
echo "demo: server exited with status $?"
