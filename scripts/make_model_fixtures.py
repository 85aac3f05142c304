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

FP8 fixtures (names ending in _fp8; dimensions not multiples of 128, so the 128 x 128 blocks are ragged):
    python3 scripts/make_model_fixtures.py --out tests/fixtures/models --only qwen3_moe_fp8,deepseek_v3_fp8
For NAME_fp8 it writes OUT/NAME_fp8_source/ (the random BF16 checkpoint, per-expert layout, and its plain fp32
reference.json as above) and OUT/NAME_fp8/: the same checkpoint quantized to DeepSeek-V3's block-scaled FP8 format
(config.json gains quantization_config {quant_method fp8, fmt e4m3, weight_block_size [128, 128], activation_scheme
dynamic}; every quantized linear has `weight` F8_E4M3 and `weight_scale_inv` F32 [ceil(out/128), ceil(in/128)];
embeddings, norms, routers and lm_head stay BF16). Its reference.json is transformers' model code in fp32 with the
format's arithmetic made explicit: weights dequantized block by block (e4m3 * scale), and the input of every
quantized linear (and of each expert's gate/up and down products) quantized per token and 128-channel group to
e4m3 and back. kv_b_proj (MLA) is the exception: its weight is dequantized but its input is not quantized, as
engines that absorb it into the attention (vLLM, SGLang, zmoe) compute with the dequantized matrix.
The quantization (per 128 x 128 block: scale = amax / 448 in fp32, e4m3 = round-to-nearest-even(w / scale)
saturated to +-448, weight_scale_inv = scale; an all-zero block gets scale 1) is the reference that zmoe's
`--quantization fp8` must reproduce bit for bit from NAME_fp8_source.

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
DEEPSEEK = ("deepseek_v3", "deepseek_v2", "deepseek_v3_flat", "deepseek_v2_greedy", "deepseek_v3_fp8")
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
    # FP8 fixtures: hidden 144 = 128 + 16, expert intermediate 136 = 128 + 8, attention widths 160 / 80 / 192 / 288,
    # so every product has a ragged K block and most a ragged N block.
    common_fp8 = dict(common)
    common_fp8["hidden_size"] = 144
    out["qwen3_moe_fp8"] = lambda: make_config(
        transformers.Qwen3MoeConfig, 10000.0, **common_fp8, head_dim=40, intermediate_size=200,
        moe_intermediate_size=136, num_hidden_layers=2, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[1])
    common_fp8_ds = dict(common_fp8)
    common_fp8_ds["num_key_value_heads"] = 4
    out["deepseek_v3_fp8"] = lambda: make_config(
        transformers.DeepseekV3Config, 10000.0, rope={"rope_type": "yarn", "factor": 4.0,
                                                      "original_max_position_embeddings": 128, "mscale": 0.8,
                                                      "mscale_all_dim": 0.6, "beta_fast": 32, "beta_slow": 1},
        **common_fp8_ds, num_hidden_layers=2, first_k_dense_replace=1, intermediate_size=200,
        moe_intermediate_size=136, n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3,
        n_shared_experts=1, norm_topk_prob=True, routed_scaling_factor=2.5, q_lora_rank=136, kv_lora_rank=64,
        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=40, rope_interleave=True, num_nextn_predict_layers=1,
        attention_bias=False)
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


# ---------------------------------------------------------------------------------------------------------------
# Block-scaled FP8 (DeepSeek-V3's format).

FP8_BLOCK = 128
E4M3_MAX = 448.0
# The linears the format quantizes (every projection of the decoder layers); routers (mlp.gate), qwen2_moe's
# shared_expert_gate, embeddings, norms and lm_head stay BF16. zmoe's loader uses the same list.
FP8_LINEAR = re.compile(r"^model\.layers\.\d+\..*(q_proj|k_proj|v_proj|o_proj|q_a_proj|q_b_proj|kv_a_proj_with_mqa|"
                        r"kv_b_proj|gate_proj|up_proj|down_proj|w1|w2|w3)\.weight$")
FP8_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
              "activation_scheme": "dynamic"}


def e4m3_round(x):
    """fp32 numpy array, already divided by its scale, -> torch float8_e4m3fn: saturated to +-448, then torch's cast
    (round to nearest even)."""
    import numpy as np
    return torch.from_numpy(np.clip(x, np.float32(-E4M3_MAX), np.float32(E4M3_MAX))).to(torch.float8_e4m3fn)


def quantize_weight(w):
    """w [N, K] (bf16) -> (e4m3 [N, K], scale_inv fp32 [ceil(N/128), ceil(K/128)]), per 128 x 128 block:
    scale = amax / 448 (fp32 division; 1 for an all-zero block), e4m3 = RNE(w / scale) saturated. Divisions are
    done in numpy fp32 (IEEE, correctly rounded) so the bits are reproducible anywhere."""
    import numpy as np
    a = w.float().cpu().numpy().astype(np.float32)
    N, K = a.shape
    nb, kb = -(-N // FP8_BLOCK), -(-K // FP8_BLOCK)
    q = torch.empty((N, K), dtype=torch.float8_e4m3fn)
    s = torch.empty((nb, kb), dtype=torch.float32)
    for i in range(nb):
        for j in range(kb):
            blk = a[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK]
            amax = np.float32(np.abs(blk).max())
            scale = np.float32(amax / np.float32(E4M3_MAX)) if amax > 0 else np.float32(1.0)
            q[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = e4m3_round(
                (blk / scale).astype(np.float32))
            s[i, j] = float(scale)
    return q, s


def dequantize_weight(q, s):
    """e4m3 [N, K] and its block scales -> fp32 [N, K] (each element e4m3 * its block's scale, in fp32)."""
    full = s.repeat_interleave(FP8_BLOCK, 0)[:q.shape[0]].repeat_interleave(FP8_BLOCK, 1)[:, :q.shape[1]]
    return q.float() * full


def act_qdq(x):
    """Activations quantized per token and 128-channel group to e4m3 and back, as the FP8 kernels do (scale =
    amax / 448 of the group, 1 for an all-zero group)."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1]).float()
    out = torch.empty_like(x2)
    for k0 in range(0, shape[-1], FP8_BLOCK):
        blk = x2[:, k0:k0 + FP8_BLOCK]
        amax = blk.abs().amax(dim=1, keepdim=True)
        scale = torch.where(amax > 0, amax / torch.full_like(amax, E4M3_MAX), torch.ones_like(amax))
        q = (blk / scale.expand_as(blk)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        out[:, k0:k0 + FP8_BLOCK] = q.float() * scale
    return out.reshape(shape).to(x.dtype)


def fp8_experts_forward(module, experts, quantize):
    """A forward for transformers 5's fused experts module (forward(hidden_states [T, H], top_k_index [T, K],
    top_k_weights [T, K]) -> [T, H]) with the FP8 arithmetic explicit: `experts` = [(gate, up, down)] dequantized
    fp32 per expert; with `quantize`, the expert inputs and the SiLU(gate) * up activations are quantized per token
    and 128-channel group."""
    qdq = act_qdq if quantize else (lambda t: t)

    def forward(hidden_states, top_k_index, top_k_weights, *args, **kwargs):
        out = torch.zeros_like(hidden_states)
        x = qdq(hidden_states)
        for e, (g, u, d) in enumerate(experts):
            tok, pos = torch.where(top_k_index == e)
            if tok.numel() == 0:
                continue
            xe = x[tok]
            h = torch.nn.functional.silu(xe @ g.T) * (xe @ u.T)
            y = qdq(h) @ d.T
            out.index_add_(0, tok, (y * top_k_weights[tok, pos, None]).to(out.dtype))
        return out

    return forward


def install_fp8_emulation(model, quantized):
    """Forward pre-hooks quantizing the input of every quantized nn.Linear (kv_b_proj excepted, see the module
    docstring), and the explicit experts forward on fused expert modules. Raises if a quantized tensor is not
    covered by one of them (a module structure this script does not know)."""
    covered = set()
    hook = lambda mod, args: (act_qdq(args[0]),) + tuple(args[1:])
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and f"{name}.weight" in quantized:
            covered.add(f"{name}.weight")
            if not name.endswith("kv_b_proj"):
                mod.register_forward_pre_hook(hook)
        elif name.endswith(".experts") and not isinstance(mod, torch.nn.ModuleList):
            experts, e = [], 0
            while f"{name}.{e}.gate_proj.weight" in quantized:
                experts.append(tuple(quantized[f"{name}.{e}.{p}_proj.weight"] for p in ("gate", "up", "down")))
                covered.update(f"{name}.{e}.{p}_proj.weight" for p in ("gate", "up", "down"))
                e += 1
            if not experts:
                raise RuntimeError(f"{name}: no quantized per-expert weights for this experts module")
            # Check the replacement against transformers' own forward (same weights, no activation quantization)
            # before installing it, so a change of its signature or semantics is caught here.
            gen = torch.Generator().manual_seed(7)
            T, H, K = 9, experts[0][0].shape[1], min(2, len(experts))
            hs = torch.randn(T, H, generator=gen)
            idx = torch.stack([torch.randperm(len(experts), generator=gen)[:K] for _ in range(T)])
            wts = torch.rand(T, K, generator=gen)
            want = mod(hs, idx, wts)
            got = fp8_experts_forward(mod, experts, quantize=False)(hs, idx, wts)
            if not torch.allclose(want, got, rtol=1e-4, atol=1e-5):
                raise RuntimeError(f"{name}: explicit experts forward differs from transformers' "
                                   f"(max {float((want - got).abs().max()):.3g})")
            mod.forward = fp8_experts_forward(mod, experts, quantize=True)
    missing = sorted(set(quantized) - covered)
    if missing:
        raise RuntimeError(f"quantized tensors no hook covers: {missing[:8]}")


def make_fp8(args, idx, name, cfg):
    torch.manual_seed(1234 + idx)
    prompt_seed = 100 + idx
    cfg._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    perturb(model, torch.Generator().manual_seed(prompt_seed))
    src = os.path.join(args.out, name + "_source")
    dst = os.path.join(args.out, name)
    for d in (src, dst):
        shutil.rmtree(d, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(src, safe_serialization=True)
    tensors = load_all(src)
    if is_fused(tensors.keys()):  # FP8 checkpoints in the wild are per-expert; keep the source the same
        tensors = convert_layout(tensors, cfg)
        for f in os.listdir(src):
            if f.endswith(".safetensors") or f.endswith(".safetensors.index.json"):
                os.remove(os.path.join(src, f))
        save_file(tensors, os.path.join(src, "model.safetensors"), metadata={"format": "pt"})
    # Reference of the BF16 source (plain fp32 arithmetic).
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32,
                                                                  attn_implementation="eager").eval()
    prompts = reference(ref_model, torch.Generator().manual_seed(prompt_seed))
    extra = rope_info(ref_model) if name in DEEPSEEK else {}
    with open(os.path.join(src, "reference.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "expert_layout": "per_expert", "prompts": prompts, **extra}, f)
    del ref_model

    # Quantize.
    fp8, dequant = {}, {}
    for k, v in tensors.items():
        if FP8_LINEAR.match(k) and v.dim() == 2:
            q, s = quantize_weight(v)
            fp8[k] = q
            fp8[k[:-len("weight")] + "weight_scale_inv"] = s
            dequant[k] = dequantize_weight(q, s)
        else:
            fp8[k] = v
    if not dequant:
        raise RuntimeError(f"{name}: nothing quantized")
    os.makedirs(dst)
    save_file(fp8, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = FP8_CONFIG
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if os.path.exists(os.path.join(src, "generation_config.json")):
        shutil.copy(os.path.join(src, "generation_config.json"), dst)

    # Reference of the FP8 checkpoint: the dequantized weights in fp32 (loaded through transformers from a scratch
    # directory with the source's config), activation quantization hooked in.
    scratch = os.path.join(args.out, name + "_scratch")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    deq_all = {k: (dequant[k] if k in dequant else v.float()) for k, v in tensors.items()}
    save_file({k: v.contiguous() for k, v in deq_all.items()}, os.path.join(scratch, "model.safetensors"),
              metadata={"format": "pt"})
    shutil.copy(os.path.join(src, "config.json"), scratch)
    q_model = transformers.AutoModelForCausalLM.from_pretrained(scratch, dtype=torch.float32,
                                                                attn_implementation="eager").eval()
    shutil.rmtree(scratch)
    loaded = q_model.state_dict()
    for k, v in dequant.items():  # the Linear weights are exactly the dequantized ones
        if k in loaded and not torch.equal(loaded[k].float(), v):
            raise RuntimeError(f"{k}: dequantized weight did not survive the load")
    install_fp8_emulation(q_model, dequant)
    fp8_prompts = reference(q_model, torch.Generator().manual_seed(prompt_seed))
    with open(os.path.join(dst, "reference.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "expert_layout": "per_expert", "quantization": FP8_CONFIG,
                   "emulation": "weights dequantized per 128x128 block; inputs of every quantized linear (kv_b_proj "
                                "excepted) and of the experts' gate/up and down quantized per token and 128-channel "
                                "group to e4m3 and back", "prompts": fp8_prompts, **extra}, f)
    min_margin = min(min(p["margins"]) for p in fp8_prompts)
    same = sum(a["greedy"] == b["greedy"] for a, b in zip(prompts, fp8_prompts))
    print(f"{name}: quantized={len(dequant)} tensors={len(fp8)} min_margin={min_margin:.4g} "
          f"prompts with the same greedy tokens as BF16: {same}/{len(prompts)} "
          f"sizes: {os.path.getsize(os.path.join(src, 'model.safetensors'))} -> "
          f"{os.path.getsize(os.path.join(dst, 'model.safetensors'))} bytes", flush=True)
    print("  quantized:", sorted(dequant.keys()), flush=True)
    return (name, "fp8", len(dequant), min_margin)


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
            if name.endswith("_fp8"):
                summary.append(make_fp8(args, idx, name, make_cfg()))
            else:
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
