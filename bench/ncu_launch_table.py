#!/usr/bin/env python3
"""One row per profiled kernel launch, in launch order, from the CSV that

    ncu --profile-from-start off --launch-skip S --launch-count N --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --print-units base \
        --log-file OUT.csv zmoe bench step ... --profile

writes: the kernel (template arguments dropped), grid and block, its time, the DRAM bytes it read and wrote, and the
rate; then per kernel name the launches and the median time. Meant for a few layers of a decode step (bounded by
--launch-skip / --launch-count), to read a layer kernel by kernel.

usage: bench/ncu_launch_table.py OUT.csv [--json PATH]
"""
import argparse
import csv
import json
import statistics
import sys

from ncu_kernel_summary import short_name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = [line for line in open(a.csv) if line.startswith('"')]
    if not rows:
        sys.exit(f"{a.csv}: no profiled launches")
    reader = csv.reader(rows)
    head = next(reader)
    col = {name: head.index(name) for name in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
    grid_i = head.index("Grid Size") if "Grid Size" in head else None
    block_i = head.index("Block Size") if "Block Size" in head else None
    launches = {}
    for r in reader:
        i = int(r[col["ID"]])
        k = launches.setdefault(i, {"id": i, "kernel": short_name(r[col["Kernel Name"]]),
                                    "grid": r[grid_i] if grid_i is not None else "",
                                    "block": r[block_i] if block_i is not None else ""})
        try:
            k[r[col["Metric Name"]]] = float(r[col["Metric Value"]].replace(",", ""))
        except ValueError:
            pass
    order = [launches[i] for i in sorted(launches)]
    print(f"{'id':>5} {'us':>8} {'read MB':>8} {'write MB':>8} {'GB/s':>6}  kernel [grid x block]")
    for k in order:
        us = k.get("gpu__time_duration.sum", 0.0) / 1e3
        rd = k.get("dram__bytes_read.sum", 0.0) / 1e6
        wr = k.get("dram__bytes_write.sum", 0.0) / 1e6
        gbs = (rd + wr) / us * 1e3 if us > 0 else 0.0  # MB per us is TB/s
        print(f"{k['id']:>5} {us:8.2f} {rd:8.2f} {wr:8.2f} {gbs:6.0f}  {k['kernel']} [{k['grid']} x {k['block']}]")
    by_name = {}
    for k in order:
        by_name.setdefault(k["kernel"], []).append(k.get("gpu__time_duration.sum", 0.0) / 1e3)
    total = sum(sum(v) for v in by_name.values())
    print(f"\n{'launches':>8} {'median us':>9} {'total us':>9}  kernel (all: {total:.1f} us)")
    for name, v in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
        print(f"{len(v):8d} {statistics.median(v):9.2f} {sum(v):9.1f}  {name}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"launches": order}, f, indent=1)


if __name__ == "__main__":
    main()
