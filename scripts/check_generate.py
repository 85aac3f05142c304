#!/usr/bin/env python3
"""Reference-token checks of `zmoe generate` on the fixture checkpoints (tests/fixtures/models/*/reference.json).

  check_generate.py make MODEL            one greedy request per reference prompt, as JSON lines on stdout
  check_generate.py check MODEL OUT       OUT's tokens equal the reference up to the first step whose reference
                                          top-2 margin is below 0.1 (BF16 activations cannot settle closer calls;
                                          see tests/workers_cuda/cuda_reference_test.cpp); exit 1 otherwise
"""
import json
import sys


def main():
    mode, model = sys.argv[1], sys.argv[2]
    ref = json.load(open(model + "/reference.json"))["prompts"]
    if mode == "make":
        for p in ref:
            print(json.dumps({"prompt_token_ids": p["token_ids"], "max_tokens": len(p["greedy"]), "temperature": 0,
                              "ignore_eos": True}))
        return 0
    try:
        out = [json.loads(l) for l in open(sys.argv[3]) if l.strip()]
    except OSError as e:
        print("FAIL no output:", e)
        return 1
    bad, compared = [], 0
    for i, p in enumerate(ref):
        got = out[i]["token_ids"] if i < len(out) else []
        for t, want in enumerate(p["greedy"]):
            if p["margins"][t] < 0.1:
                break
            if t >= len(got) or got[t] != want:
                bad.append(f"prompt {i} step {t}: {got[t] if t < len(got) else None} != {want}")
                break
            compared += 1
    print(("OK" if not bad else "FAIL") + f" {compared} tokens compared" + ("; " + "; ".join(bad) if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
