#pragma once
// The flags of `zmoe frontend`, registered once: `zmoe frontend` takes all of them; `zmoe serve` takes the ones the
// frontend alone acts on (tokenizer, chat template, limits, drain) and hands them on with served_frontend_args,
// so serve and frontend agree on every name and default.

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "frontend/frontend_actor.hpp"

namespace zmoe::cli {

/// The command line of `zmoe frontend`: frontend_options plus its durations as the flags spell them.
struct frontend_flags {
    frontend_options options;
    int heartbeat_ms = 1000;
    double shutdown_timeout_s = 5.0;
    double client_send_timeout_s = 30.0;
    double client_idle_timeout_s = 60.0;

    /// options with the durations filled in. Throws zmoe::error(invalid_argument) for a negative shutdown timeout
    /// or a client timeout that is not positive.
    frontend_options resolved() const;
};

/// Every flag of `zmoe frontend`, bound to f (defaults: f's current values).
void add_frontend_options(boost::program_options::options_description& d, frontend_flags& f);

/// The flags `zmoe serve` forwards to its frontend: --tokenizer, --chat-template, --skip-tokenizer-init,
/// --shutdown-timeout, --client-send-timeout, --client-idle-timeout, --max-prompt-bytes, --tokenizer-threads.
void add_served_frontend_options(boost::program_options::options_description& d, frontend_flags& f);

/// Those forwarded flags as `--name value` arguments for `zmoe frontend` (optional paths only when set).
std::vector<std::string> served_frontend_args(const frontend_flags& f);

/// The options a `zmoe frontend` command line (without the program name) gives. Throws zmoe::error
/// (invalid_argument) for an unknown, missing or malformed flag, or a duration resolved() refuses.
frontend_options parse_frontend_args(const std::vector<std::string>& args);

}  // namespace zmoe::cli
