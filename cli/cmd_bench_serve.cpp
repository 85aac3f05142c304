// `zmoe bench serve`: the serving benchmark against a running server (vLLM's `vllm bench serve`: same options,
// metrics and JSON keys). `zmoe bench sweep`: the same at several concurrency caps, a table, JSON and a PNG plot
// of output throughput against time per output token.

#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "base/error.hpp"
#include "cli/bench_metrics.hpp"
#include "cli/bench_plot.hpp"
#include "cli/bench_serve.hpp"
#include "cli/cmd_bench.hpp"
#include "cli/http_bench.hpp"
#include "cli/options.hpp"

namespace po = boost::program_options;

namespace {

using zmoe::cli::serve_bench_params;

/// Which door a pass goes through: the frontend's ZeroMQ socket or the OpenAI HTTP API.
enum class bench_path { zmq, http };

const char* path_name(bench_path p) { return p == bench_path::zmq ? "zmq" : "http"; }

/// A comma list of concurrency caps ("1,64,512"); a lone 0 (no cap) only where zero_alone is allowed.
std::vector<uint32_t> parse_levels(const std::string& list, const char* option, bool zero_alone) {
    std::vector<uint32_t> levels;
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) {
        unsigned long v = 0;
        size_t used = 0;
        try {
            v = std::stoul(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != item.size() || v > UINT32_MAX || (v == 0 && !(zero_alone && list == item)))
            throw zmoe::error(zmoe::errc::invalid_argument, std::string(option) + ": bad value '" + item + "'");
        levels.push_back(static_cast<uint32_t>(v));
    }
    if (levels.empty()) throw zmoe::error(zmoe::errc::invalid_argument, std::string(option) + " is empty");
    return levels;
}

/// The options shared by serve and sweep, and what they fill in.
struct bench_options {
    serve_bench_params params;
    zmoe::cli::http_bench_target http;
    std::string request_rate = "inf";
    std::string percentiles = "90,99";
    std::string model;
    std::string endpoint_type = "completions";
    std::string max_concurrency = "0";
    std::vector<uint32_t> concurrency_list;  ///< --max-concurrency as a comma list of several caps
    std::string json_path;
    std::string dataset = "random";
    std::string dataset_name;  ///< vLLM's spelling of --dataset
    std::string structured;    // --structured-output as given
    bool no_progress = false;
    bool no_keep_alive = false;
    double ready_timeout_s = 60.0;
    std::vector<bench_path> paths;  ///< the passes, in order (zmq first)

    void add(po::options_description& d) {
        auto& p = params;
        d.add_options()("endpoint", po::value(&p.endpoint)->default_value("tcp://127.0.0.1:5555"),
                        "the server's frontend (ZeroMQ); with --base-url too, both are measured, this one first")(
            "base-url", po::value(&http.base_url),
            "an OpenAI-compatible HTTP server, http://HOST:PORT: measured through its streamed API")(
            "endpoint-type", po::value(&endpoint_type)->default_value(endpoint_type),
            "completions (/v1/completions, token-id prompts) or chat (/v1/chat/completions, text prompts)")(
            "served-model-name", po::value(&http.model_name),
            "the \"model\" of the HTTP requests (default: --model when it is not a directory, else the first of "
            "GET /v1/models)")("api-key", po::value(&http.api_key),
                               "sent as a bearer token over HTTP (default: $OPENAI_API_KEY)")(
            "tokenizer", po::value(&http.tokenizer),
            "tokenizer.json (or its directory) that turns random ids into chat text (default: --model DIR)")(
            "http-threads", po::value(&http.num_threads)->default_value(0),
            "I/O threads of the HTTP client (0: half the cores, 1 to 8)")(
            "no-http-keep-alive", po::bool_switch(&no_keep_alive),
            "a new HTTP connection per request (default: connections are kept alive and reused)")(
            "num-prompts", po::value(&p.num_prompts)->default_value(p.num_prompts), "requests to send")(
            "random-input-len", po::value(&p.input_len)->default_value(p.input_len), "prompt tokens per request")(
            "random-output-len", po::value(&p.output_len)->default_value(p.output_len),
            "tokens generated per request (exactly: ignore_eos)")(
            "random-range-ratio", po::value(&p.range_ratio)->default_value(p.range_ratio, "0"),
            "lengths drawn uniformly from [len*(1-r), len*(1+r)]")(
            "request-rate", po::value(&request_rate)->default_value(request_rate),
            "requests per second, Poisson arrivals; inf = all at once")(
            "max-concurrency", po::value(&max_concurrency)->default_value(max_concurrency),
            "requests in flight at most (0 = no cap); bench serve: a comma list runs one pass per cap, as bench "
            "sweep --concurrency")("seed", po::value(&p.seed)->default_value(p.seed),
                                   "seed of the prompts and arrivals")(
            "model", po::value(&model),
            "the served model's directory: its config.json gives the vocabulary (over HTTP, a name that is not a "
            "directory is the requests' model)")("vocab-size", po::value(&p.vocab_size)->default_value(0),
                                                 "prompt token ids are drawn from [0, this) (instead of --model)")(
            "temperature", po::value(&p.temperature)->default_value(p.temperature, "0"), "0 = greedy")(
            "structured-output", po::value(&structured),
            "json_object, schema:FILE (a JSON Schema) or regex:PATTERN: run the requests unconstrained, then "
            "constrained by it (the same prompts), and print both and the ratio of output throughputs")(
            "metric-percentiles", po::value(&percentiles)->default_value(percentiles),
            "comma-separated percentiles reported beside mean and median")("json", po::value(&json_path),
                                                                           "write the result here (JSON)")(
            "timeout", po::value(&p.timeout_s)->default_value(p.timeout_s, "600"),
            "seconds with requests in flight and no answer before the rest fail")(
            "ready-timeout", po::value(&ready_timeout_s)->default_value(ready_timeout_s, "60"),
            "seconds to wait for the server to report healthy")(
            "no-progress", po::bool_switch(&no_progress),
            "no progress bar (there is none unless stderr is a terminal)");
        auto& r = p.prefix_repetition;
        auto& m = p.multi_turn;
        d.add_options()("dataset", po::value(&dataset)->default_value(dataset),
                        "the prompts: random, prefix-repetition (vLLM's prefix_repetition) or multi-turn")(
            "dataset-name", po::value(&dataset_name),
            "vLLM's name of --dataset (random, prefix_repetition, multi_turn; the spellings of --dataset too)")(
            "prefix-repetition-prefix-len", po::value(&r.prefix_len)->default_value(r.prefix_len),
            "prefix-repetition: tokens of each shared prefix")(
            "prefix-repetition-suffix-len", po::value(&r.suffix_len)->default_value(r.suffix_len),
            "prefix-repetition: random tokens after the prefix, per prompt")(
            "prefix-repetition-num-prefixes", po::value(&r.num_prefixes)->default_value(r.num_prefixes),
            "prefix-repetition: distinct prefixes (each shared by --num-prompts / this many prompts)")(
            "prefix-repetition-output-len", po::value(&r.output_len)->default_value(r.output_len),
            "prefix-repetition: tokens generated per request")(
            "multi-turn-num-conversations", po::value(&m.num_conversations)->default_value(m.num_conversations),
            "multi-turn: conversations (side by side up to --max-concurrency)")(
            "multi-turn-num-turns", po::value(&m.num_turns)->default_value(m.num_turns),
            "multi-turn: turns per conversation (requests: conversations x turns)")(
            "multi-turn-system-prompt-len", po::value(&m.system_prompt_len)->default_value(m.system_prompt_len),
            "multi-turn: tokens of the system prompt every conversation starts with")(
            "multi-turn-user-len", po::value(&m.user_len)->default_value(m.user_len),
            "multi-turn: new user tokens per turn")(
            "multi-turn-output-len", po::value(&m.output_len)->default_value(m.output_len),
            "multi-turn: tokens generated per turn (the answer the next turn carries)")(
            "rank-sample-interval", po::value(&p.rank_sample_interval_s)->default_value(0.0, "0"),
            "> 0: read the engine core's per-rank running and waiting requests every this many seconds during the "
            "run (over --endpoint) and report each rank's load");
    }

    /// The dataset and its options: a flag of another dataset, given, is refused by name.
    void finish_dataset(const po::variables_map& vm) {
        std::string name = dataset;
        if (vm.count("dataset-name")) {
            if (!vm["dataset"].defaulted())
                throw zmoe::error(zmoe::errc::invalid_argument, "give --dataset or --dataset-name, not both");
            name = dataset_name;
        }
        const char* flag = vm.count("dataset-name") ? "--dataset-name" : "--dataset";
        if (name == "random")
            params.dataset = zmoe::cli::bench_dataset::random;
        else if (name == "prefix-repetition" || name == "prefix_repetition")
            params.dataset = zmoe::cli::bench_dataset::prefix_repetition;
        else if (name == "multi-turn" || name == "multi_turn")
            params.dataset = zmoe::cli::bench_dataset::multi_turn;
        else
            throw zmoe::error(zmoe::errc::invalid_argument, std::string(flag) +
                                                                " must be random, prefix-repetition "
                                                                "or multi-turn, not '" +
                                                                name + "'");
        dataset = zmoe::cli::bench_dataset_name(params.dataset);
        auto refuse_given = [&](std::initializer_list<const char*> names, const std::string& why) {
            for (const char* n : names)
                if (vm.count(n) && !vm[n].defaulted())
                    throw zmoe::error(zmoe::errc::invalid_argument, std::string("--") + n + " " + why);
        };
        const auto ds = params.dataset;
        using zmoe::cli::bench_dataset;
        if (ds != bench_dataset::random)
            refuse_given({"random-input-len", "random-output-len", "random-range-ratio"},
                         "is an option of --dataset random, not " + dataset);
        if (ds != bench_dataset::prefix_repetition)
            refuse_given({"prefix-repetition-prefix-len", "prefix-repetition-suffix-len",
                          "prefix-repetition-num-prefixes", "prefix-repetition-output-len"},
                         "is an option of --dataset prefix-repetition, not " + dataset);
        if (ds != bench_dataset::multi_turn)
            refuse_given({"multi-turn-num-conversations", "multi-turn-num-turns", "multi-turn-system-prompt-len",
                          "multi-turn-user-len", "multi-turn-output-len"},
                         "is an option of --dataset multi-turn, not " + dataset);
        if (ds == bench_dataset::multi_turn)
            refuse_given({"num-prompts"},
                         "does not apply to --dataset multi-turn: it sends --multi-turn-num-conversations x "
                         "--multi-turn-num-turns requests");
        if (ds != bench_dataset::random && !http.base_url.empty() && endpoint_type != "completions")
            throw zmoe::error(zmoe::errc::invalid_argument, "--endpoint-type " + endpoint_type + ": --dataset " +
                                                                dataset +
                                                                " sends token-id prompts, on /v1/completions only");
        const auto& r = params.prefix_repetition;
        const auto& m = params.multi_turn;
        if (ds == bench_dataset::prefix_repetition) {
            if (r.num_prefixes == 0)
                throw zmoe::error(zmoe::errc::invalid_argument, "--prefix-repetition-num-prefixes must be positive");
            if (r.prefix_len + r.suffix_len == 0)
                throw zmoe::error(zmoe::errc::invalid_argument,
                                  "--prefix-repetition-prefix-len and --prefix-repetition-suffix-len are both 0: "
                                  "an empty prompt");
            if (r.output_len == 0)
                throw zmoe::error(zmoe::errc::invalid_argument, "--prefix-repetition-output-len must be positive");
            if (params.num_prompts < r.num_prefixes)
                throw zmoe::error(zmoe::errc::invalid_argument,
                                  "--num-prompts (" + std::to_string(params.num_prompts) +
                                      ") must be at least --prefix-repetition-num-prefixes (" +
                                      std::to_string(r.num_prefixes) + ")");
        }
        if (ds == bench_dataset::multi_turn) {
            if (m.num_conversations == 0)
                throw zmoe::error(zmoe::errc::invalid_argument, "--multi-turn-num-conversations must be positive");
            if (m.num_turns == 0)
                throw zmoe::error(zmoe::errc::invalid_argument, "--multi-turn-num-turns must be positive");
            if (m.system_prompt_len + m.user_len == 0)
                throw zmoe::error(zmoe::errc::invalid_argument,
                                  "--multi-turn-system-prompt-len and --multi-turn-user-len are both 0: an empty "
                                  "first prompt");
            if (m.output_len == 0)
                throw zmoe::error(zmoe::errc::invalid_argument, "--multi-turn-output-len must be positive");
            if (!http.base_url.empty() && http.tokenizer.empty())
                throw zmoe::error(zmoe::errc::invalid_argument,
                                  "--dataset multi-turn over --base-url reads each answer as text: give --tokenizer "
                                  "PATH (or --model DIR with a tokenizer.json) to carry it into the next turn");
            params.num_prompts = m.num_conversations * m.num_turns;
        }
        if (params.rank_sample_interval_s < 0)
            throw zmoe::error(zmoe::errc::invalid_argument, "--rank-sample-interval must be >= 0");
        if (params.rank_sample_interval_s > 0 && !http.base_url.empty() && vm["endpoint"].defaulted())
            throw zmoe::error(zmoe::errc::invalid_argument,
                              "--rank-sample-interval reads the engine core over ZeroMQ: give --endpoint too");
    }

    std::vector<double> percentile_list() const {
        std::vector<double> out;
        std::stringstream ss(percentiles);
        std::string item;
        while (std::getline(ss, item, ',')) {
            try {
                const double v = std::stod(item);
                if (!(v > 0 && v < 100)) throw std::out_of_range("");
                out.push_back(v);
            } catch (const std::exception&) {
                throw zmoe::error(zmoe::errc::invalid_argument, "--metric-percentiles: bad percentile '" + item + "'");
            }
        }
        return out;
    }

    /// `--structured-output`'s constraint.
    static zmoe::structured_output parse_structured(const std::string& s) {
        if (s == "json_object") return {zmoe::structured_kind::json_object, ""};
        if (s.starts_with("regex:")) return {zmoe::structured_kind::regex, s.substr(6)};
        if (s.starts_with("schema:")) {
            std::ifstream in(s.substr(7));
            if (!in) throw zmoe::error(zmoe::errc::invalid_argument, "--structured-output: cannot read " + s.substr(7));
            std::stringstream text;
            text << in.rdbuf();
            return {zmoe::structured_kind::json_schema, text.str()};
        }
        throw zmoe::error(zmoe::errc::invalid_argument,
                          "--structured-output must be json_object, schema:FILE or regex:PATTERN, not '" + s + "'");
    }

    /// Resolves the passes, the rate, the vocabulary and the progress bar; throws invalid_argument on bad values
    /// (an HTTP option without --base-url among them: nothing given is ignored).
    void finish(const po::variables_map& vm) {
        if (!structured.empty()) {
            params.structured = parse_structured(structured);
            if (!http.base_url.empty())
                throw zmoe::error(zmoe::errc::invalid_argument,
                                  "--structured-output runs over the ZeroMQ endpoint only: leave out --base-url");
        }
        const bool endpoint_given = !vm["endpoint"].defaulted();
        for (const char* name :
             {"endpoint-type", "served-model-name", "api-key", "tokenizer", "http-threads", "no-http-keep-alive"})
            if (vm.count(name) && !vm[name].defaulted() && http.base_url.empty())
                throw zmoe::error(zmoe::errc::invalid_argument,
                                  std::string("--") + name + " is an option of the HTTP pass: give --base-url too");
        concurrency_list = parse_levels(max_concurrency, "--max-concurrency", true);
        params.max_concurrency = concurrency_list.size() == 1 ? concurrency_list[0] : 0;
        if (concurrency_list.size() == 1) concurrency_list.clear();
        paths.clear();
        if (http.base_url.empty() || endpoint_given) paths.push_back(bench_path::zmq);
        if (!http.base_url.empty()) {
            paths.push_back(bench_path::http);
            zmoe::cli::parse_http_url(http.base_url);  // a bad URL is refused before anything is sent
            if (endpoint_type == "completions")
                http.endpoint_type = zmoe::cli::openai_endpoint_type::completions;
            else if (endpoint_type == "chat")
                http.endpoint_type = zmoe::cli::openai_endpoint_type::chat;
            else
                throw zmoe::error(zmoe::errc::invalid_argument,
                                  "--endpoint-type must be completions or chat, not '" + endpoint_type + "'");
            if (http.api_key.empty())
                if (const char* k = std::getenv("OPENAI_API_KEY")) http.api_key = k;
            http.keep_alive = !no_keep_alive;
            // The ZeroMQ endpoint, when given, is also where the served decode steps are read for the HTTP pass.
            if (endpoint_given) http.metrics_endpoint = params.endpoint;
        }
        const bool model_dir = !model.empty() && std::filesystem::is_directory(model);
        if (!model.empty() && !model_dir && !http.base_url.empty() && http.model_name.empty()) http.model_name = model;
        if (model_dir && http.tokenizer.empty() &&
            std::filesystem::exists(std::filesystem::path(model) / "tokenizer.json"))
            http.tokenizer = model;
        if (request_rate == "inf") {
            params.request_rate = std::numeric_limits<double>::infinity();
        } else {
            try {
                params.request_rate = std::stod(request_rate);
            } catch (const std::exception&) {
                params.request_rate = 0;
            }
            if (!(params.request_rate > 0))
                throw zmoe::error(zmoe::errc::invalid_argument, "--request-rate must be a positive number or inf");
        }
        if (params.num_prompts == 0) throw zmoe::error(zmoe::errc::invalid_argument, "--num-prompts must be positive");
        if (params.input_len == 0 || params.output_len == 0)
            throw zmoe::error(zmoe::errc::invalid_argument,
                              "--random-input-len and --random-output-len must be positive");
        if (params.range_ratio < 0 || params.range_ratio >= 1)
            throw zmoe::error(zmoe::errc::invalid_argument, "--random-range-ratio must be in [0, 1)");
        if (model_dir || (!model.empty() && http.base_url.empty())) read_model_vocabulary();
        if (!http.base_url.empty() && http.endpoint_type == zmoe::cli::openai_endpoint_type::chat &&
            http.tokenizer.empty())
            throw zmoe::error(zmoe::errc::invalid_argument,
                              "--endpoint-type chat sends text: give --tokenizer PATH (or --model DIR with a "
                              "tokenizer.json)");
        if (params.vocab_size <= 0)
            throw zmoe::error(zmoe::errc::invalid_argument,
                              "give --model DIR (its config.json has the vocabulary size) or --vocab-size N");
        params.progress = !no_progress && isatty(STDERR_FILENO);
        finish_dataset(vm);
        if (!concurrency_list.empty() && params.dataset != zmoe::cli::bench_dataset::random)
            throw zmoe::error(zmoe::errc::invalid_argument,
                              "--max-concurrency as a list runs a sweep, which takes --dataset random only");
    }

    void read_model_vocabulary() {
        const auto path = std::filesystem::path(model) / "config.json";
        std::ifstream in(path);
        if (!in) throw zmoe::error(zmoe::errc::invalid_argument, "cannot read " + path.string());
        nlohmann::json cfg;
        try {
            cfg = nlohmann::json::parse(in);
        } catch (const std::exception& e) {
            throw zmoe::error(zmoe::errc::invalid_argument, path.string() + ": " + e.what());
        }
        if (params.vocab_size <= 0) params.vocab_size = cfg.value("vocab_size", int64_t{0});
        for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {  // never in a random prompt
            const auto it = cfg.find(key);
            if (it == cfg.end()) continue;
            if (it->is_number_integer()) params.excluded_ids.push_back(it->get<int32_t>());
            if (it->is_array())
                for (const auto& v : *it)
                    if (v.is_number_integer()) params.excluded_ids.push_back(v.get<int32_t>());
        }
    }

    /// The run's parameters, as vLLM's result files carry them.
    nlohmann::ordered_json parameters_json() const {
        char date[32];
        const std::time_t now = std::time(nullptr);
        std::strftime(date, sizeof(date), "%Y%m%d-%H%M%S", std::gmtime(&now));
        nlohmann::ordered_json j;
        j["date"] = date;
        const bool zmq = std::find(paths.begin(), paths.end(), bench_path::zmq) != paths.end();
        const bool over_http = std::find(paths.begin(), paths.end(), bench_path::http) != paths.end();
        j["backend"] = zmq                                                           ? "zmoe"
                       : http.endpoint_type == zmoe::cli::openai_endpoint_type::chat ? "openai-chat"
                                                                                     : "openai";
        if (zmq) j["endpoint"] = params.endpoint;
        if (over_http) {
            j["base_url"] = http.base_url;
            j["endpoint_type"] = endpoint_type;
            j["http_keep_alive"] = http.keep_alive;
        }
        j["model"] = model;
        j["dataset_name"] = dataset;
        j["num_prompts"] = params.num_prompts;
        switch (params.dataset) {
            case zmoe::cli::bench_dataset::random:
                j["random_input_len"] = params.input_len;
                j["random_output_len"] = params.output_len;
                j["random_range_ratio"] = params.range_ratio;
                break;
            case zmoe::cli::bench_dataset::prefix_repetition:
                j["prefix_repetition_prefix_len"] = params.prefix_repetition.prefix_len;
                j["prefix_repetition_suffix_len"] = params.prefix_repetition.suffix_len;
                j["prefix_repetition_num_prefixes"] = params.prefix_repetition.num_prefixes;
                j["prefix_repetition_output_len"] = params.prefix_repetition.output_len;
                break;
            case zmoe::cli::bench_dataset::multi_turn:
                j["multi_turn_num_conversations"] = params.multi_turn.num_conversations;
                j["multi_turn_num_turns"] = params.multi_turn.num_turns;
                j["multi_turn_system_prompt_len"] = params.multi_turn.system_prompt_len;
                j["multi_turn_user_len"] = params.multi_turn.user_len;
                j["multi_turn_output_len"] = params.multi_turn.output_len;
                break;
        }
        if (std::isinf(params.request_rate))
            j["request_rate"] = "inf";
        else
            j["request_rate"] = params.request_rate;
        j["max_concurrency"] = params.max_concurrency ? nlohmann::json(params.max_concurrency) : nlohmann::json();
        j["seed"] = params.seed;
        j["temperature"] = params.temperature;
        return j;
    }
};

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
    std::ofstream out(path);
    out << j.dump(2) << "\n";
    if (!out) throw zmoe::error(zmoe::errc::internal, "cannot write " + path);
}

/// One pass: the summary of the run (vLLM's keys), then the engine core's served decode steps and their floor.
nlohmann::ordered_json run_pass(const bench_options& o, bench_path path) {
    const auto run = path == bench_path::zmq ? zmoe::cli::run_serve_bench(o.params, o.ready_timeout_s)
                                             : zmoe::cli::run_http_bench(o.params, o.http, o.ready_timeout_s);
    nlohmann::ordered_json result;
    if (path == bench_path::http) result["served_model_name"] = run.served_model;
    const auto summary = zmoe::cli::bench_summary(run.records, run.duration_s, o.percentile_list());
    for (const auto& [k, v] : summary.items()) result[k] = v;
    // Beside vLLM's keys: the engine core's served decode steps and their memory floor.
    const auto served = zmoe::cli::served_steps_summary(run.metrics_before, run.metrics_after);
    for (const auto& [k, v] : served.items()) result[k] = v;
    // Expert-parallel runs: the same per GPU (the engine core's ranks).
    const auto per_gpu = zmoe::cli::per_gpu_throughputs(result, zmoe::cli::engine_num_ranks(run.metrics_after));
    for (const auto& [k, v] : per_gpu.items()) result[k] = v;
    // The dataset's own views of the run: TTFT per turn, the prefix cache, the ranks' load.
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    if (o.params.dataset == zmoe::cli::bench_dataset::multi_turn)
        extra.update(zmoe::cli::multi_turn_summary(run.records, o.percentile_list()));
    if (o.params.dataset != zmoe::cli::bench_dataset::random)
        extra.update(zmoe::cli::prefix_cache_summary(run.metrics_before, run.metrics_after, run.prometheus_before,
                                                     run.prometheus_after, run.records));
    extra.update(zmoe::cli::rank_load_summary(run.rank_samples));
    for (const auto& [k, v] : extra.items()) result[k] = v;
    return result;
}

/// Every pass of o with the same prompts: with one path its keys at the top level beside the parameters; with
/// both, one object per path ("zmq", "http").
nlohmann::ordered_json run_one(const bench_options& o) {
    auto result = o.parameters_json();
    if (o.paths.size() == 1) {
        const auto pass = run_pass(o, o.paths[0]);
        for (const auto& [k, v] : pass.items()) result[k] = v;
        return result;
    }
    for (const bench_path path : o.paths) {
        std::cerr << "bench: the " << path_name(path) << " pass\n";
        result[path_name(path)] = run_pass(o, path);
    }
    return result;
}

/// The passes of a result: {name, object} per path ("" and the result itself for a single path).
std::vector<std::pair<std::string, const nlohmann::ordered_json*>> passes(const bench_options& o,
                                                                          const nlohmann::ordered_json& r) {
    std::vector<std::pair<std::string, const nlohmann::ordered_json*>> out;
    if (o.paths.size() == 1) return {{path_name(o.paths[0]), &r}};
    for (const bench_path path : o.paths) out.emplace_back(path_name(path), &r[path_name(path)]);
    return out;
}

/// The side-by-side rows of one or more passes (a header, then one row per pass).
std::string comparison_table(
    const std::vector<std::tuple<std::string, std::string, const nlohmann::ordered_json*>>& rows,
    const char* first_column) {
    std::string out;
    char line[512];
    std::snprintf(line, sizeof(line), "%11s %5s %9s %7s %9s %12s %12s %12s %12s %12s %12s %13s %13s\n", first_column,
                  "path", "completed", "failed", "req/s", "out tok/s", "total tok/s", "med TTFT ms", "p99 TTFT ms",
                  "med TPOT ms", "mean ITL ms", "decode tok/s", "floor tok/s");
    out += line;
    for (const auto& [label, path, r] : rows) {
        std::snprintf(
            line, sizeof(line), "%11s %5s %9llu %7llu %9.2f %12.1f %12.1f %12.2f %12.2f %12.2f %12.2f %13.1f %13.1f\n",
            label.c_str(), path.c_str(), static_cast<unsigned long long>((*r)["completed"].get<uint64_t>()),
            static_cast<unsigned long long>((*r)["failed"].get<uint64_t>()), (*r)["request_throughput"].get<double>(),
            (*r)["output_throughput"].get<double>(), (*r)["total_token_throughput"].get<double>(),
            (*r)["median_ttft_ms"].get<double>(), r->value("p99_ttft_ms", 0.0), (*r)["median_tpot_ms"].get<double>(),
            (*r)["mean_itl_ms"].get<double>(), r->value("decode_output_throughput", 0.0),
            r->value("floor_decode_output_throughput", 0.0));
        out += line;
    }
    return out;
}

/// Each kind of failure of a pass (the first five), with its count, for the terminal.
void print_errors(const std::string& path, const nlohmann::ordered_json& r) {
    std::map<std::string, size_t> counts;
    for (const auto& e : r["errors"])
        if (!e.get<std::string>().empty()) ++counts[e.get<std::string>().substr(0, 300)];
    size_t shown = 0;
    for (const auto& [e, n] : counts) {
        if (++shown > 5) {
            std::cerr << "bench: " << path << ": " << counts.size() - 5 << " more kinds of failure (--json has all)\n";
            break;
        }
        std::cerr << "bench: " << path << ": " << n << " failed: " << e << "\n";
    }
}

/// bench serve at each concurrency cap of levels: --num-prompts requests each when fixed_prompts, else 4 x the
/// cap (at least 8); one table row per cap and path, JSON {parameters, "concurrency", "results"}, an optional
/// plot. Exit status 1 when a pass completed nothing.
int run_sweep(const bench_options& o, const std::vector<uint32_t>& levels, bool fixed_prompts,
              const std::string& plot_path) {
    nlohmann::ordered_json out = o.parameters_json();
    out.erase("max_concurrency");
    out["num_prompts"] = fixed_prompts ? nlohmann::json(o.params.num_prompts) : nlohmann::json("4 x concurrency");
    out["concurrency"] = levels;
    out["results"] = nlohmann::json::array();
    zmoe::cli::line_plot plot{.title = "zmoe: output throughput vs time per output token",
                              .x_label = "median TPOT (ms)",
                              .y_label = "output throughput (tok/s)",
                              .points = {}};
    for (const uint32_t c : levels) {
        bench_options point = o;
        point.params.max_concurrency = c;
        if (!fixed_prompts) point.params.num_prompts = std::max<uint32_t>(8, 4 * c);
        std::cerr << "bench sweep: concurrency " << c << ", " << point.params.num_prompts << " requests\n";
        auto r = run_one(point);
        r["max_concurrency"] = c;
        r["num_prompts"] = point.params.num_prompts;
        if (o.paths.size() == 1)
            plot.points.push_back({.x = r["median_tpot_ms"].get<double>(),
                                   .y = r["output_throughput"].get<double>(),
                                   .label = "c=" + std::to_string(c)});
        out["results"].push_back(std::move(r));
    }
    std::vector<std::tuple<std::string, std::string, const nlohmann::ordered_json*>> rows;
    for (const auto& r : out["results"])
        for (const auto& [name, pass] : passes(o, r)) {
            print_errors(name + " c=" + std::to_string(r["max_concurrency"].get<uint32_t>()), *pass);
            rows.emplace_back(std::to_string(r["max_concurrency"].get<uint32_t>()), name, pass);
        }
    std::cout << comparison_table(rows, "concurrency");
    std::fflush(stdout);
    if (!o.json_path.empty()) write_json(o.json_path, out);
    if (!plot_path.empty()) zmoe::cli::write_plot_png(plot, plot_path);
    for (const auto& r : out["results"])
        for (const auto& [name, pass] : passes(o, r))
            if ((*pass)["completed"].get<uint64_t>() == 0) return 1;
    return 0;
}

/// `--structured-output`: the same prompts unconstrained, then constrained; both tables, a comparison, the ratio of
/// output throughputs, and JSON {parameters, "structured_output", "unconstrained", "structured",
/// "structured_output_throughput_ratio"}. The per-token mask times are in each worker's log when it exits.
int run_structured_comparison(const bench_options& o) {
    bench_options plain = o;
    plain.params.structured = {};
    auto result = o.parameters_json();
    result["structured_output"] = o.structured;
    std::cerr << "bench: the unconstrained pass\n";
    result["unconstrained"] = run_pass(plain, bench_path::zmq);
    std::cerr << "bench: the structured-output pass (" << o.structured << ")\n";
    result["structured"] = run_pass(o, bench_path::zmq);
    const double base = result["unconstrained"]["output_throughput"].get<double>();
    const double constrained = result["structured"]["output_throughput"].get<double>();
    result["structured_output_throughput_ratio"] = base > 0 ? constrained / base : 0.0;
    std::vector<std::tuple<std::string, std::string, const nlohmann::ordered_json*>> rows;
    for (const char* name : {"unconstrained", "structured"}) {
        std::cout << name << ":\n" << zmoe::cli::bench_summary_table(result[name], o.percentile_list());
        print_errors(name, result[name]);
        rows.emplace_back(name, "zmq", &result[name]);
    }
    std::cout << comparison_table(rows, "requests");
    std::printf("structured outputs (%s): output throughput %.1f tok/s vs %.1f unconstrained: %.3f\n",
                o.structured.c_str(), constrained, base, base > 0 ? constrained / base : 0.0);
    std::cout << std::flush;
    if (!o.json_path.empty()) write_json(o.json_path, result);
    return result["unconstrained"]["completed"].get<uint64_t>() > 0 &&
                   result["structured"]["completed"].get<uint64_t>() > 0
               ? 0
               : 1;
}

int cmd_bench_serve(int argc, char** argv) {
    bench_options o;
    po::options_description opts("zmoe bench serve options (against a running `zmoe serve`)");
    o.add(opts);
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, opts, vm)) return 0;
    o.finish(vm);
    if (!o.concurrency_list.empty()) {
        if (o.params.structured.active())
            throw zmoe::error(zmoe::errc::invalid_argument, "--structured-output takes one --max-concurrency");
        return run_sweep(o, o.concurrency_list, !vm["num-prompts"].defaulted(), {});
    }
    if (o.params.structured.active()) return run_structured_comparison(o);
    const auto result = run_one(o);
    const auto ps = passes(o, result);
    std::vector<std::tuple<std::string, std::string, const nlohmann::ordered_json*>> rows;
    for (const auto& [name, r] : ps) {
        if (ps.size() > 1) std::cout << name << ": " << (name == "zmq" ? o.params.endpoint : o.http.base_url) << "\n";
        std::cout << zmoe::cli::bench_summary_table(*r, o.percentile_list());
        std::cout << zmoe::cli::workload_summary_table(*r, o.percentile_list());
        print_errors(name, *r);
        rows.emplace_back(o.params.max_concurrency ? std::to_string(o.params.max_concurrency) : "none", name, r);
    }
    if (ps.size() > 1) std::cout << comparison_table(rows, "concurrency");
    std::cout << std::flush;
    if (!o.json_path.empty()) write_json(o.json_path, result);
    for (const auto& [name, r] : ps)
        if ((*r)["completed"].get<uint64_t>() == 0) return 1;
    return 0;
}

int cmd_bench_sweep(int argc, char** argv) {
    bench_options o;
    std::string concurrency = "1,4,16,64", plot_path;
    po::options_description opts("zmoe bench sweep options (zmoe bench serve at each --concurrency)");
    o.add(opts);
    opts.add_options()("concurrency", po::value(&concurrency)->default_value(concurrency),
                       "comma-separated concurrency caps, one run each")(
        "plot", po::value(&plot_path), "write a PNG plot of output throughput against median TPOT here");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, opts, vm)) return 0;
    const std::vector<uint32_t> levels = parse_levels(concurrency, "--concurrency", false);
    if (!vm["max-concurrency"].defaulted())
        throw zmoe::error(zmoe::errc::invalid_argument,
                          "bench sweep takes its caps from --concurrency, not "
                          "--max-concurrency");
    if (!plot_path.empty() && !zmoe::cli::plot_supported())
        throw zmoe::error(zmoe::errc::invalid_argument, "this zmoe was built without cairo (libcairo2-dev): no --plot");
    const bool fixed_prompts = !vm["num-prompts"].defaulted();
    o.finish(vm);
    if (o.params.dataset != zmoe::cli::bench_dataset::random)
        throw zmoe::error(zmoe::errc::invalid_argument,
                          "bench sweep takes --dataset random only (run bench serve per concurrency for the others)");
    if (!plot_path.empty() && o.paths.size() > 1)
        throw zmoe::error(zmoe::errc::invalid_argument, "--plot draws one path: give --endpoint or --base-url alone");
    return run_sweep(o, levels, fixed_prompts, plot_path);
}

}  // namespace

ZMOE_BENCH_MODE("serve", "the serving benchmark against a running server (vLLM's bench serve)", cmd_bench_serve);
ZMOE_BENCH_MODE("sweep", "bench serve at several concurrency caps; table, JSON and a PNG plot", cmd_bench_sweep);
