// `zmoe tokenize` and `zmoe detokenize`: JSON lines in, JSON lines out, through zmoe's own tokenizer.
//   zmoe tokenize   --tokenizer PATH [--input IN.jsonl]   each line a JSON string  -> a JSON array of ids
//   zmoe detokenize --tokenizer PATH [--input IN.jsonl]   each line a JSON array of ids -> a JSON string
// PATH is a tokenizer.json file or a directory containing one; no special tokens are added; --input - or no
// --input reads stdin. A bad line stops with an error naming its line number (exit 1).

#include <boost/program_options.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "cli/command.hpp"
#include "cli/jsonl_input.hpp"
#include "cli/options.hpp"
#include "frontend/tokenizer.hpp"

namespace {

namespace po = boost::program_options;

struct options {
    std::string tokenizer_path;
    std::string input = "-";
    bool skip_special = false;
};

// Parses the shared options; returns false (after printing help) when the command should stop with exit 0.
bool parse_options(int argc, char** argv, const char* what, bool detokenize, options& opt) {
    po::options_description desc(std::string("zmoe ") + argv[0] + ": " + what);
    desc.add_options()("help,h", "show this help")("tokenizer", po::value(&opt.tokenizer_path)->required(),
                                                   "tokenizer.json, or a directory containing it")(
        "input", po::value(&opt.input), "JSON-lines input file, '-' for stdin (default)");
    if (detokenize)
        desc.add_options()("skip-special-tokens", po::bool_switch(&opt.skip_special), "drop special tokens");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, desc, vm)) return false;
    return true;
}

int cmd_tokenize(int argc, char** argv) {
    options opt;
    if (!parse_options(argc, argv, "text to token ids", false, opt)) return 0;
    const zmoe::tokenizer tok = zmoe::tokenizer::from_file(opt.tokenizer_path);
    std::string out;
    zmoe::cli::for_each_jsonl_line(opt.input, [&](const std::string& line) {
        const auto j = nlohmann::json::parse(line);
        if (!j.is_string()) throw zmoe::error(zmoe::errc::invalid_argument, "line is not a JSON string");
        const auto ids = tok.encode(j.get_ref<const std::string&>());
        out.clear();
        out.push_back('[');
        for (size_t i = 0; i < ids.size(); ++i) {
            if (i) out.push_back(',');
            out += std::to_string(ids[i]);
        }
        out += "]\n";
        std::fwrite(out.data(), 1, out.size(), stdout);
    });
    return std::fflush(stdout) == 0 ? 0 : 1;
}

int cmd_detokenize(int argc, char** argv) {
    options opt;
    if (!parse_options(argc, argv, "token ids to text", true, opt)) return 0;
    const zmoe::tokenizer tok = zmoe::tokenizer::from_file(opt.tokenizer_path);
    std::vector<int32_t> ids;
    zmoe::cli::for_each_jsonl_line(opt.input, [&](const std::string& line) {
        const auto j = nlohmann::json::parse(line);
        if (!j.is_array()) throw zmoe::error(zmoe::errc::invalid_argument, "line is not a JSON array of ids");
        ids.clear();
        for (const auto& v : j) {
            if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
                throw zmoe::error(zmoe::errc::invalid_argument, "array element " + v.dump() + " is not a token id");
            ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
        }
        const std::string text = tok.decode(ids, opt.skip_special);
        const std::string line_out = nlohmann::json(text).dump() + "\n";
        std::fwrite(line_out.data(), 1, line_out.size(), stdout);
    });
    return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

ZMOE_COMMAND("tokenize", "text (JSON lines of strings) to token ids", cmd_tokenize);
ZMOE_COMMAND("detokenize", "token ids (JSON lines of arrays) to text", cmd_detokenize);
