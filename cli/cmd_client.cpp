// `zmoe client --endpoint tcp://HOST:PORT --input IN.jsonl --output OUT.jsonl`: sends every request at once over
// the frontend socket and writes the same lines as `generate`. `--interactive`: each stdin line is a prompt whose
// reply streams to stdout as it arrives.

#include <unistd.h>

#include <boost/program_options.hpp>
#include <iostream>

#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "cli/command.hpp"
#include "cli/options.hpp"
#include "cli/request_io.hpp"

namespace po = boost::program_options;

namespace {

int interactive(zmoe::zmoe_client& client, uint32_t max_tokens, float temperature, int timeout_s) {
    std::string line;
    int n = 0;
    std::cerr << "> " << std::flush;
    while (std::getline(std::cin, line)) {
        zmoe::client_generate g;
        g.client_request_id = "i" + std::to_string(n++);
        g.prompt = line;
        g.max_tokens = max_tokens;
        g.temperature = temperature;
        client.generate(g);
        for (;;) {
            auto ev = client.next(g.client_request_id, std::chrono::seconds(timeout_s));
            if (!ev) throw zmoe::error(zmoe::errc::peer_dead, "no answer from the server");
            if (auto* d = std::get_if<zmoe::client_delta>(&*ev)) {
                std::cout << d->text << std::flush;
                if (d->finished) {
                    std::cout << "\n";
                    std::cerr << "[" << zmoe::finish_reason_name(d->reason) << ", " << d->completion_tokens
                              << " tokens]\n";
                    break;
                }
            } else {
                const auto& e = std::get<zmoe::client_error>(*ev);
                std::cerr << "error (" << zmoe::errc_name(e.code) << "): " << e.message << "\n";
                break;
            }
        }
        std::cerr << "> " << std::flush;
    }
    return 0;
}

int cmd_client(int argc, char** argv) {
    std::string endpoint, input = "-", output = "-";
    bool is_interactive = false;
    uint32_t max_tokens = 64;
    float temperature = 0.f;
    int timeout_s = 600;
    po::options_description opts("zmoe client options");
    opts.add_options()("help,h", "show this help")("endpoint", po::value(&endpoint)->required(),
                                                   "the frontend, e.g. tcp://127.0.0.1:5555")(
        "input", po::value(&input)->default_value(input), "requests, one JSON object per line (- = stdin)")(
        "output", po::value(&output)->default_value(output), "results, one JSON object per line (- = stdout)")(
        "interactive", po::bool_switch(&is_interactive), "type prompts, watch replies stream")(
        "max-tokens", po::value(&max_tokens)->default_value(max_tokens), "interactive: tokens per reply")(
        "temperature", po::value(&temperature)->default_value(temperature), "interactive: 0 = greedy")(
        "timeout", po::value(&timeout_s)->default_value(timeout_s), "seconds without any answer before giving up");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, opts, vm)) return 0;
    zmoe::zmoe_client client(endpoint);
    if (is_interactive) return interactive(client, max_tokens, temperature, timeout_s);
    const auto lines = zmoe::cli::read_request_lines(input);
    // The output is opened before anything is sent (a bad path loses no work), and each result is written as
    // soon as every earlier one is: an interrupted batch keeps what finished.
    zmoe::cli::result_writer writer(output, lines.size());
    const size_t failed = zmoe::cli::run_request_lines(client, lines, std::chrono::seconds(timeout_s), writer,
                                                       isatty(STDERR_FILENO) != 0);
    if (failed) std::cerr << "zmoe client: " << failed << " request(s) failed (see their error in " << output << ")\n";
    return failed == 0 ? 0 : 1;
}

}  // namespace

ZMOE_COMMAND("client", "send JSONL requests to a running server (or chat with --interactive)", cmd_client);
