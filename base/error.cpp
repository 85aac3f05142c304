#include "base/error.hpp"

namespace zmoe {

const char* errc_name(errc e) {
    switch (e) {
        case errc::ok:
            return "ok";
        case errc::invalid_argument:
            return "invalid_argument";
        case errc::invalid_checkpoint:
            return "invalid_checkpoint";
        case errc::unsupported:
            return "unsupported";
        case errc::io:
            return "io";
        case errc::out_of_memory:
            return "out_of_memory";
        case errc::peer_dead:
            return "peer_dead";
        case errc::aborted:
            return "aborted";
        case errc::protocol:
            return "protocol";
        case errc::internal:
            return "internal";
        case errc::duplicate_request:
            return "duplicate_request";
        case errc::overloaded:
            return "overloaded";
        case errc::unauthenticated:
            return "unauthenticated";
    }
    return "unknown";
}

}  // namespace zmoe
