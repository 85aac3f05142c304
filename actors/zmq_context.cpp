#include "actors/zmq_context.hpp"

#include <zmq.hpp>

namespace zmoe {

zmq::context_t& process_zmq_context() {
    static auto* ctx = new zmq::context_t(1);
    return *ctx;
}

}  // namespace zmoe
