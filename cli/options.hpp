#pragma once
// Command-line parsing shared by every subcommand: --help, and bad options reported as zmoe::error.

#include <boost/program_options.hpp>
#include <iostream>
#include <string>

#include "base/error.hpp"

namespace zmoe::cli {

/// Parses argv into vm (adding --help when the command did not). Returns false when --help was given: the help
/// was printed and the command should exit 0. Unknown, missing or malformed options throw
/// zmoe::error(invalid_argument) with boost's message.
inline bool parse_options(int argc, char** argv, boost::program_options::options_description& opts,
                          boost::program_options::variables_map& vm,
                          const boost::program_options::positional_options_description* positional = nullptr) {
    namespace po = boost::program_options;
    if (!opts.find_nothrow("help", false)) opts.add_options()("help,h", "show this help");
    try {
        auto parser = po::command_line_parser(argc, argv).options(opts);
        if (positional) parser.positional(*positional);
        po::store(parser.run(), vm);
        if (vm.count("help")) {
            std::cout << opts << "\n";
            return false;
        }
        po::notify(vm);
    } catch (const po::error& e) {
        throw error(errc::invalid_argument, std::string(e.what()) + " (see --help)");
    }
    return true;
}

}  // namespace zmoe::cli
