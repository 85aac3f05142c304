#pragma once
// `zmoe bench <mode> [options]`: the benchmarks of the zmoe binary. Each mode lives in its own cli/cmd_bench_*.cpp
// and registers itself with ZMOE_BENCH_MODE(name, one-line help, function), the way subcommands register with
// ZMOE_COMMAND; cmd_bench.cpp dispatches on the mode name.

#include <map>
#include <string>

#include "cli/command.hpp"

namespace zmoe::cli {

/// Every registered bench mode by name. A mode's function gets argv[0] = the mode name.
std::map<std::string, command_info>& bench_mode_table();

struct bench_mode_registrar {
    bench_mode_registrar(const char* name, const char* help, command_fn fn) { bench_mode_table()[name] = {help, fn}; }
};

}  // namespace zmoe::cli

#define ZMOE_BENCH_MODE(name, help, fn) \
    static ::zmoe::cli::bench_mode_registrar ZMOE_COMMAND_CAT(zmoe_bench_mode_, __LINE__)(name, help, fn)
