#!/usr/bin/env python3
"""Prints an Nsight Compute CSV (`ncu --csv --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum,
dram__bytes_write.sum ...`) as one row per profiled kernel in launch order: its duration, the DRAM bytes it read and
wrote, and the time those bytes take at a given copy bandwidth (the kernel's floor) beside it.

    bench/ncu_kernels.py NCU_CSV [--bandwidth-gbs 3000]
"""
import argparse
import collections
import csv
import re


def short(name):
    name = re.sub(r"\(.*", "", name)  # parameters
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"zmoe::kernels::(\(anonymous namespace\)::)?", "", name)
    return name[:60]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--bandwidth-gbs", type=float, default=3000.0)
    a = ap.parse_args()
    lines = [l for l in open(a.csv, errors="replace") if l.startswith('"')]
    rows = csv.reader(lines)
    head = next(rows)
    ii, ki, mi, vi = (head.index(c) for c in ("ID", "Kernel Name", "Metric Name", "Metric Value"))
    kernels = collections.OrderedDict()
    for r in rows:
        k = kernels.setdefault(r[ii], {"name": r[ki]})
        try:
            k[r[mi]] = float(r[vi].replace(",", ""))
        except ValueError:
            pass
    bw = a.bandwidth_gbs * 1e9
    print("%4s %9s %9s %9s %9s %6s  %s" % ("id", "us", "read MB", "write MB", "floor us", "floor%", "kernel"))
    tot_t = tot_b = 0.0
    for i, k in kernels.items():
        t = k.get("gpu__time_duration.sum", 0.0) / 1e3
        rd, wr = k.get("dram__bytes_read.sum", 0.0), k.get("dram__bytes_write.sum", 0.0)
        fl = (rd + wr) / bw * 1e6
        tot_t += t
        tot_b += rd + wr
        print("%4s %9.2f %9.3f %9.3f %9.2f %5.0f%%  %s" % (i, t, rd / 1e6, wr / 1e6, fl, 100 * fl / t if t else 0,
                                                           short(k["name"])))
    print("all: %.2f us, %.2f MB, floor %.2f us" % (tot_t, tot_b / 1e6, tot_b / bw * 1e6))


if __name__ == "__main__":
    main()
