#!/usr/bin/env python3
"""Where a profiled region's GPU time goes, by kernel: reads the CSV that

    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --print-units base --log-file OUT.csv \
        zmoe bench prefill ... --profile-len L --profile-chunk C

writes (one row per kernel launch) and prints, per kernel name (template arguments dropped), the launches, the total
and mean time and the share of the region, largest first. --layers N scales nothing: it only prints the per-layer
time (total / N) beside, for a region that ran N decoder layers.

usage: bench/ncu_kernel_summary.py OUT.csv [--layers N] [--json PATH]
"""
import argparse
import csv
import json
import re
import sys


def short_name(name):
    name = re.sub(r"\(.*$", "", name.replace("(anonymous namespace)::", ""))  # parameter lists
    depth, out = 0, []
    for ch in name:  # template arguments, nested
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    name = "".join(out).strip()
    name = re.sub(r"^(void|auto)\s+", "", name)
    return name.split("::")[-1] if "::" in name else name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    lines = open(a.csv, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{a.csv}: no ncu CSV header (\"ID\",...) found")
    rows = list(csv.DictReader(lines[start:]))
    per = {}
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ns = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        ns *= {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}.get(unit, 1)
        k = short_name(r["Kernel Name"])
        e = per.setdefault(k, {"kernel": k, "launches": 0, "total_ms": 0.0})
        e["launches"] += 1
        e["total_ms"] += ns * 1e-6
    total = sum(e["total_ms"] for e in per.values())
    out = sorted(per.values(), key=lambda e: -e["total_ms"])
    print(f"{len(rows)} launches profiled, {total:.2f} ms of kernel time")
    print(f"{'kernel':<48} {'launches':>8} {'total ms':>10} {'mean us':>9} {'share':>7}" +
          (f" {'ms/layer':>9}" if a.layers else ""))
    for e in out:
        e["share"] = e["total_ms"] / total if total else 0
        print(f"{e['kernel'][:48]:<48} {e['launches']:>8} {e['total_ms']:>10.3f} "
              f"{e['total_ms'] * 1e3 / e['launches']:>9.1f} {100 * e['share']:>6.1f}%" +
              (f" {e['total_ms'] / a.layers:>9.3f}" if a.layers else ""))
    if a.json:
        json.dump({"total_ms": total, "layers": a.layers, "kernels": out}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
