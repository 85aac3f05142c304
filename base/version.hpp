#pragma once
// The zmoe version: one definition, printed by `zmoe --version` and reported in the frontend's health reply.

namespace zmoe {

inline constexpr const char* kVersion = "0.1.0";

}  // namespace zmoe
