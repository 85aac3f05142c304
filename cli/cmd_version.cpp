#include <cstdio>

#include "cli/command.hpp"

namespace {
int cmd_version(int, char**) {
    std::printf("zmoe 0.1.0\n");
    return 0;
}
}  // namespace

ZMOE_COMMAND("version", "print the version", cmd_version);
