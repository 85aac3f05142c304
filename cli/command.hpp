#pragma once
// Subcommands of the single `zmoe` binary register themselves here: one file per subcommand in cli/,
// each ending with ZMOE_COMMAND(name, one-line help, function). main.cpp dispatches on argv[1].

#include <map>
#include <string>

namespace zmoe::cli {

/// A subcommand entry point. argv[0] is the subcommand name; returns the process exit code.
using command_fn = int (*)(int argc, char** argv);

struct command_info {
    std::string help;
    command_fn fn;
};

std::map<std::string, command_info>& command_table();

/// `zmoe --version`: prints the version line (cli/cmd_version.cpp); returns 0.
int print_version(int argc, char** argv);

struct command_registrar {
    command_registrar(const char* name, const char* help, command_fn fn) { command_table()[name] = {help, fn}; }
};

}  // namespace zmoe::cli

#define ZMOE_COMMAND_CAT2(a, b) a##b
#define ZMOE_COMMAND_CAT(a, b) ZMOE_COMMAND_CAT2(a, b)
#define ZMOE_COMMAND(name, help, fn) \
    static ::zmoe::cli::command_registrar ZMOE_COMMAND_CAT(zmoe_command_, __LINE__)(name, help, fn)
