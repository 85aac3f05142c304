#!/usr/bin/env bash
# Starts the zmoe actors of one node of a multi-node run.
#   node 0:        engine core + frontend + this node's workers
#   other nodes:   this node's workers, connecting to node 0's engine core
#
#   scripts/launch.sh --model DIR --nodes N --node-rank R --engine-host HOST [options] [-- extra engine flags]
#   srun --nodes=N --ntasks-per-node=1 scripts/launch.sh --model DIR     (Slurm supplies nodes, rank and host)
#
# The nodes of one run authenticate each other with ZMOE_RUN_SECRET (the same value on every node; one node alone
# makes its own).
# options:
#   --workers-per-node W   workers (GPUs) on each node (default 1)
#   --engine-port P        engine core ports: P for workers, P+1 for the frontend (default 5600)
#   --port C               the frontend's client port on node 0 (default 5555)
#   --host ADDR            address the frontend binds on node 0 (default 127.0.0.1)
#   --node-host ADDR       this node's address that other nodes reach for the all-to-all (default: first of hostname -I)
#   --device cpu|cuda      (default cpu)
#   --zmoe PATH            the zmoe binary (default build/bin/zmoe beside this script)
#   --skip-tokenizer-init  serve prompt_token_ids only (required when the model has no tokenizer.json)
# Clients not on loopback need the API key in ZMOE_API_KEY (the frontend refuses a non-loopback --host without it).
# SIGTERM/SIGINT on node 0 drains and stops the whole run; every launcher exits when its actors have.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
zmoe=$here/../build/bin/zmoe
model="" nodes=${SLURM_NNODES:-1} node_rank=${SLURM_NODEID:-0} engine_host="" workers_per_node=1
engine_port=5600 port=5555 host=127.0.0.1 node_host="" device=cpu extra=() frontend_extra=()
while (($#)); do
  case $1 in
    --model) model=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --node-rank) node_rank=$2; shift 2 ;;
    --engine-host) engine_host=$2; shift 2 ;;
    --workers-per-node) workers_per_node=$2; shift 2 ;;
    --engine-port) engine_port=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --host) host=$2; shift 2 ;;
    --node-host) node_host=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --zmoe) zmoe=$2; shift 2 ;;
    --skip-tokenizer-init) frontend_extra+=(--skip-tokenizer-init); shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "launch.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n $model ]] || { echo "launch.sh: --model is required" >&2; exit 2; }
if [[ -z $engine_host ]]; then
  if [[ -n ${SLURM_JOB_NODELIST:-} ]] && command -v scontrol >/dev/null; then
    engine_host=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
  else
    engine_host=127.0.0.1
  fi
fi
[[ -n $node_host ]] || node_host=$(hostname -I 2>/dev/null | awk '{print $1}')
[[ -n $node_host ]] || node_host=127.0.0.1
total=$((nodes * workers_per_node))
# Liveness flags among the engine flags reach every actor (workers and frontend heartbeat too).
liveness=()
for ((i = 0; i < ${#extra[@]}; i++)); do
  case ${extra[i]} in
    --heartbeat-ms|--heartbeat-max-missed) liveness+=("${extra[i]}" "${extra[i + 1]:-}") ;;
    --heartbeat-ms=*|--heartbeat-max-missed=*) liveness+=("${extra[i]}") ;;
  esac
done
worker_ep=tcp://$engine_host:$engine_port
frontend_ep=tcp://$engine_host:$((engine_port + 1))
pids=()
export ZMOE_DIE_WITH_PARENT=1  # the actors stop if this launcher dies
# The run's secret authenticates the actors to each other (every hello, every all-to-all frame): every node of a
# run must be given the same one. One node alone makes its own.
if [[ -z ${ZMOE_RUN_SECRET:-} ]]; then
  if ((nodes > 1)); then
    echo "launch.sh: set ZMOE_RUN_SECRET to the same random value on every node (e.g. openssl rand -hex 16)" >&2
    exit 2
  fi
  ZMOE_RUN_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
fi
export ZMOE_RUN_SECRET
stop() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }

# The engine core binds the engine host's address when it is one (a hostname cannot be bound: all interfaces then).
bind_host='*'
[[ $engine_host =~ ^[0-9.]+$ ]] && bind_host=$engine_host
if ((node_rank == 0)); then
  "$zmoe" engine-core --worker-endpoint "tcp://$bind_host:$engine_port" \
    --frontend-endpoint "tcp://$bind_host:$((engine_port + 1))" \
    --model "$model" --workers "$total" --num-nodes "$nodes" --device "$device" "${extra[@]}" &
  engine_pid=$!
  pids+=("$engine_pid")
fi
for ((i = 0; i < workers_per_node; i++)); do
  rank=$((node_rank * workers_per_node + i))
  "$zmoe" worker --engine "$worker_ep" --rank "$rank" --device "$device" --data-bind "tcp://$node_host:*" \
    ${liveness[@]+"${liveness[@]}"} &
  pids+=("$!")
done
if ((node_rank == 0)); then
  "$zmoe" frontend --engine "$frontend_ep" --bind "tcp://$host:$port" --model "$model" --workers "$total" \
    ${liveness[@]+"${liveness[@]}"} ${frontend_extra[@]+"${frontend_extra[@]}"} &
  frontend_pid=$!
  pids+=("$frontend_pid")
  # A stop drains through the frontend, which shuts the engine core and every node's workers down.
  trap 'kill -TERM "$frontend_pid" 2>/dev/null || true' TERM INT
else
  trap stop TERM INT
fi
status=0
for p in "${pids[@]}"; do
  while true; do
    set +e; wait "$p"; rc=$?; set -e
    # wait returns >128 when a trapped signal interrupts it: the child is still running, wait again.
    if ((rc > 128)) && kill -0 "$p" 2>/dev/null; then continue; fi
    break
  done
  ((rc == 0)) || status=$rc
done
exit "$status"
