// `zmoe client --endpoint tcp://HOST:PORT --input IN.jsonl --output OUT.jsonl`: sends every request at once over
// the frontend socket and writes the same lines as `generate`. `--interactive`: each stdin line is a user turn of a
// chat (rendered by the model's chat template; a plain prompt with --raw or without a template) whose reply streams
// to stdout as it arrives.

#include <unistd.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "cli/command.hpp"
#include "cli/options.hpp"
#include "cli/request_io.hpp"

namespace po = boost::program_options;

namespace {

// Sends one turn and streams its reply to stdout; returns the reply text, or nullopt (after printing the error) when
// the server refused the request. `no_template` is set when the refusal says the model has no chat template.
std::optional<std::string> run_turn(zmoe::zmoe_client& client, zmoe::client_generate& g, int timeout_s,
                                    bool& no_template) {
    client.generate(g);
    std::string reply;
    for (;;) {
        auto ev = client.next(g.client_request_id, std::chrono::seconds(timeout_s));
        if (!ev) throw zmoe::error(zmoe::errc::peer_dead, "no answer from the server");
        if (auto* d = std::get_if<zmoe::client_delta>(&*ev)) {
            std::cout << d->text << std::flush;
            reply += d->text;
            if (d->finished) {
                std::cout << "\n";
                std::cerr << "[" << zmoe::finish_reason_name(d->reason) << ", " << d->completion_tokens << " tokens]\n";
                return reply;
            }
        } else {
            const auto& e = std::get<zmoe::client_error>(*ev);
            no_template = e.message.find("no chat template") != std::string::npos;
            if (!no_template) std::cerr << "error (" << zmoe::errc_name(e.code) << "): " << e.message << "\n";
            return std::nullopt;
        }
    }
}

// Each stdin line is a user turn. The conversation is sent as chat messages, rendered by the model's chat template
// on the server; a model without one (or --raw) gets each line as a plain prompt.
int interactive(zmoe::zmoe_client& client, uint32_t max_tokens, std::optional<float> temperature, int timeout_s,
                bool raw) {
    std::string line;
    int n = 0;
    nlohmann::ordered_json history = nlohmann::ordered_json::array();
    std::cerr << "> " << std::flush;
    while (std::getline(std::cin, line)) {
        zmoe::client_generate g;
        g.client_request_id = "i" + std::to_string(n++);
        g.max_tokens = max_tokens;
        g.temperature = temperature;
        g.prompt = std::string();
        bool no_template = false;
        if (!raw) {
            history.push_back({{"role", "user"}, {"content", line}});
            nlohmann::ordered_json chat = {{"messages", history}, {"add_generation_prompt", true}};
            g.chat = chat.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
            if (auto reply = run_turn(client, g, timeout_s, no_template)) {
                history.push_back({{"role", "assistant"}, {"content", *reply}});
            } else {
                history.erase(history.size() - 1);
                if (no_template) {
                    std::cerr << "(the model has no chat template: sending plain prompts)\n";
                    raw = true;
                }
            }
        }
        if (raw) {
            g.chat.clear();
            g.prompt = line;
            g.client_request_id = "i" + std::to_string(n++);
            run_turn(client, g, timeout_s, no_template);
        }
        std::cerr << "> " << std::flush;
    }
    return 0;
}

int cmd_client(int argc, char** argv) {
    std::string endpoint, input = "-", output = "-", api_key;
    bool is_interactive = false;
    bool raw = false;
    uint32_t max_tokens = 16;  // vLLM's default; sampling defaults are the server's (docs/sampling.md)
    int timeout_s = 600;
    po::options_description opts("zmoe client options");
    opts.add_options()("help,h", "show this help")("endpoint", po::value(&endpoint)->required(),
                                                   "the frontend, e.g. tcp://127.0.0.1:5555")(
        "input", po::value(&input)->default_value(input), "requests, one JSON object per line (- = stdin)")(
        "output", po::value(&output)->default_value(output), "results, one JSON object per line (- = stdout)")(
        "interactive", po::bool_switch(&is_interactive),
        "type chat turns, watch replies stream (the model's chat template renders the conversation)")(
        "raw", po::bool_switch(&raw), "interactive: send each line as a plain prompt, no chat template")(
        "max-tokens", po::value(&max_tokens)->default_value(max_tokens), "interactive: tokens per reply")(
        "temperature", po::value<float>(), "interactive: 0 = greedy (default: the model's, else 1)")(
        "timeout", po::value(&timeout_s)->default_value(timeout_s), "seconds without any answer before giving up")(
        "api-key", po::value(&api_key),
        "the server's API key, needed when not on its loopback (default: ZMOE_API_KEY)");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, opts, vm)) return 0;
    zmoe::zmoe_client client(endpoint, {.api_key = api_key});
    std::optional<float> temperature;
    if (vm.count("temperature")) temperature = vm["temperature"].as<float>();
    if (is_interactive) return interactive(client, max_tokens, temperature, timeout_s, raw);
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
