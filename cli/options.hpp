#pragma once
// Command-line parsing shared by every subcommand: --help, --config FILE, --log-level, and bad options reported as
// zmoe::error.

#include <boost/program_options.hpp>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/log.hpp"

namespace zmoe::cli {

/// "1,64,256" -> {1, 64, 256}: a comma-separated list of positive integers given to option `what`; an item <= 0 or
/// an empty list throws zmoe::error(invalid_argument) naming the option ("--lens: 0", "--lens is empty").
inline std::vector<int32_t> parse_positive_list(const std::string& text, const std::string& what) {
    std::vector<int32_t> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        const int v = std::stoi(item);
        if (v <= 0) throw error(errc::invalid_argument, what + ": " + item);
        out.push_back(v);
    }
    if (out.empty()) throw error(errc::invalid_argument, what + " is empty");
    return out;
}

/// Parses argv into vm, adding to every command:
/// - `--help`: prints the options; parse_options then returns false and the command should exit 0;
/// - `--config FILE`: more options from FILE, one `name = value` per line (the long option names without `--`;
///   `#` starts a comment; a switch takes true/false), Boost.Program_options' config-file format; options given on
///   the command line win over the file's (docs/operations.md);
/// - `--log-level debug|info|warn|error`: sets this process's log level (zmoe serve/generate pass it on to the
///   actor processes they start).
/// Unknown, missing or malformed options (on the command line or in the file), an unreadable file or an unknown
/// level throw zmoe::error(invalid_argument) with the reason.
inline bool parse_options(int argc, char** argv, boost::program_options::options_description& opts,
                          boost::program_options::variables_map& vm,
                          const boost::program_options::positional_options_description* positional = nullptr) {
    namespace po = boost::program_options;
    if (!opts.find_nothrow("help", false)) opts.add_options()("help,h", "show this help");
    if (!opts.find_nothrow("config", false))
        opts.add_options()("config", po::value<std::string>(),
                           "read options from this file (name = value per line; the command line wins)");
    if (!opts.find_nothrow("log-level", false))
        opts.add_options()("log-level", po::value<std::string>(), "debug, info (default), warn or error");
    try {
        auto parser = po::command_line_parser(argc, argv).options(opts);
        if (positional) parser.positional(*positional);
        po::store(parser.run(), vm);
        if (vm.count("help")) {
            std::cout << opts << "\n";
            return false;
        }
        if (vm.count("config")) {
            const auto path = vm["config"].as<std::string>();
            std::ifstream in(path);
            if (!in) throw error(errc::invalid_argument, "--config: cannot read '" + path + "'");
            po::store(po::parse_config_file(in, opts), vm);
        }
        po::notify(vm);
    } catch (const po::error& e) {
        throw error(errc::invalid_argument, std::string(e.what()) + " (see --help)");
    }
    if (vm.count("log-level")) {
        const auto name = vm["log-level"].as<std::string>();
        const auto level = log_level_from_name(name);
        if (!level)
            throw error(errc::invalid_argument, "--log-level: '" + name + "' is not debug, info, warn or error");
        log_set_level(*level);
    }
    return true;
}

}  // namespace zmoe::cli
