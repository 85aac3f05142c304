// `zmoe generate --model DIR --input IN.jsonl --output OUT.jsonl [--workers N] [--device cpu|cuda]
// [--metrics-json FILE]`: offline batch generation through the same actors as `serve`, on a private endpoint.

#include <unistd.h>

#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>

#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "cli/command.hpp"
#include "cli/engine_flags.hpp"
#include "cli/local_cluster.hpp"
#include "cli/options.hpp"
#include "cli/request_io.hpp"

namespace po = boost::program_options;

namespace {

int cmd_generate(int argc, char** argv) {
    zmoe::engine_config f;
    std::string input, output, metrics_json, tokenizer;
    po::options_description opts("zmoe generate options");
    opts.add_options()("help,h", "show this help")("input", po::value(&input)->required(),
                                                   "requests, one JSON object per line (- = stdin)")(
        "output", po::value(&output)->required(), "results, one JSON object per line, input order (- = stdout)")(
        "metrics-json", po::value(&metrics_json), "write every actor's metrics here at the end")(
        "tokenizer", po::value(&tokenizer), "tokenizer.json or its directory (default: --model)");
    zmoe::cli::add_engine_options(opts, f);
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, opts, vm)) return 0;
    zmoe::cli::default_workers_to_gpus(f, vm);
    if (f.grammar_tokenizer.empty()) f.grammar_tokenizer = tokenizer;  // the workers' structured outputs
    zmoe::log_set_name("generate");
    const auto lines = zmoe::cli::read_request_lines(input);
    // The output is opened first: a bad path fails before any work is done.
    zmoe::cli::result_writer writer(output, lines.size());

    // Offline batches carry their prompts as they are: without a tokenizer, token ids only (text lines get errors).
    std::vector<std::string> fe_args;
    if (!zmoe::cli::tokenizer_json_exists(f.model, tokenizer)) fe_args.push_back("--skip-tokenizer-init");
    zmoe::cli::local_cluster cluster(f, "", tokenizer, fe_args);
    if (!cluster.wait_ready(std::chrono::minutes(10))) return 130;
    size_t failed = 0;
    {
        zmoe::zmoe_client client(cluster.client_endpoint());
        failed =
            zmoe::cli::run_request_lines(client, lines, std::chrono::minutes(10), writer, isatty(STDERR_FILENO) != 0);
        if (!metrics_json.empty()) {
            const auto text = client.metrics(std::chrono::seconds(10));
            std::ofstream out(metrics_json);
            if (!out) throw zmoe::error(zmoe::errc::io, "cannot write " + metrics_json);
            out << text << "\n";
        }
    }
    const bool clean = cluster.shutdown(std::chrono::seconds(10));
    if (failed)
        std::cerr << "zmoe generate: " << failed << " request(s) failed (see their error in " << output << ")\n";
    if (!clean) std::cerr << "zmoe generate: an actor exited with an error\n";
    return failed == 0 && clean ? 0 : 1;
}

}  // namespace

ZMOE_COMMAND("generate", "offline batch generation from a JSONL file through the actors", cmd_generate);
