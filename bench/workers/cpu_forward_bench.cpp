// Throughput of the CPU forward pass (prefill and batched decode) on a model directory, or by default on a
// synthetic BF16 Qwen3-MoE-shaped checkpoint written to a temporary directory (hidden 1024, 16 heads / 4 KV heads,
// 2 layers, 16 experts top-4 of 256, vocab 8192). Prints a table and writes JSON.
//
//   cpu_forward_bench [--model DIR] [--threads N] [--batch B] [--prompt-len P] [--decode-steps S] [--json OUT]

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "base/error.hpp"
#include "workers/model_runner.hpp"
#include "workers/safetensors_writer.hpp"

namespace {

namespace po = boost::program_options;
using nlohmann::json;

void write_synthetic(const std::string& dir) {
    const int64_t V = 8192, H = 1024, L = 2, E = 16, I = 256, heads = 16, kv = 4, D = 64;
    const json config = {{"model_type", "qwen3_moe"},
                         {"vocab_size", V},
                         {"hidden_size", H},
                         {"num_hidden_layers", L},
                         {"num_attention_heads", heads},
                         {"num_key_value_heads", kv},
                         {"head_dim", D},
                         {"num_experts", E},
                         {"num_experts_per_tok", 4},
                         {"moe_intermediate_size", I},
                         {"intermediate_size", 4 * I},
                         {"norm_topk_prob", true},
                         {"rope_theta", 1e6},
                         {"max_position_embeddings", 4096}};
    std::ofstream(dir + "/config.json") << config.dump(2);
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.f, 0.05f);
    std::vector<zmoe::tensor_to_write> t;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm = false) {
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = norm ? 1.f : d(rng);
        t.push_back({name, zmoe::dtype::bf16, std::move(shape), std::move(v)});
    };
    add("model.embed_tokens.weight", {V, H});
    add("model.norm.weight", {H}, true);
    add("lm_head.weight", {V, H});
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {H}, true);
        add(p + "post_attention_layernorm.weight", {H}, true);
        add(p + "self_attn.q_proj.weight", {heads * D, H});
        add(p + "self_attn.k_proj.weight", {kv * D, H});
        add(p + "self_attn.v_proj.weight", {kv * D, H});
        add(p + "self_attn.o_proj.weight", {H, heads * D});
        add(p + "self_attn.q_norm.weight", {D}, true);
        add(p + "self_attn.k_norm.weight", {D}, true);
        add(p + "mlp.gate.weight", {E, H});
        for (int64_t e = 0; e < E; ++e) {
            const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
            add(ep + "gate_proj.weight", {I, H});
            add(ep + "up_proj.weight", {I, H});
            add(ep + "down_proj.weight", {H, I});
        }
    }
    zmoe::write_safetensors(dir + "/model.safetensors", t);
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
    po::options_description desc("cpu_forward_bench");
    std::string model, json_out;
    int threads = 0, batch = 8, prompt_len = 128, decode_steps = 16;
    desc.add_options()("help", "this help")("model", po::value(&model), "model directory (default: synthetic)")(
        "threads", po::value(&threads), "kernel threads (0 = all cores)")("batch", po::value(&batch), "sequences")(
        "prompt-len", po::value(&prompt_len), "prompt tokens per sequence")(
        "decode-steps", po::value(&decode_steps), "decode steps after the prefill")("json", po::value(&json_out),
                                                                                    "write results here");
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
        std::cout << desc;
        return 0;
    }
    try {
        std::filesystem::path tmp;
        if (model.empty()) {
            tmp = std::filesystem::temp_directory_path() / "zmoe_cpu_forward_bench";
            std::filesystem::create_directories(tmp);
            if (!std::filesystem::exists(tmp / "model.safetensors")) write_synthetic(tmp.string());
            model = tmp.string();
        }
        const int64_t block = 16;
        const int64_t blocks_per_seq = (prompt_len + decode_steps + block - 1) / block;
        zmoe::runner_options o;
        o.block_size = block;
        o.num_kv_blocks = blocks_per_seq * batch;
        o.num_threads = threads;
        zmoe::model_runner runner(model, o);
        const int64_t V = runner.config().vocab_size;

        zmoe::step_request prefill;
        std::mt19937 rng(3);
        for (int b = 0; b < batch; ++b) {
            zmoe::scheduled_seq s;
            s.request_id = static_cast<uint64_t>(b);
            for (int i = 0; i < prompt_len; ++i) s.token_ids.push_back(static_cast<int32_t>(rng() % V));
            for (int64_t k = 0; k < blocks_per_seq; ++k)
                s.block_table.push_back(static_cast<int32_t>(b * blocks_per_seq + k));
            s.do_sample = true;
            prefill.seqs.push_back(s);
        }
        double t0 = now_s();
        runner.execute(prefill);
        const double prefill_s = now_s() - t0;
        t0 = now_s();
        for (int step = 0; step < decode_steps; ++step) {
            zmoe::step_request d;
            d.step_id = static_cast<uint64_t>(step + 1);
            for (zmoe::scheduled_seq s : prefill.seqs) {
                s.token_ids = {zmoe::kPlaceholderToken};
                s.start_pos = prompt_len + step;
                s.sample_index = static_cast<uint32_t>(step + 1);
                d.seqs.push_back(s);
            }
            runner.execute(d);
        }
        const double decode_s = now_s() - t0;
        const double prefill_tps = batch * prompt_len / prefill_s;
        const double decode_tps = decode_steps > 0 ? batch * decode_steps / decode_s : 0.0;
        std::printf("%-12s %8s %8s %10s %14s %14s\n", "model", "threads", "batch", "prompt", "prefill tok/s",
                    "decode tok/s");
        std::printf("%-12s %8d %8d %10d %14.1f %14.1f\n", zmoe::model_arch_name(runner.config().arch),
                    threads == 0 ? static_cast<int>(std::thread::hardware_concurrency()) : threads, batch, prompt_len,
                    prefill_tps, decode_tps);
        if (!json_out.empty()) {
            std::ofstream(json_out) << json{
                {"bench", "cpu_forward"},
                {"model", model},
                {"threads", threads},
                {"batch", batch},
                {"prompt_len", prompt_len},
                {"decode_steps", decode_steps},
                {"prefill_tokens_per_s", prefill_tps},
                {"decode_tokens_per_s",
                 decode_tps}}.dump(2);
        }
    } catch (const zmoe::error& e) {
        std::fprintf(stderr, "cpu_forward_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
