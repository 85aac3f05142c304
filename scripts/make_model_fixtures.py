#!/usr/bin/env python3
"""Random-initialises tiny checkpoints of every supported MoE architecture with Hugging Face transformers,
saves them in BF16, and records reference outputs computed in fp32 from those BF16 weights.

Run on a machine with torch + transformers (5.x):
    python3 scripts/make_model_fixtures.py --out tests/fixtures/models [--only deepseek_v3,deepseek_v2,...]

For each architecture NAME it writes OUT/NAME/{config.json, model.safetensors[.index.json + shards], reference.json}
and a variant OUT/NAME_alt/ holding the same weights with the *other* expert layout (per-expert 2D tensors vs
transformers 5's fused 3D tensors), so both loaders are exercised against the same reference (the DeepSeek
fixtures other than deepseek_v3 and deepseek_v2 skip the variant to keep the fixtures small).
Every model is initialised from its own seed, so `--only` reproduces one without the others.

reference.json = {"transformers": version, "expert_layout": "fused"|"per_expert",
                  "prompts": [{"token_ids": [...], "last_logits": [vocab floats],
                               "greedy": [N ids], "margins": [top-2 logit margin at each greedy step]}],
                  "rope": {"inv_freq": [...], "attention_scaling": x},   # DeepSeek only: what transformers
                  "softmax_scale": x}                                    # computed, to check the parser against
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


def make_config(cls, rope_theta, rope=None, **kw):
    """transformers 5 spells RoPE as rope_parameters; older versions as rope_theta (+ rope_scaling)."""
    rope = dict(rope or {"rope_type": "default"})
    try:
        return cls(**kw, rope_parameters={**rope, "rope_theta": rope_theta})
    except TypeError:
        return cls(**kw, rope_theta=rope_theta, rope_scaling=None if rope["rope_type"] == "default" else rope)


# The DeepSeek fixtures exercise, between them: group-limited routing (n_group/topk_group), sigmoid scores with a
# non-zero e_score_correction_bias (V3), softmax greedy and group_limited_greedy (V2), q_lora_rank on and off,
# rope_interleave on and off, YaRN with mscale != mscale_all_dim, shared experts, dense first layers,
# norm_topk_prob on and off, routed_scaling_factor != 1, and v_head_dim != qk_nope_head_dim.
DEEPSEEK = ("deepseek_v3", "deepseek_v2", "deepseek_v3_flat", "deepseek_v2_greedy")
WITH_ALT = lambda name: name not in ("deepseek_v3_flat", "deepseek_v2_greedy")


def configs():
    """name -> a function building its config (built one at a time, so one failing config hides no other)."""
    common = dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512, rms_norm_eps=1e-6, initializer_range=0.1,
                  tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=None)
    out = {}
    out["qwen3_moe"] = lambda: make_config(
        transformers.Qwen3MoeConfig, 10000.0, **common, head_dim=16, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
    )
    out["qwen2_moe"] = lambda: make_config(
        transformers.Qwen2MoeConfig, 1000000.0, **common, intermediate_size=96, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        num_hidden_layers=2, num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1,
        mlp_only_layers=[], use_sliding_window=False)
    out["mixtral"] = lambda: make_config(
        transformers.MixtralConfig, 1000000.0, **common, head_dim=16, intermediate_size=32, num_hidden_layers=2, num_local_experts=8,
        num_experts_per_tok=2, sliding_window=None)
    common_olmoe = dict(common)
    common_olmoe["num_key_value_heads"] = 4
    out["olmoe"] = lambda: make_config(
        transformers.OlmoeConfig, 10000.0, **common_olmoe, intermediate_size=32, num_hidden_layers=2, num_experts=8,
        num_experts_per_tok=2, norm_topk_prob=False)
    common_ds = dict(common)
    common_ds["num_key_value_heads"] = 4  # MLA: every head has its own key
    yarn = lambda factor, mscale, mscale_all_dim: {
        "rope_type": "yarn", "factor": factor, "original_max_position_embeddings": 512 // int(factor),
        "mscale": mscale, "mscale_all_dim": mscale_all_dim, "beta_fast": 32, "beta_slow": 1}
    out["deepseek_v3"] = lambda: make_config(
        transformers.DeepseekV3Config, 10000.0, rope=yarn(4.0, 0.8, 0.6), **common_ds, num_hidden_layers=3,
        first_k_dense_replace=1, intermediate_size=96, moe_intermediate_size=24, n_routed_experts=16, n_group=4,
        topk_group=2, num_experts_per_tok=4, n_shared_experts=1, norm_topk_prob=True, routed_scaling_factor=2.5,
        q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12,
        rope_interleave=True, num_nextn_predict_layers=1, attention_bias=False)
    out["deepseek_v2"] = lambda: make_config(  # V2-Lite style (no q LoRA) with group-limited greedy routing and YaRN
        transformers.DeepseekV2Config, 10000.0, rope=yarn(4.0, 0.707, 0.707), **common_ds, num_hidden_layers=3,
        first_k_dense_replace=1, intermediate_size=96, moe_intermediate_size=24, n_routed_experts=8, n_group=4,
        topk_group=2, num_experts_per_tok=3, topk_method="group_limited_greedy", n_shared_experts=2,
        routed_scaling_factor=1.5, norm_topk_prob=False, q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=16, attention_bias=False)
    out["deepseek_v3_flat"] = lambda: make_config(  # Kimi-K2 style: one group; no q LoRA, rope not interleaved
        transformers.DeepseekV3Config, 50000.0, **common_ds, num_hidden_layers=2, first_k_dense_replace=0,
        intermediate_size=96, moe_intermediate_size=24, n_routed_experts=8, n_group=1, topk_group=1,
        num_experts_per_tok=2, n_shared_experts=1, norm_topk_prob=False, routed_scaling_factor=1.0, q_lora_rank=None,
        kv_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, rope_interleave=False,
        attention_bias=False)
    out["deepseek_v2_greedy"] = lambda: make_config(
        transformers.DeepseekV2Config, 10000.0, **common_ds, num_hidden_layers=2, first_k_dense_replace=0,
        intermediate_size=96, moe_intermediate_size=24, n_routed_experts=8, n_group=1, topk_group=1,
        num_experts_per_tok=2, topk_method="greedy", n_shared_experts=1, routed_scaling_factor=1.0,
        norm_topk_prob=True, q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
        v_head_dim=16, attention_bias=False)
    return out


def perturb(model, gen):
    """HF initialises norms to 1, biases and DeepSeek-V3's e_score_correction_bias to 0; randomise them so a
    loader that skips one is caught."""
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif not p.is_floating_point() or "rotary" in name:
                continue
            elif "norm" in name:
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


def rope_info(model):
    """What transformers derived from the RoPE parameters (DeepSeek fixtures), to check the parser against."""
    out = {}
    rot = getattr(model.model, "rotary_emb", None)
    if rot is not None:
        out["rope"] = {"inv_freq": rot.inv_freq.float().tolist(), "attention_scaling": float(rot.attention_scaling)}
    attn = model.model.layers[0].self_attn
    if hasattr(attn, "scaling"):
        out["softmax_scale"] = float(attn.scaling)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    only = [x for x in args.only.split(",") if x]
    summary = []
    for idx, (name, make_cfg) in enumerate(configs().items()):
        if only and name not in only:
            continue
        try:
            summary.append(make_one(args, idx, name, make_cfg()))
        except Exception as e:  # report and go on: one architecture's failure must not hide the others'
            import traceback
            traceback.print_exc()
            summary.append((name, "FAILED", repr(e)))
    print(json.dumps(summary))


def make_one(args, idx, name, cfg):
    if True:
        torch.manual_seed(1234 + idx)
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
        saved, loaded = model.state_dict(), ref_model.state_dict()
        for n, b in saved.items():
            if n.endswith("e_score_correction_bias"):
                if not torch.equal(b.float(), loaded[n].float()) or not bool(b.float().abs().sum() > 0):
                    raise RuntimeError(f"{n} did not survive save/load")  # the bias path would go untested
        prompts = reference(ref_model, gen)
        tensors = load_all(d)
        layout = "fused" if is_fused(tensors.keys()) else "per_expert"
        extra = rope_info(ref_model) if name in DEEPSEEK else {}
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                       "expert_layout": layout, "prompts": prompts, **extra}, f)
        min_margin = min(min(p["margins"]) for p in prompts)
        if not WITH_ALT(name):
            print(f"{name}: layout={layout} tensors={len(tensors)} min_margin={min_margin:.4g}", flush=True)
            print("  names:", sorted(tensors.keys()), flush=True)
            return (name, layout, len(tensors), min_margin)
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
                       "expert_layout": alt_layout, "prompts": prompts, **extra}, f)
        print(f"{name}: layout={layout} tensors={len(tensors)} files={sorted(os.listdir(d))} "
              f"min_margin={min_margin:.4g}", flush=True)
        print("  names:", sorted(tensors.keys()) if name in DEEPSEEK else sorted(tensors.keys())[:12], flush=True)
        return (name, layout, len(tensors), min_margin)


if __name__ == "__main__":
    main()
