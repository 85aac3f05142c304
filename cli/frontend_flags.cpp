#include "cli/frontend_flags.hpp"

#include "base/error.hpp"
#include "frontend/chat_messages.hpp"

namespace po = boost::program_options;

namespace zmoe::cli {

namespace {

std::chrono::milliseconds seconds_to_ms(double s, const char* flag, bool zero_allowed) {
    if (!(s > 0 || (zero_allowed && s == 0)))
        throw error(errc::invalid_argument,
                    std::string("--") + flag + (zero_allowed ? " must not be negative" : " must be positive"));
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

}  // namespace

frontend_options frontend_flags::resolved() const {
    frontend_options o = options;
    o.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
    o.drain_timeout = seconds_to_ms(shutdown_timeout_s, "shutdown-timeout", true);
    o.client_send_timeout = seconds_to_ms(client_send_timeout_s, "client-send-timeout", false);
    o.client_idle_timeout = seconds_to_ms(client_idle_timeout_s, "client-idle-timeout", false);
    parse_content_format(o.chat_template_content_format);  // refused here, before any process starts
    return o;
}

void add_served_frontend_options(po::options_description& d, frontend_flags& f) {
    frontend_options& o = f.options;
    d.add_options()("tokenizer", po::value(&o.tokenizer_path), "tokenizer.json or its directory (default: --model)")(
        "chat-template", po::value(&o.chat_template_path), "a Jinja file replacing the tokenizer's chat template")(
        "chat-template-content-format",
        po::value(&o.chat_template_content_format)->default_value(o.chat_template_content_format),
        "how the template reads message content: auto (from its syntax), string (text parts joined) or openai "
        "(a list of parts)")(
        "skip-tokenizer-init", po::bool_switch(&o.skip_tokenizer_init),
        "serve prompt_token_ids only, without a tokenizer (required when there is no tokenizer.json)")(
        "shutdown-timeout", po::value(&f.shutdown_timeout_s)->default_value(f.shutdown_timeout_s),
        "on SIGTERM: seconds running requests may finish; then they end with error 7 (aborted)")(
        "client-send-timeout", po::value(&f.client_send_timeout_s)->default_value(f.client_send_timeout_s),
        "seconds a client may take none of its messages before its requests end with an error")(
        "client-idle-timeout", po::value(&f.client_idle_timeout_s)->default_value(f.client_idle_timeout_s),
        "seconds after which the frontend forgets a silent client with no live request")(
        "max-prompt-bytes", po::value(&o.max_prompt_bytes)->default_value(o.max_prompt_bytes),
        "text prompts longer than this are refused with a clear error")(
        "tokenizer-threads", po::value(&o.tokenizer_threads)->default_value(o.tokenizer_threads),
        "threads tokenizing prompts, off the frontend's socket thread");
}

void add_frontend_options(po::options_description& d, frontend_flags& f) {
    frontend_options& o = f.options;
    d.add_options()("engine", po::value(&o.engine_endpoint)->required(), "the engine core's frontend endpoint")(
        "bind", po::value(&o.client_endpoint)->default_value(o.client_endpoint), "where clients connect")(
        "model", po::value(&o.model_dir)->required(), "checkpoint directory (tokenizer.json, config.json)")(
        "workers", po::value(&o.num_workers)->default_value(1), "workers of the run (for health before ready)")(
        "heartbeat-ms", po::value(&f.heartbeat_ms)->default_value(f.heartbeat_ms), "heartbeat interval")(
        "heartbeat-max-missed", po::value(&o.heartbeat_max_missed)->default_value(o.heartbeat_max_missed),
        "intervals of silence before the engine core is declared dead")("run-id", po::value(&o.run_id),
                                                                        "echoed in health replies (set by serve)");
    add_served_frontend_options(d, f);
}

std::vector<std::string> served_frontend_args(const frontend_flags& f) {
    const frontend_options& o = f.options;
    std::vector<std::string> args = {"--shutdown-timeout",    std::to_string(f.shutdown_timeout_s),
                                     "--client-send-timeout", std::to_string(f.client_send_timeout_s),
                                     "--client-idle-timeout", std::to_string(f.client_idle_timeout_s),
                                     "--max-prompt-bytes",    std::to_string(o.max_prompt_bytes),
                                     "--tokenizer-threads",   std::to_string(o.tokenizer_threads)};
    if (o.skip_tokenizer_init) args.push_back("--skip-tokenizer-init");
    if (!o.tokenizer_path.empty()) args.insert(args.end(), {"--tokenizer", o.tokenizer_path});
    if (!o.chat_template_path.empty()) args.insert(args.end(), {"--chat-template", o.chat_template_path});
    if (o.chat_template_content_format != "auto")
        args.insert(args.end(), {"--chat-template-content-format", o.chat_template_content_format});
    return args;
}

frontend_options parse_frontend_args(const std::vector<std::string>& args) {
    frontend_flags f;
    po::options_description d;
    add_frontend_options(d, f);
    try {
        po::variables_map vm;
        po::store(po::command_line_parser(args).options(d).run(), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw error(errc::invalid_argument, e.what());
    }
    return f.resolved();
}

}  // namespace zmoe::cli
