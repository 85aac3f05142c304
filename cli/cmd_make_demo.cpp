// `zmoe make-demo --out DIR [--tokenizer DIR]`: writes a small random-initialised qwen3_moe checkpoint
// (config.json, model.safetensors in BF16, generation_config.json) whose vocabulary matches a real tokenizer,
// and copies that tokenizer beside it, so that `zmoe serve` / `zmoe generate` can take text prompts end to end
// on any machine without downloading weights. Its output is random text: it exists to exercise the engine.

#include <boost/program_options.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "cli/command.hpp"
#include "cli/options.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

uint16_t to_bf16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);  // round to nearest even
    return static_cast<uint16_t>((bits + rounding) >> 16);
}

struct tensor_spec {
    std::string name;
    std::vector<int64_t> shape;
    float stddev;  // 0 → a norm weight: 1 + small noise
    /// Adds row_offset[r] * u to row r, u a fixed unit direction of the hidden space (empty: nothing added).
    std::vector<float> row_offset = {};
};

int64_t num_elements(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

/// Writes a safetensors file: 8-byte little-endian header length, JSON header, then the raw BF16 data.
void write_safetensors(const fs::path& path, const std::vector<tensor_spec>& specs, uint64_t seed) {
    nlohmann::ordered_json header;
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t offset = 0;
    for (const auto& s : specs) {
        const uint64_t bytes = num_elements(s.shape) * 2;
        header[s.name] = {{"dtype", "BF16"}, {"shape", s.shape}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::ofstream out(path, std::ios::binary);
    if (!out) throw zmoe::error(zmoe::errc::io, "cannot write " + path.string());
    const uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(text.data(), text.size());
    std::mt19937_64 rng(seed);
    for (const auto& s : specs) {
        std::normal_distribution<float> dist(0.f, s.stddev == 0.f ? 0.1f : s.stddev);
        std::vector<uint16_t> data(num_elements(s.shape));
        const int64_t cols = s.shape.back();
        const float u = 1.f / std::sqrt(static_cast<float>(cols));
        for (size_t i = 0; i < data.size(); ++i) {
            float v = s.stddev == 0.f ? 1.f + dist(rng) : dist(rng);
            if (!s.row_offset.empty()) v += s.row_offset[i / cols] * ((i % cols) % 2 ? -u : u);
            data[i] = to_bf16(v);
        }
        out.write(reinterpret_cast<const char*>(data.data()), data.size() * 2);
    }
    if (!out) throw zmoe::error(zmoe::errc::io, "short write to " + path.string());
}

int cmd_make_demo(int argc, char** argv) {
    po::options_description opts("zmoe make-demo options");
    std::string out_dir, tokenizer_dir;
    int hidden = 64, layers = 2, experts = 8, top_k = 2, heads = 4, kv_heads = 2, head_dim = 16, moe_inter = 64;
    float router_skew = 0.f;
    opts.add_options()("help,h", "show this help")("out", po::value(&out_dir)->required(),
                                                   "directory to write the checkpoint into")(
        "tokenizer", po::value(&tokenizer_dir)->default_value("third_party/tokenizers/qwen3"),
        "directory holding tokenizer.json (+ tokenizer_config.json) to pair the checkpoint with")(
        "layers", po::value(&layers)->default_value(layers), "decoder layers")(
        "hidden", po::value(&hidden)->default_value(hidden), "hidden size (a multiple of 64)")(
        "moe-intermediate", po::value(&moe_inter)->default_value(moe_inter), "expert FFN size")(
        "experts", po::value(&experts)->default_value(experts), "routed experts per layer")(
        "router-skew", po::value(&router_skew)->default_value(router_skew),
        "skew the routers towards low expert ids (Zipf-like; 0 = uniform random), to exercise EPLB");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, opts, vm)) return 0;

    const fs::path tok_json = fs::path(tokenizer_dir) / "tokenizer.json";
    std::ifstream tok_in(tok_json);
    if (!tok_in) throw zmoe::error(zmoe::errc::io, "cannot read " + tok_json.string());
    const auto tok = nlohmann::json::parse(tok_in);
    int64_t vocab = 0;
    for (const auto& [piece, id] : tok.at("model").at("vocab").items())
        vocab = std::max<int64_t>(vocab, id.get<int64_t>() + 1);
    std::vector<int64_t> eos_ids;
    for (const auto& t : tok.value("added_tokens", nlohmann::json::array())) {
        vocab = std::max<int64_t>(vocab, t.at("id").get<int64_t>() + 1);
        const auto content = t.at("content").get<std::string>();
        if (content == "<|im_end|>" || content == "<|endoftext|>" || content == "<|eot_id|>" ||
            content == "<｜end▁of▁sentence｜>")
            eos_ids.push_back(t.at("id").get<int64_t>());
    }
    vocab = (vocab + 63) / 64 * 64;

    fs::create_directories(out_dir);
    nlohmann::ordered_json config = {
        {"architectures", {"Qwen3MoeForCausalLM"}},
        {"model_type", "qwen3_moe"},
        {"vocab_size", vocab},
        {"hidden_size", hidden},
        {"intermediate_size", 4 * hidden},
        {"moe_intermediate_size", moe_inter},
        {"num_hidden_layers", layers},
        {"num_attention_heads", heads},
        {"num_key_value_heads", kv_heads},
        {"head_dim", head_dim},
        {"num_experts", experts},
        {"num_experts_per_tok", top_k},
        {"norm_topk_prob", true},
        {"decoder_sparse_step", 1},
        {"mlp_only_layers", nlohmann::json::array()},
        {"max_position_embeddings", 4096},
        {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000.0},
        {"tie_word_embeddings", true},
        {"attention_bias", false},
        {"hidden_act", "silu"},
        {"torch_dtype", "bfloat16"},
        {"eos_token_id", eos_ids},
    };
    std::ofstream(fs::path(out_dir) / "config.json") << config.dump(2) << "\n";
    std::ofstream(fs::path(out_dir) / "generation_config.json")
        << nlohmann::json{{"eos_token_id", eos_ids}}.dump(2) << "\n";

    std::vector<tensor_spec> specs;
    // With --router-skew, every token embedding shares a component along u and expert e's router row leans
    // towards u in proportion to router_skew / (e + 1): low expert ids win most routings, as hot experts do.
    std::vector<float> embed_offset, gate_offset;
    if (router_skew > 0.f) {
        // Offsets scale with sqrt(hidden) so the skew means the same at any width (8 and 4 at hidden 64).
        const float root = std::sqrt(static_cast<float>(hidden));
        embed_offset.assign(vocab, 0.5f * root);
        for (int e = 0; e < experts; ++e)
            gate_offset.push_back(router_skew * 64.f / (static_cast<float>(e + 1) * root));
    }
    specs.push_back({"model.embed_tokens.weight", {vocab, hidden}, 0.5f, embed_offset});
    specs.push_back({"model.norm.weight", {hidden}, 0.f});
    for (int l = 0; l < layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const float s = 0.1f;
        specs.push_back({p + "input_layernorm.weight", {hidden}, 0.f});
        specs.push_back({p + "post_attention_layernorm.weight", {hidden}, 0.f});
        specs.push_back({p + "self_attn.q_proj.weight", {heads * head_dim, hidden}, s});
        specs.push_back({p + "self_attn.k_proj.weight", {kv_heads * head_dim, hidden}, s});
        specs.push_back({p + "self_attn.v_proj.weight", {kv_heads * head_dim, hidden}, s});
        specs.push_back({p + "self_attn.o_proj.weight", {hidden, heads * head_dim}, s});
        specs.push_back({p + "self_attn.q_norm.weight", {head_dim}, 0.f});
        specs.push_back({p + "self_attn.k_norm.weight", {head_dim}, 0.f});
        specs.push_back({p + "mlp.gate.weight", {experts, hidden}, s, gate_offset});
        for (int e = 0; e < experts; ++e) {
            const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
            specs.push_back({q + "gate_proj.weight", {moe_inter, hidden}, s});
            specs.push_back({q + "up_proj.weight", {moe_inter, hidden}, s});
            specs.push_back({q + "down_proj.weight", {hidden, moe_inter}, s});
        }
    }
    write_safetensors(fs::path(out_dir) / "model.safetensors", specs, 20261121);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
        const fs::path src = fs::path(tokenizer_dir) / f;
        if (fs::exists(src)) fs::copy_file(src, fs::path(out_dir) / f, fs::copy_options::overwrite_existing);
    }
    std::cout << "wrote demo qwen3_moe checkpoint (vocab " << vocab << ", " << layers << " layers, " << experts
              << " experts) to " << out_dir << "\n";
    return 0;
}

}  // namespace

ZMOE_COMMAND("make-demo", "write a small random qwen3_moe checkpoint paired with a real tokenizer", cmd_make_demo);
