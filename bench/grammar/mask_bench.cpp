// Structured-output mask cost on a real vocabulary: for each JSON Schema in bench/grammar/schemas, the compile time
// (the grammar alone; the token mask cache of every position: classes of positions plus their vocabulary walks;
// grammar_compiler::compile as a whole, which does both; and a cached compile) and the distribution of the time
// fill_next_token_bitmask takes per token along random walks that sample only allowed tokens (biased towards
// tokens that close strings and containers, so that walks finish documents). The first walk runs on the grammar
// just returned by the compiler (a never-seen schema's first request); the others give the steady state. Single
// thread; compile times and mask times are also given as CPU time, since a shared machine inflates wall time.
//
//   mask_bench [--vocab third_party/tokenizers/qwen3] [--schemas bench/grammar/schemas] [--walks 20]
//              [--steps 300] [--seed 1] [--json OUT]

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/tokenizer.hpp"
#include "grammar/grammar_compiler.hpp"
#include "grammar/grammar_matcher.hpp"

namespace {

namespace po = boost::program_options;
namespace zg = zmoe::grammar;
using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

/// CPU seconds of this process (the compile phases are single-threaded): unlike wall time, not inflated when the
/// machine is shared.
double cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

/// CPU microseconds of this thread: a mask's cost without the time the thread spent descheduled (the wall-time
/// maxima on a shared machine are that).
double thread_cpu_us() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
    std::string vocab = std::string(ZMOE_SOURCE_DIR) + "/third_party/tokenizers/qwen3";
    std::string schemas = std::string(ZMOE_SOURCE_DIR) + "/bench/grammar/schemas";
    std::string json_out;
    int walks = 20, steps = 300;
    uint32_t seed = 1;
    bool verbose = false;
    po::options_description desc("mask_bench options");
    desc.add_options()("help", "this help")("vocab", po::value(&vocab), "tokenizer directory")(
        "schemas", po::value(&schemas), "directory of *.json schemas")("walks", po::value(&walks), "walks per schema")(
        "steps", po::value(&steps), "most tokens per walk")("seed", po::value(&seed), "random seed")(
        "verbose", po::bool_switch(&verbose), "print masks slower than 200 us")("json", po::value(&json_out),
                                                                                "write the results as JSON here");
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, desc), vm);
        po::notify(vm);
    } catch (const std::exception& e) {
        std::cerr << e.what() << "\n" << desc;
        return 2;
    }
    if (vm.count("help")) {
        std::cout << desc;
        return 0;
    }

    auto t0 = clock_type::now();
    zmoe::tokenizer tok = zmoe::tokenizer::from_file(vocab);
    std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
    std::vector<int32_t> special, stops;
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
        if (!tok.is_valid_id(id)) continue;
        if (tok.is_special(id))
            special.push_back(id);
        else
            bytes[static_cast<size_t>(id)] = std::string(tok.token_bytes(id));
    }
    for (const char* s : {"<|im_end|>", "<|endoftext|>", "<｜end▁of▁sentence｜>", "<|eot_id|>"})
        if (auto id = tok.token_to_id(s)) stops.push_back(*id);
    if (stops.empty() && tok.eos_id()) stops.push_back(*tok.eos_id());
    auto t1 = clock_type::now();
    auto info = std::make_shared<const zg::tokenizer_info>(std::move(bytes), stops, special);
    double info_ms = us_since(t1) / 1000;
    std::printf("vocabulary %s: %d ids, loaded in %.0f ms, tokenizer_info (sort + trie order) %.1f ms\n", vocab.c_str(),
                info->vocab_size(), us_since(t0) / 1000 - info_ms, info_ms);

    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(schemas))
        if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());

    nlohmann::json results = nlohmann::json::array();
    std::vector<double> all_times, all_cpu, all_first_cpu;
    std::printf("%-20s %6s %6s %6s %6s %7s %7s %7s %7s %7s %7s %6s %6s %6s %7s %7s %6s %7s\n", "schema", "states",
                "scan", "masks", "walks", "grammar", "g.cpu", "cache", "c.cpu", "compile", "cmp.cpu", "cached", "p50",
                "p90", "p99", "max", "first99", "docs");
    std::printf("%-20s %6s %6s %6s %6s %7s %7s %7s %7s %7s %7s %6s %6s %6s %7s %7s %6s %7s\n", "", "", "", "", "", "ms",
                "ms", "ms", "ms", "ms", "ms", "us", "us", "us", "us", "us", "us", "");
    std::vector<double> all_first, compile_cpu_all;
    for (const auto& file : files) {
        const std::string text = read_file(file);
        zg::grammar_compiler compiler(info);
        // The two phases apart: the grammar, then the token mask cache (classes of positions and their walks).
        auto c0 = clock_type::now();
        double cpu0 = cpu_ms();
        zg::grammar g = zg::compile_grammar(zg::grammar_kind::json_schema, text);
        double grammar_ms = us_since(c0) / 1000, grammar_cpu_ms = cpu_ms() - cpu0;
        const int32_t num_states = g.num_states();
        auto c1 = clock_type::now();
        double cpu1 = cpu_ms();
        auto phases = std::make_shared<const zg::compiled_grammar>(std::move(g), info);
        phases->precompute_all();
        double masks_ms = us_since(c1) / 1000, masks_cpu_ms = cpu_ms() - cpu1;
        // The compiler's own path, as a request sees it: grammar and the whole cache, then a cached lookup.
        auto c2 = clock_type::now();
        double cpu2 = cpu_ms();
        auto compiled = compiler.compile(zg::grammar_kind::json_schema, text);
        double compile_ms = us_since(c2) / 1000, compile_cpu_ms = cpu_ms() - cpu2;
        compile_cpu_all.push_back(compile_cpu_ms);
        auto c3 = clock_type::now();
        auto cached = compiler.compile(zg::grammar_kind::json_schema, text);
        double cached_us = us_since(c3);
        const auto& warm = compiled;

        std::mt19937 rng(seed);
        std::vector<uint32_t> mask(info->bitmask_words());
        std::vector<double> times, cold_times, cpu_times, cold_cpu_times;
        int docs = 0;
        for (int w = 0; w < walks; ++w) {
            const bool cold = w == 0;
            zg::grammar_matcher m(compiled);
            for (int step = 0; step < steps; ++step) {
                const double t0 = thread_cpu_us();
                auto s0 = clock_type::now();
                m.fill_next_token_bitmask(mask.data());
                double us = us_since(s0);
                (cold ? cold_cpu_times : cpu_times).push_back(thread_cpu_us() - t0);
                (cold ? cold_times : times).push_back(us);
                if (verbose && !cold && us > 200) {
                    std::printf("  slow mask %.0f us, %zu stacks:", us, m.num_stacks());
                    for (int32_t st : m.top_states())
                        std::printf(
                            " state %d (rule '%s', %zu uncertain, %d accepted)", st,
                            warm->rules()
                                .rule_names[static_cast<size_t>(warm->rules().state_rule[static_cast<size_t>(st)])]
                                .c_str(),
                            warm->mask_at(st).uncertain.size(), warm->mask_at(st).num_accepted);
                    std::printf("\n");
                }
                std::vector<int32_t> allowed, closing;
                for (size_t wi = 0; wi < mask.size(); ++wi) {
                    for (uint32_t bitsv = mask[wi]; bitsv; bitsv &= bitsv - 1) {
                        int32_t id = static_cast<int32_t>(wi * 32 + static_cast<size_t>(__builtin_ctz(bitsv)));
                        allowed.push_back(id);
                        const std::string& b = info->token_bytes(id);
                        if (b.find_first_of("\"]}") != std::string::npos ||
                            (b.size() <= 2 && b.find_first_of("0123456789") != std::string::npos))
                            closing.push_back(id);
                    }
                }
                if (allowed.empty()) {
                    std::fprintf(stderr, "%s: empty mask\n", file.filename().c_str());
                    return 1;
                }
                int32_t pick;
                if (m.can_terminate())
                    pick = stops[0];
                else if (!closing.empty() && std::uniform_int_distribution<int>(0, 9)(rng) < 6)
                    pick = closing[std::uniform_int_distribution<size_t>(0, closing.size() - 1)(rng)];
                else
                    pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
                if (!m.accept_token(pick)) {
                    std::fprintf(stderr, "%s: an allowed token was refused\n", file.filename().c_str());
                    return 1;
                }
                if (m.is_terminated()) {
                    ++docs;
                    break;
                }
            }
        }
        all_times.insert(all_times.end(), times.begin(), times.end());
        all_first.insert(all_first.end(), cold_times.begin(), cold_times.end());
        all_cpu.insert(all_cpu.end(), cpu_times.begin(), cpu_times.end());
        all_first_cpu.insert(all_first_cpu.end(), cold_cpu_times.begin(), cold_cpu_times.end());
        const std::string name = file.stem().string();
        std::printf(
            "%-20s %6d %6d %6d %6d %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %6.1f %6.1f %6.1f %7.1f %7.1f %6.1f %3d/%-3d\n",
            name.c_str(), num_states, warm->num_scan_positions(), warm->num_distinct_masks(), warm->num_common_walks(),
            grammar_ms, grammar_cpu_ms, masks_ms, masks_cpu_ms, compile_ms, compile_cpu_ms, cached_us,
            percentile(times, 50), percentile(times, 90), percentile(times, 99), percentile(times, 100),
            percentile(cold_times, 99), docs, walks);
        results.push_back(
            {{"schema", name},
             {"states", num_states},
             {"scan_positions", warm->num_scan_positions()},
             {"distinct_masks", warm->num_distinct_masks()},
             {"common_walks", warm->num_common_walks()},
             {"grammar_compile_ms", grammar_ms},
             {"grammar_compile_cpu_ms", grammar_cpu_ms},
             {"mask_cache_ms", masks_ms},
             {"mask_cache_cpu_ms", masks_cpu_ms},
             {"compile_with_cache_ms", compile_ms},
             {"compile_with_cache_cpu_ms", compile_cpu_ms},
             {"cached_compile_us", cached_us},
             {"mask_us",
              {{"p50", percentile(times, 50)},
               {"p90", percentile(times, 90)},
               {"p99", percentile(times, 99)},
               {"max", percentile(times, 100)}}},
             {"mask_cpu_us",
              {{"p50", percentile(cpu_times, 50)},
               {"p90", percentile(cpu_times, 90)},
               {"p99", percentile(cpu_times, 99)},
               {"max", percentile(cpu_times, 100)}}},
             {"first_walk_mask_us", {{"p99", percentile(cold_times, 99)}, {"max", percentile(cold_times, 100)}}},
             {"first_walk_mask_cpu_us",
              {{"p99", percentile(cold_cpu_times, 99)}, {"max", percentile(cold_cpu_times, 100)}}},
             {"first_walk_tokens", cold_times.size()},
             {"tokens", times.size()},
             {"documents_finished", docs},
             {"walks", walks}});
        (void)cached;
        (void)phases;
    }
    std::printf("all schemas, warm: p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us over %zu tokens\n",
                percentile(all_times, 50), percentile(all_times, 90), percentile(all_times, 99),
                percentile(all_times, 100), all_times.size());
    std::printf("all schemas, first walk after compile: p50 %.1f us, p99 %.1f us, max %.1f us over %zu tokens\n",
                percentile(all_first, 50), percentile(all_first, 99), percentile(all_first, 100), all_first.size());
    std::printf("thread CPU time per mask, warm: p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us\n",
                percentile(all_cpu, 50), percentile(all_cpu, 90), percentile(all_cpu, 99), percentile(all_cpu, 100));
    std::printf("thread CPU time per mask, first walk after compile: p50 %.1f us, p99 %.1f us, max %.1f us\n",
                percentile(all_first_cpu, 50), percentile(all_first_cpu, 99), percentile(all_first_cpu, 100));
    std::printf("compile with the whole mask cache (CPU): median %.2f ms, p90 %.2f ms, max %.2f ms\n",
                percentile(compile_cpu_all, 50), percentile(compile_cpu_all, 90), percentile(compile_cpu_all, 100));
    if (!json_out.empty()) {
        nlohmann::json out{{"vocab", vocab},
                           {"vocab_size", info->vocab_size()},
                           {"walks", walks},
                           {"steps", steps},
                           {"seed", seed},
                           {"schemas", results},
                           {"all",
                            {{"p50", percentile(all_times, 50)},
                             {"p90", percentile(all_times, 90)},
                             {"p99", percentile(all_times, 99)},
                             {"max", percentile(all_times, 100)},
                             {"tokens", all_times.size()}}},
                           {"all_first_walk",
                            {{"p50", percentile(all_first, 50)},
                             {"p99", percentile(all_first, 99)},
                             {"max", percentile(all_first, 100)},
                             {"tokens", all_first.size()}}},
                           {"all_cpu",
                            {{"p50", percentile(all_cpu, 50)},
                             {"p90", percentile(all_cpu, 90)},
                             {"p99", percentile(all_cpu, 99)},
                             {"max", percentile(all_cpu, 100)}}},
                           {"all_first_walk_cpu",
                            {{"p50", percentile(all_first_cpu, 50)},
                             {"p99", percentile(all_first_cpu, 99)},
                             {"max", percentile(all_first_cpu, 100)}}},
                           {"compile_with_cache_cpu_ms",
                            {{"median", percentile(compile_cpu_all, 50)},
                             {"p90", percentile(compile_cpu_all, 90)},
                             {"max", percentile(compile_cpu_all, 100)}}}};
        std::ofstream(json_out) << out.dump(2) << "\n";
    }
    return 0;
}
