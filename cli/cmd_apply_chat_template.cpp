// `zmoe apply-chat-template --tokenizer DIR --input IN.jsonl [--chat-template FILE] [--chat-template-content-format
// auto|string|openai]`: renders each input line
// {"messages": [...], "add_generation_prompt": bool, "tools"?: [...], "chat_template_kwargs"?: {...}} with the
// tokenizer's chat template exactly as Hugging Face's apply_chat_template(..., tokenize=False) does, its messages
// first normalised as vLLM's OpenAI server does (frontend/chat_messages.hpp), and prints the rendered prompt as one
// JSON string per line. A bad line stops with an error naming its line number (and the message field).

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

#include "base/error.hpp"
#include "cli/command.hpp"
#include "cli/jsonl_input.hpp"
#include "cli/options.hpp"
#include "frontend/chat_template.hpp"

namespace {

namespace po = boost::program_options;

int cmd_apply_chat_template(int argc, char** argv) {
    std::string tokenizer_path, input = "-", template_file, now, content_format = "auto";
    po::options_description desc("zmoe apply-chat-template: conversations (JSON lines) to rendered prompts");
    desc.add_options()("tokenizer", po::value(&tokenizer_path)->required(),
                       "tokenizer directory (tokenizer_config.json with a chat_template)")(
        "input", po::value(&input), "JSON-lines input file, '-' for stdin (default)")(
        "chat-template", po::value(&template_file), "a Jinja file replacing the tokenizer's chat template")(
        "chat-template-content-format", po::value(&content_format)->default_value(content_format),
        "how the template reads message content: auto (from its syntax), string or openai")(
        "now", po::value(&now), "the local time strftime_now() reports, YYYY-MM-DDTHH:MM:SS (default: now)");
    po::variables_map vm;
    if (!zmoe::cli::parse_options(argc, argv, desc, vm)) return 0;
    auto tmpl = zmoe::chat_template::from_tokenizer(tokenizer_path, template_file);
    if (tmpl && !now.empty()) {
        std::tm tm{};
        if (!strptime(now.c_str(), "%Y-%m-%dT%H:%M:%S", &tm))
            throw zmoe::error(zmoe::errc::invalid_argument, "--now expects YYYY-MM-DDTHH:MM:SS, got " + now);
        tm.tm_isdst = -1;
        const auto fixed = std::chrono::system_clock::from_time_t(std::mktime(&tm));
        tmpl->set_clock([fixed] { return fixed; });
    }
    if (!tmpl)
        throw zmoe::error(zmoe::errc::unsupported, tokenizer_path + " has no chat template (use --chat-template)");
    if (auto format = zmoe::parse_content_format(content_format)) tmpl->set_content_format(*format);

    zmoe::cli::for_each_jsonl_line(input, [&](const std::string& line) {
        if (line.find_first_not_of(" \t") == std::string::npos) return;
        const auto request = zmoe::parse_chat_request(zmoe::jinja::json::parse(line));
        const std::string out =
            zmoe::jinja::json(tmpl->render(request)).dump(-1, ' ', false, zmoe::jinja::json::error_handler_t::replace) +
            "\n";
        std::fwrite(out.data(), 1, out.size(), stdout);
    });
    return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

ZMOE_COMMAND("apply-chat-template", "conversations (JSON lines) to prompts rendered by the chat template",
             cmd_apply_chat_template);
