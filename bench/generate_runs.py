"""Scaffolding shared by the Python benchmarks that drive `zmoe generate` (bench/dbo, bench/eplb): the default
binary, a demo checkpoint written by `zmoe make-demo`, a request file of random prompts, and one generate run with
its metrics, wall time and tokens."""
import json
import os
import random
import signal
import subprocess
import time

DEFAULT_ZMOE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin", "zmoe")


def add_common_args(ap, hidden, moe_intermediate, requests, max_tokens):
    """The flags every generate benchmark takes: the binary, the run's layout and the demo checkpoint's shapes."""
    ap.add_argument("--zmoe", default=DEFAULT_ZMOE)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=hidden)
    ap.add_argument("--moe-intermediate", type=int, default=moe_intermediate)
    ap.add_argument("--requests", type=int, default=requests)
    ap.add_argument("--max-tokens", type=int, default=max_tokens)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per worker")


def make_demo(zmoe, out, experts, layers, hidden, moe_intermediate, router_skew=None):
    """Writes a random checkpoint of these shapes to `out` (with skewed routers when router_skew is given)."""
    cmd = [zmoe, "make-demo", "--out", out, "--experts", str(experts), "--layers", str(layers), "--hidden",
           str(hidden), "--moe-intermediate", str(moe_intermediate)]
    if router_skew is not None:
        cmd += ["--router-skew", str(router_skew)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def write_requests(path, num_requests, prompt_len, max_tokens, seed=0):
    """num_requests greedy requests of random token ids (ignore_eos), one JSON line each; prompt_len(rng) gives a
    prompt's length."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(num_requests):
            ids = [rng.randrange(1000, 100000) for _ in range(prompt_len(rng))]
            f.write(json.dumps({"prompt_token_ids": ids, "max_tokens": max_tokens, "temperature": 0,
                                "ignore_eos": True}) + "\n")


def run_generate(zmoe, model, reqs, workers, extra, tmp, tag, timeout=None):
    """One `zmoe generate` run over `workers` workers with `extra` flags; (metrics, wall seconds, token ids).
    Raises RuntimeError with the end of its log when it fails, or after `timeout` seconds (its whole process group
    is killed then)."""
    out = os.path.join(tmp, tag + ".out.jsonl")
    metrics = os.path.join(tmp, tag + ".metrics.json")
    cmd = [zmoe, "generate", "--model", model, "--input", reqs, "--output", out, "--workers", str(workers),
           "--metrics-json", metrics] + extra
    log = os.path.join(tmp, tag + ".log")
    t0 = time.time()
    with open(log, "w") as err:
        p = subprocess.Popen(cmd, stderr=err, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = f"killed after {timeout} s"
    wall = time.time() - t0
    if rc != 0:
        with open(log) as f:
            tail = f.read()[-4000:]
        raise RuntimeError(f"{' '.join(cmd)} exited {rc}; its log ends:\n{tail}")
    with open(metrics) as f:
        m = json.load(f)
    with open(out) as f:
        tokens = [json.loads(line)["token_ids"] for line in f]
    return m, wall, tokens
