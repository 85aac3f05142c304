// `zmoe --version` (also `zmoe version`): the version, the commit it was built from and the backends built in.

#include <cstdio>

#include "base/version.hpp"
#include "cli/command.hpp"

#ifndef ZMOE_GIT_COMMIT
#define ZMOE_GIT_COMMIT "unknown"
#endif

namespace zmoe::cli {

int print_version(int, char**) {
#ifdef ZMOE_WITH_CUDA
    const char* backends = "cpu, cuda";
#else
    const char* backends = "cpu";
#endif
    std::printf("zmoe %s (commit %s; backends: %s)\n", kVersion, ZMOE_GIT_COMMIT, backends);
    return 0;
}

}  // namespace zmoe::cli

ZMOE_COMMAND("version", "print the version (also zmoe --version)", zmoe::cli::print_version);
