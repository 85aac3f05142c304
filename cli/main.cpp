// The zmoe binary: `zmoe <subcommand> [options]`. Subcommands live in cli/cmd_*.cpp.

#include <cstdio>
#include <cstring>
#include <exception>

#include "base/error.hpp"
#include "cli/command.hpp"

namespace zmoe::cli {
std::map<std::string, command_info>& command_table() {
    static std::map<std::string, command_info> table;
    return table;
}
}  // namespace zmoe::cli

static void usage() {
    std::fprintf(stderr,
                 "usage: zmoe <command> [options]   (zmoe <command> --help for its options; zmoe --version)\n\n"
                 "options every command takes: --config FILE, --log-level debug|info|warn|error\n\ncommands:\n");
    for (const auto& [name, info] : zmoe::cli::command_table())
        std::fprintf(stderr, "  %-12s %s\n", name.c_str(), info.help.c_str());
}

int main(int argc, char** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V")) return zmoe::cli::print_version(argc, argv);
    auto& table = zmoe::cli::command_table();
    auto it = table.find(argv[1]);
    if (it == table.end()) {
        std::fprintf(stderr, "zmoe: unknown command '%s'\n", argv[1]);
        usage();
        return 2;
    }
    try {
        return it->second.fn(argc - 1, argv + 1);
    } catch (const zmoe::error& e) {
        std::fprintf(stderr, "zmoe %s: error (%s): %s\n", argv[1], zmoe::errc_name(e.code()), e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "zmoe %s: error: %s\n", argv[1], e.what());
        return 1;
    }
}
