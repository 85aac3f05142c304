// Single-thread encode and decode throughput of zmoe's tokenizer over the fixture corpus, per vocabulary, next to
// the Hugging Face `tokenizers` numbers that scripts/make_tokenizer_fixtures.py measured on the same corpus.
// Same method as that script: the whole corpus in a loop until at least --min-seconds, best of 3; MB/s counts the
// corpus' UTF-8 bytes (for decode too), tokens/s the ids produced or consumed.
//
//   tokenizer_bench [--corpus tests/fixtures/tokenizer/tokenizer_corpus.json]
//                   [--hf tests/fixtures/tokenizer/hf_tokenizer_bench.json] [--json OUT] [--vocab qwen3 ...]
// The default vocabularies are the four byte-level ones, plus llama2 when tests/fixtures/tokenizer/llama2.json exists.

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "frontend/tokenizer.hpp"

namespace {

namespace po = boost::program_options;
using nlohmann::json;
using clock_type = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw zmoe::error(zmoe::errc::io, "cannot open " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Seconds per pass of `fn`: passes repeated until min_seconds, best of 3 such runs.
template <typename Fn>
double seconds_per_pass(Fn&& fn, double min_seconds) {
    double best = 1e300;
    for (int run = 0; run < 3; ++run) {
        int passes = 0;
        const auto start = clock_type::now();
        double elapsed = 0;
        do {
            fn();
            ++passes;
            elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
        } while (elapsed < min_seconds);
        best = std::min(best, elapsed / passes);
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string src = ZMOE_SOURCE_DIR;
    std::string corpus_path = src + "/tests/fixtures/tokenizer/tokenizer_corpus.json";
    std::string hf_path = src + "/tests/fixtures/tokenizer/hf_tokenizer_bench.json";
    std::string tokenizers_dir = src + "/third_party/tokenizers";
    std::string json_out;
    std::vector<std::string> names{"qwen3", "deepseek_v3", "llama3", "gpt4o"};
    double min_seconds = 1.0;
    po::options_description desc("tokenizer_bench: single-thread tokenizer throughput vs HF tokenizers");
    desc.add_options()("help,h", "show this help")("corpus", po::value(&corpus_path), "JSON list of strings")(
        "hf", po::value(&hf_path), "hf_tokenizer_bench.json from scripts/make_tokenizer_fixtures.py")(
        "tokenizers-dir", po::value(&tokenizers_dir), "folder with <vocab>/tokenizer.json")(
        "vocab", po::value(&names)->multitoken(), "vocabularies to run")(
        "min-seconds", po::value(&min_seconds), "minimum time of one measurement")("json", po::value(&json_out),
                                                                                   "write the results as JSON here");
    try {
        po::variables_map vm;
        po::store(po::parse_command_line(argc, argv, desc), vm);
        if (vm.count("help")) {
            std::cout << desc << "\n";
            return 0;
        }
        po::notify(vm);
        // llama2 (Mistral/Mixtral's SentencePiece-style file) joins the default list once its HF fixture is in the
        // tree, i.e. once the corpus and the HF numbers have been regenerated with it.
        if (!vm.count("vocab") && std::filesystem::exists(src + "/tests/fixtures/tokenizer/llama2.json"))
            names.push_back("llama2");

        if (!std::filesystem::exists(corpus_path)) {
            std::fprintf(stderr,
                         "no corpus at %s: write one with\n  python3 scripts/make_tokenizer_fixtures.py "
                         "--tokenizers-dir third_party/tokenizers --out DIR --corpus-only\nand pass --corpus "
                         "DIR/tokenizer_corpus.json\n",
                         corpus_path.c_str());
            return 2;
        }
        const auto corpus = json::parse(read_file(corpus_path)).get<std::vector<std::string>>();
        size_t corpus_bytes = 0;
        for (const auto& s : corpus) corpus_bytes += s.size();
        json hf;
        if (std::filesystem::exists(hf_path)) hf = json::parse(read_file(hf_path));

        json results = {{"corpus", corpus_path},
                        {"corpus_strings", corpus.size()},
                        {"corpus_bytes", corpus_bytes},
                        {"threads", 1},
                        {"vocabularies", json::object()}};
        std::printf("corpus: %zu strings, %zu bytes; HF numbers from %s\n\n", corpus.size(), corpus_bytes,
                    hf.is_null() ? "(none)" : hf_path.c_str());
        std::printf("%-12s %8s | %10s %10s %7s | %10s %10s %7s | %12s %12s\n", "vocab", "load s", "enc MB/s", "HF MB/s",
                    "ratio", "dec MB/s", "HF MB/s", "ratio", "enc tok/s", "dec tok/s");
        for (const auto& name : names) {
            const auto t0 = clock_type::now();
            const auto tok = zmoe::tokenizer::from_file(tokenizers_dir + "/" + name);
            const double load_s = std::chrono::duration<double>(clock_type::now() - t0).count();
            std::vector<std::vector<int32_t>> encoded(corpus.size());
            size_t num_tokens = 0;
            for (size_t i = 0; i < corpus.size(); ++i) {
                encoded[i] = tok.encode(corpus[i]);
                num_tokens += encoded[i].size();
            }
            size_t sink = 0;
            const double enc = seconds_per_pass(
                [&] {
                    for (const auto& s : corpus) sink += tok.encode(s).size();
                },
                min_seconds);
            const double dec = seconds_per_pass(
                [&] {
                    for (const auto& ids : encoded) sink += tok.decode(ids).size();
                },
                min_seconds);
            if (sink == 0) std::printf("(empty corpus)\n");
            json r = {{"load_seconds", load_s},
                      {"encode_mb_per_s", corpus_bytes / enc / 1e6},
                      {"encode_tokens_per_s", num_tokens / enc},
                      {"decode_mb_per_s", corpus_bytes / dec / 1e6},
                      {"decode_tokens_per_s", num_tokens / dec},
                      {"corpus_tokens", num_tokens}};
            const json* h = nullptr;
            if (hf.is_object() && hf.contains("vocabularies") && hf["vocabularies"].contains(name))
                h = &hf["vocabularies"][name];
            auto hf_value = [&](const char* key) { return h && h->contains(key) ? (*h)[key].get<double>() : 0.0; };
            const double hf_enc = hf_value("encode_mb_per_s"), hf_dec = hf_value("decode_mb_per_s");
            if (h) {
                r["hf"] = *h;
                r["encode_ratio_vs_hf"] = hf_enc > 0 ? r["encode_mb_per_s"].get<double>() / hf_enc : 0.0;
                r["decode_ratio_vs_hf"] = hf_dec > 0 ? r["decode_mb_per_s"].get<double>() / hf_dec : 0.0;
                if (h->contains("corpus_tokens") && (*h)["corpus_tokens"].get<size_t>() != num_tokens)
                    std::printf("  note: %s gives %zu tokens, HF %zu\n", name.c_str(), num_tokens,
                                (*h)["corpus_tokens"].get<size_t>());
            }
            std::printf("%-12s %8.2f | %10.2f %10.2f %7.2f | %10.2f %10.2f %7.2f | %12.0f %12.0f\n", name.c_str(),
                        load_s, r["encode_mb_per_s"].get<double>(), hf_enc,
                        hf_enc > 0 ? r["encode_mb_per_s"].get<double>() / hf_enc : 0.0,
                        r["decode_mb_per_s"].get<double>(), hf_dec,
                        hf_dec > 0 ? r["decode_mb_per_s"].get<double>() / hf_dec : 0.0,
                        r["encode_tokens_per_s"].get<double>(), r["decode_tokens_per_s"].get<double>());
            results["vocabularies"][name] = r;
        }
        if (!json_out.empty()) {
            std::ofstream out(json_out);
            out << results.dump(2) << "\n";
            if (!out) throw zmoe::error(zmoe::errc::io, "cannot write " + json_out);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
