#!/usr/bin/env python3
"""bench/deepseek_v3_multi_gpu.sh's CPU dry run (the same commands as on GPUs, on CPU workers and the DeepSeek-V3
fixture's config): every part runs and exits 0, every command is recorded, and the summary holds what each part
measured: the served FP8 runs at each sequence count with every request completed and their throughput per GPU,
the TTFT of each prompt, the decode steps beside their floors.

  deepseek_v3_multi_gpu_test.py --script bench/deepseek_v3_multi_gpu.sh --bin BUILD/bin --model FIXTURE_DIR
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--script", required=True)
    p.add_argument("--bin", required=True)
    p.add_argument("--model", required=True)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as out:
        seqs = [2, 4]
        cmd = ["bash", a.script, "--device", "cpu", "--workers", "2", "--model", a.model, "--fp8-layers", "2",
               "--bf16-layers", "3", "--seqs-per-gpu", ",".join(map(str, seqs)), "--input-len", "16",
               "--output-len", "8", "--ttft-len", "64", "--ttft-prompts", "1", "--decode-batches", "2,3",
               "--decode-fp8", "--bin", a.bin, "--out", out, "--timeouts", "served=60,ttft=60,decode=60"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        print(r.stdout)
        check(r.returncode == 0, f"exit {r.returncode}")
        status = json.load(open(os.path.join(out, "status.json")))
        for part in ("exchange", "served", "ttft", "decode"):
            check(status.get(part, {}).get("rc") == 0, f"part {part}: {status.get(part)}")
        commands = open(os.path.join(out, "commands.sh")).read()
        for needle in ("bench ep", "--exchange-only", "serve --port", "--quantization fp8 --ep-transport nccl",
                       "--quantization fp8 --ep-transport auto",
                       "bench serve", "prefill_ttft.sh", "--skip-exchange"):
            check(needle in commands, f"commands.sh lacks {needle!r}")
        # The cuts: the fixture's config with the layers asked for.
        for tag, layers in (("2l-fp8", 2), ("3l-bf16", 3)):
            c = json.load(open(os.path.join(out, "configs", f"{os.path.basename(a.model)}-{tag}", "config.json")))
            check(c["num_hidden_layers"] == layers, f"cut {tag}: {c['num_hidden_layers']} layers")
        s = json.load(open(os.path.join(out, "summary.json")))
        runs = s["served"]["runs"]
        # Both transports (--ep-transport nccl: the FP8 dispatch on GPUs; auto), each at every sequence count.
        check(sorted((r["run"], r["seqs_per_gpu"]) for r in runs) ==
              sorted((f"fp8_{t}", n) for t in ("auto", "nccl") for n in seqs), f"served runs {runs}")
        for r in runs:
            n = r["seqs_per_gpu"] * 2
            check(r["completed"] == n and r["failed"] == 0 and r["num_prompts"] == n, f"served {r}")
            check(r["num_gpus"] == 2, f"served num_gpus {r['num_gpus']}")
            check(abs(r["decode_output_throughput_per_gpu"] * 2 - r["decode_output_throughput"]) <=
                  1e-6 * r["decode_output_throughput"], f"decode per GPU {r}")
            check(abs(r["output_throughput_per_gpu"] * 2 - r["output_throughput"]) <= 1e-6 * r["output_throughput"],
                  f"output per GPU {r}")
            check(r["mean_floor_decode_step_ms"] > 0, f"served floor {r}")
        check(s["served"]["quantization"] == "fp8" and s["served"]["workers"] == 2, f"served run {s['served']}")
        for t in ("auto", "nccl"):  # every pass its own prompts: none from the prefix cache
            check(s["served"][f"prefix_cache_hits[{t}]"] == 0, f"served prefix-cache hits {s['served']}")
        ttft = s["ttft"]
        check(ttft["workers"] == 2 and len(ttft["rows"]) == 1, f"ttft {ttft}")
        # The warm-up's prompts are not the measured ones: nothing comes from the prefix cache.
        check(ttft["prefix_cache_hits"] == 0, f"ttft prefix-cache hits {ttft['prefix_cache_hits']}")
        row = ttft["rows"][0]
        check(row["prompt_tokens"] == 64 and row["completed"] == 1 and row["ttft_ms"] > 0, f"ttft row {row}")
        check(row["floor_ms"] is None, "a CPU run has no GEMM rate, so no floor")
        check(0 < row["floor_flops_routed_experts"] < row["floor_flops"], f"ttft flops {row}")
        decode = s["decode"]
        check(sorted((d["file"], d["tokens_per_gpu"]) for d in decode) ==
              [("bench_ep_bf16_b2", 2), ("bench_ep_bf16_b3", 3), ("bench_ep_fp8_b2", 2), ("bench_ep_fp8_b3", 3)],
              f"decode rows {decode}")
        for d in decode:
            check(d["gpus"] == 2 and d["floor_ms"] > 0 and d["median_step_ms"] > 0, f"decode {d}")
        md = open(os.path.join(out, "summary.md")).read()
        for title in ("## exchange", "## served", "## ttft", "## decode"):
            check(title in md, f"summary.md lacks {title}")
    print("deepseek_v3_multi_gpu_test: ok")


if __name__ == "__main__":
    main()
