// `zmoe bench <mode> [options]`: dispatches to the bench modes registered with ZMOE_BENCH_MODE (cli/cmd_bench.hpp).

#include "cli/cmd_bench.hpp"

#include <cstdio>
#include <cstring>

#include "base/error.hpp"

namespace zmoe::cli {

std::map<std::string, command_info>& bench_mode_table() {
    static std::map<std::string, command_info> table;
    return table;
}

}  // namespace zmoe::cli

namespace {

void bench_usage(std::FILE* to) {
    std::fprintf(to, "usage: zmoe bench <mode> [options]   (zmoe bench <mode> --help for its options)\n\nmodes:\n");
    for (const auto& [name, info] : zmoe::cli::bench_mode_table())
        std::fprintf(to, "  %-10s %s\n", name.c_str(), info.help.c_str());
}

int cmd_bench(int argc, char** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
        bench_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const auto& table = zmoe::cli::bench_mode_table();
    const auto it = table.find(argv[1]);
    if (it == table.end()) {
        bench_usage(stderr);
        throw zmoe::error(zmoe::errc::invalid_argument, std::string("unknown bench mode '") + argv[1] + "'");
    }
    return it->second.fn(argc - 1, argv + 1);
}

}  // namespace

ZMOE_COMMAND("bench", "benchmarks (zmoe bench --help lists the modes)", cmd_bench);
