#pragma once
// Why a request stopped generating; shared by the client and engine protocols.

#include <cstdint>
#include <optional>
#include <string_view>

namespace zmoe {

enum class finish_reason : uint8_t {
    none = 0,    ///< still running ("" on the client wire)
    length = 1,  ///< max_tokens reached (or the model's context is full)
    stop = 2,    ///< an EOS / stop token or a stop string
    abort = 3,   ///< aborted by the client
    error = 4,   ///< failed; an error code and message accompany it
};

/// "", "length", "stop", "abort", "error".
std::string_view finish_reason_name(finish_reason r);
/// The inverse of finish_reason_name; nullopt for an unknown name.
std::optional<finish_reason> finish_reason_from_name(std::string_view name);

}  // namespace zmoe
