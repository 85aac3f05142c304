#!/usr/bin/env python3
"""Random-initialises tiny checkpoints of every supported MoE architecture with Hugging Face transformers,
saves them in BF16, and records reference outputs computed in fp32 from those BF16 weights.

Run on a machine with torch + transformers (5.x):
    python3 scripts/make_model_fixtures.py --out tests/fixtures/models

For each architecture NAME it writes OUT/NAME/{config.json, model.safetensors[.index.json + shards], reference.json}
and a variant OUT/NAME_alt/ holding the same weights with the *other* expert layout (per-expert 2D tensors vs
transformers 5's fused 3D tensors), so both loaders are exercised against the same reference.

reference.json = {"transformers": version, "expert_layout": "fused"|"per_expert",
                  "prompts": [{"token_ids": [...], "last_logits": [vocab floats],
                               "greedy": [N ids], "margins": [top-2 logit margin at each greedy step]}]}
"""
import argparse
import json
import os
import re
import shutil

import torch
import transformers
from safetensors.torch import load_file, save_file

VOCAB = 512
PROMPT_LENGTHS = [1, 2, 7, 16, 41, 64]
NUM_GREEDY = 20


def make_config(cls, rope_theta, **kw):
    """transformers 5 spells RoPE as rope_parameters; older versions as rope_theta."""
    try:
        return cls(**kw, rope_parameters={"rope_type": "default", "rope_theta": rope_theta})
    except TypeError:
        return cls(**kw, rope_theta=rope_theta)


def configs():
    common = dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512, rms_norm_eps=1e-6, initializer_range=0.1,
                  tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=None)
    out = {}
    out["qwen3_moe"] = make_config(
        transformers.Qwen3MoeConfig, 10000.0, **common, head_dim=16, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
    )
    out["qwen2_moe"] = make_config(
        transformers.Qwen2MoeConfig, 1000000.0, **common, intermediate_size=96, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        num_hidden_layers=2, num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1,
        mlp_only_layers=[], use_sliding_window=False)
    out["mixtral"] = make_config(
        transformers.MixtralConfig, 1000000.0, **common, head_dim=16, intermediate_size=32, num_hidden_layers=2, num_local_experts=8,
        num_experts_per_tok=2, sliding_window=None)
    common_olmoe = dict(common)
    common_olmoe["num_key_value_heads"] = 4
    out["olmoe"] = make_config(
        transformers.OlmoeConfig, 10000.0, **common_olmoe, intermediate_size=32, num_hidden_layers=2, num_experts=8,
        num_experts_per_tok=2, norm_topk_prob=False)
    return out


def perturb(model, gen):
    """HF initialises norms to 1 and biases to 0; randomise them so a loader that skips one is caught."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def is_fused(keys):
    return any(re.search(r"experts\.gate_up_proj$", k) or re.search(r"experts\.down_proj$", k) for k in keys)


def convert_layout(tensors, cfg):
    """Rewrites expert tensors into the other layout (per-expert 2D <-> fused 3D)."""
    out = {}
    if is_fused(tensors.keys()):
        for k, v in tensors.items():
            m = re.match(r"(.*)\.experts\.gate_up_proj$", k)
            if m:
                inter = v.shape[1] // 2
                for e in range(v.shape[0]):
                    out[f"{m.group(1)}.experts.{e}.gate_proj.weight"] = v[e, :inter].contiguous()
                    out[f"{m.group(1)}.experts.{e}.up_proj.weight"] = v[e, inter:].contiguous()
                continue
            m = re.match(r"(.*)\.experts\.down_proj$", k)
            if m:
                for e in range(v.shape[0]):
                    out[f"{m.group(1)}.experts.{e}.down_proj.weight"] = v[e].contiguous()
                continue
            out[k] = v
    else:
        groups = {}
        for k, v in tensors.items():
            m = re.match(r"(.*)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight$", k)
            if m:
                groups.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = v
            else:
                out[k] = v
        for prefix, d in groups.items():
            n = 1 + max(e for e, _ in d)
            g = lambda e: d.get((e, "gate_proj"), d.get((e, "w1")))
            u = lambda e: d.get((e, "up_proj"), d.get((e, "w3")))
            dn = lambda e: d.get((e, "down_proj"), d.get((e, "w2")))
            out[f"{prefix}.experts.gate_up_proj"] = torch.stack([torch.cat([g(e), u(e)], 0) for e in range(n)])
            out[f"{prefix}.experts.down_proj"] = torch.stack([dn(e) for e in range(n)])
    return out


@torch.no_grad()
def reference(model, gen):
    prompts = []
    for n in PROMPT_LENGTHS:
        ids = torch.randint(2, VOCAB, (n,), generator=gen).tolist()
        seq = list(ids)
        greedy, margins, last_logits = [], [], None
        for step in range(NUM_GREEDY):
            logits = model(torch.tensor([seq])).logits[0, -1].float()
            if step == 0:
                last_logits = logits.tolist()
            top = torch.topk(logits, 2)
            margins.append(float(top.values[0] - top.values[1]))
            tok = int(torch.argmax(logits))
            greedy.append(tok)
            seq.append(tok)
        prompts.append({"token_ids": ids, "last_logits": last_logits, "greedy": greedy, "margins": margins})
    return prompts


def load_all(d):
    tensors = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(d, f)))
    return tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(1234)
    os.makedirs(args.out, exist_ok=True)
    summary = []
    for idx, (name, cfg) in enumerate(configs().items()):
        try:
            summary.append(make_one(args, idx, name, cfg))
        except Exception as e:  # report and go on: one architecture's failure must not hide the others'
            import traceback
            traceback.print_exc()
            summary.append((name, "FAILED", repr(e)))
    print(json.dumps(summary))


def make_one(args, idx, name, cfg):
    if True:
        gen = torch.Generator().manual_seed(100 + idx)
        cfg._attn_implementation = "eager"
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        perturb(model, gen)
        d = os.path.join(args.out, name)
        shutil.rmtree(d, ignore_errors=True)
        # qwen2_moe is saved sharded so the index-file loader is exercised against transformers' own output.
        shard = "200KB" if name == "qwen2_moe" else "50GB"
        model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True, max_shard_size=shard)
        ref_model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                                      attn_implementation="eager").eval()
        prompts = reference(ref_model, gen)
        tensors = load_all(d)
        layout = "fused" if is_fused(tensors.keys()) else "per_expert"
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                       "expert_layout": layout, "prompts": prompts}, f)
        # The same weights in the other expert layout.
        alt = d + "_alt"
        shutil.rmtree(alt, ignore_errors=True)
        os.makedirs(alt)
        shutil.copy(os.path.join(d, "config.json"), alt)
        if os.path.exists(os.path.join(d, "generation_config.json")):
            shutil.copy(os.path.join(d, "generation_config.json"), alt)
        save_file(convert_layout(tensors, cfg), os.path.join(alt, "model.safetensors"), metadata={"format": "pt"})
        alt_layout = "per_expert" if layout == "fused" else "fused"
        with open(os.path.join(alt, "reference.json"), "w") as f:
            json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                       "expert_layout": alt_layout, "prompts": prompts}, f)
        min_margin = min(min(p["margins"]) for p in prompts)
        print(f"{name}: layout={layout} tensors={len(tensors)} files={sorted(os.listdir(d))} "
              f"min_margin={min_margin:.4g}", flush=True)
        print("  names:", sorted(tensors.keys())[:12], flush=True)
        return (name, layout, len(tensors), min_margin)


if __name__ == "__main__":
    main()
