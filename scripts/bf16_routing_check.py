#!/usr/bin/env python3
"""How far transformers' own BF16 forward strays from its fp32 reference on the fixture prompts, and why.

  bf16_routing_check.py FIXTURES_DIR NAME...     e.g. tests/fixtures/models deepseek_v3 deepseek_v2

For every prompt of NAME/reference.json: the relative last-logit error (max |err| / max |ref|) of transformers in
fp32 (the reference itself: ~1e-7) and in BF16, and how many routing decisions (one token's top-k expert set in
one MoE layer) the BF16 forward takes differently from the fp32 one. A prompt with a differing routing decision
is a BF16 near-tie: any BF16 engine may route it either way, which moves the logits far more than rounding does
(tests/workers_cuda/cuda_reference_test.cpp lists those prompts). Needs torch and transformers; runs on a CPU too.
"""
import json
import sys

import torch
import transformers


def routing_recorder(model, record):
    """Records the expert ids each MoE block's router picks (the integer outputs of its routing call)."""
    for mod in model.modules():
        if not ("moe" in type(mod).__name__.lower() and hasattr(mod, "gate")):
            continue

        def keep(out):
            for x in out if isinstance(out, tuple) else (out,):
                if torch.is_tensor(x) and x.dtype in (torch.int64, torch.int32):
                    record.append(x.detach().reshape(x.shape[0], -1).clone())

        if hasattr(mod, "route_tokens_to_experts"):
            orig = mod.route_tokens_to_experts

            def wrapped(*a, _orig=orig, **k):
                r = _orig(*a, **k)
                keep(r)
                return r

            mod.route_tokens_to_experts = wrapped
        else:
            mod.gate.register_forward_hook(lambda _m, _i, out: keep(out))


def run(d, dtype, prompts):
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=dtype).eval()
    record, out = [], []
    routing_recorder(model, record)
    for p in prompts:
        record.clear()
        with torch.no_grad():
            logits = model(torch.tensor([p["token_ids"]])).logits[0, -1].float()
        out.append((logits, list(record)))
    return out


def main():
    root = sys.argv[1]
    for name in sys.argv[2:]:
        d = f"{root}/{name}"
        prompts = json.load(open(f"{d}/reference.json"))["prompts"]
        fp32, bf16 = run(d, torch.float32, prompts), run(d, torch.bfloat16, prompts)
        for i, p in enumerate(prompts):
            ref = torch.tensor(p["last_logits"])
            err = [((r[i][0] - ref).abs().max() / ref.abs().max()).item() for r in (fp32, bf16)]
            flips = sum(
                int(set(x.tolist()) != set(y.tolist()))
                for a, b in zip(fp32[i][1], bf16[i][1])
                for x, y in zip(a, b))
            print(f"{name} prompt {i} ({len(p['token_ids'])} tokens): fp32 error {err[0]:.1e}, bf16 error "
                  f"{err[1]:.4f}, routing decisions differing {flips} of {sum(a.shape[0] for a in fp32[i][1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
