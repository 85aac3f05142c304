#pragma once
// The process's one ZeroMQ context. Every actor and client in a process shares it, which is what lets actors hosted
// in one process talk over inproc:// endpoints.

namespace zmq {
class context_t;
}

namespace zmoe {

/// Created on first use and never terminated: zmq_ctx_term blocks until every socket is closed, and a process that
/// exits while some thread still holds a socket must not hang in a static destructor.
zmq::context_t& process_zmq_context();

}  // namespace zmoe
