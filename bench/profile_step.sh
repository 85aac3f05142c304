#!/usr/bin/env bash
# Where a `zmoe bench step` run's device time goes: the kernels of the run summed by name (total ms, calls, share),
# from Nsight Systems (graph nodes traced one by one), or Nsight Compute's per-kernel durations where nsys is
# missing. With --profile among the bench arguments only the timed decode steps are collected; without it the whole
# run (the prefill steps included).
#
# With --trace K (nsys only) it also prints K consecutive kernels from the middle of the run in launch order: each
# one's start, duration and the idle gap before it on the GPU (launch gaps), to read one layer's sequence.
#
#   bench/profile_step.sh [--top N] [--out DIR] [--trace K] -- BENCH_STEP_ARGS...
#   e.g. bench/profile_step.sh -- --model bench/configs/deepseek-v2-lite --load-format dummy --batch-sizes 1 \
#        --context 1024 --steps 8 --profile
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
zmoe=${ZMOE:-$top/build-cuda/bin/zmoe}
out=${OUT:-$top/build-cuda/profile_step}
n=30
trace=0
while (($#)); do
  case $1 in
    --top) n=$2; shift ;;
    --trace) trace=$2; shift ;;
    --out) out=$2; shift ;;
    --) shift; break ;;
    *) echo "profile_step.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
profiled=0
for a in "$@"; do [[ $a == --profile ]] && profiled=1; done
# NSYS / NCU name the profilers where they are not on the PATH or in the usual install folders.
nsys=${NSYS:-$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
  /usr/local/cuda*/nsight-systems*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys /usr/lib/nsight-systems/bin/nsys \
  2>/dev/null | head -1)}
ncu=${NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}
summarise() {  # CSV of (name, ns) rows on stdin -> the table
  python3 -c '
import csv, sys, collections
n = int(sys.argv[1]); tot = collections.Counter(); cnt = collections.Counter()
for row in csv.reader(sys.stdin):
    if len(row) < 2: continue
    try: ns = float(row[1])
    except ValueError: continue
    tot[row[0]] += ns; cnt[row[0]] += 1 if len(row) < 3 else int(float(row[2]))
s = sum(tot.values()) or 1
print("%10s %7s %6s  kernel  (all kernels: %.3f ms)" % ("total ms", "calls", "share", s / 1e6))
for k, v in tot.most_common(n):
    print(f"{v/1e6:10.3f} {cnt[k]:7d} {100*v/s:5.1f}%  {k[:110]}")
' "$n"
}
if [[ -n $nsys ]]; then
  rm -f "$out"/run.nsys-rep "$out"/run.sqlite "$out"/kern*.csv
  range=()
  ((profiled)) && range=(--capture-range=cudaProfilerApi --capture-range-end=stop)
  "$nsys" profile --trace=cuda --cuda-graph-trace=node "${range[@]}" -f true -o "$out/run" "$zmoe" bench step "$@" \
    >"$out/bench.log" 2>&1 || { echo "nsys profile failed:"; tail -20 "$out/bench.log"; exit 1; }
  grep -E "^ *[0-9]+ +[0-9.]+ " "$out/bench.log" | head -5
  for report in cuda_gpu_kern_sum gpukernsum; do
    if "$nsys" stats -q --force-export=true --report "$report" --format csv -o "$out/kern" "$out/run.nsys-rep" >/dev/null 2>&1; then break; fi
  done
  f=$(ls "$out"/kern*.csv 2>/dev/null | head -1)
  [[ -n $f ]] || { echo "nsys stats gave no kernel summary"; exit 1; }
  # Columns: Time (%), Total Time (ns), Instances, ..., Name (last).
  python3 -c '
import csv, sys
r = csv.reader(open(sys.argv[1])); h = next(r)
ti, ii = h.index("Total Time (ns)"), h.index("Instances")
for row in r: print(",".join(["\"" + row[-1].replace("\"", "") + "\"", row[ti], row[ii]]))
' "$f" | summarise
  if ((trace > 0)); then
    rm -f "$out"/trace*.csv
    for report in cuda_gpu_trace gputrace; do
      if "$nsys" stats -q --force-export=true --report "$report" --format csv -o "$out/trace" "$out/run.nsys-rep" \
        >/dev/null 2>&1; then break; fi
    done
    t=$(ls "$out"/trace*.csv 2>/dev/null | head -1)
    if [[ -z $t ]]; then
      echo "nsys stats gave no GPU trace"
    else
      # Kernels only (rows with a grid), in start order; K of them from the middle of the run.
      python3 -c '
import csv, sys
k = int(sys.argv[2]); r = csv.reader(open(sys.argv[1])); h = next(r)
si, di, ni = h.index("Start (ns)"), h.index("Duration (ns)"), len(h) - 1
gi = next((i for i, c in enumerate(h) if c.startswith("GrdX") or c.startswith("Grid")), None)
rows = []
for row in r:
    if gi is not None and (len(row) <= gi or not row[gi].strip()): continue
    try: rows.append((float(row[si]), float(row[di]), row[ni]))
    except ValueError: continue
rows.sort()
m = max(0, len(rows) // 2 - k // 2)
print("%10s %9s %8s  kernel (%d of %d kernels from the middle; start relative to the first shown)" % ("start us", "dur us", "gap us", k, len(rows)))
t0 = rows[m][0] if rows else 0; prev = None
for s, d, name in rows[m:m + k]:
    gap = (s - prev) / 1e3 if prev is not None else 0.0
    print(f"{(s - t0)/1e3:10.2f} {d/1e3:9.2f} {gap:8.2f}  {name[:100]}")
    prev = s + d
' "$t" "$trace"
    fi
  fi
elif [[ -n $ncu ]]; then
  args=()
  ((profiled)) && args=(--profile-from-start off)
  "$ncu" "${args[@]}" --metrics gpu__time_duration.sum --csv --print-units base "$zmoe" bench step "$@" \
    >"$out/ncu.csv" 2>"$out/bench.log" || { echo "ncu failed:"; tail -20 "$out/bench.log"; exit 1; }
  python3 -c '
import csv, sys
rows = [l for l in open(sys.argv[1]) if l.startswith("\"")]
r = csv.reader(rows); h = next(r)
ki, vi = h.index("Kernel Name"), h.index("Metric Value")
for row in r: print(",".join(["\"" + row[ki].replace("\"", "") + "\"", row[vi].replace(",", "")]))
' "$out/ncu.csv" | summarise
else
  echo "profile_step.sh: neither nsys nor ncu found" >&2
  exit 1
fi
