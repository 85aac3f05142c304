#pragma once
// Expected failures: a documented error code plus a human-readable message naming what was wrong
// (the file, the tensor, the field). Thrown inside an actor or a command, caught at its boundary and turned
// into an error reply or a non-zero exit; never allowed to cross an actor boundary.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace zmoe {

/// Error codes carried in replies. Append only: the numbers are part of the wire protocol.
enum class errc : uint8_t {
    ok = 0,
    invalid_argument = 1,    ///< a request or command-line field is malformed or out of range
    invalid_checkpoint = 2,  ///< config.json / safetensors missing, truncated, corrupt or inconsistent
    unsupported = 3,         ///< an architecture, dtype, tokenizer component we do not implement
    io = 4,                  ///< a file could not be read or written
    out_of_memory = 5,       ///< no KV blocks / device memory for the request
    peer_dead = 6,           ///< a worker or the engine core stopped answering
    aborted = 7,             ///< the client aborted the request
    protocol = 8,            ///< malformed or version-mismatched message
    internal = 9,            ///< a bug: should never reach a client
    duplicate_request = 10,  ///< a client_request_id already names a live request; that request is untouched
    overloaded = 11,         ///< the server's bounded queues are full: retry later
    unauthenticated = 12,    ///< a client not on loopback without the server's API key, or with a wrong one
};

const char* errc_name(errc e);

class error : public std::runtime_error {
  public:
    error(errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
    errc code() const { return code_; }

  private:
    errc code_;
};

}  // namespace zmoe
