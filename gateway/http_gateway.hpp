#pragma once
// The OpenAI-compatible HTTP gateway: an HTTP/1.1 server (Boost.Beast over Boost.Asio) that is a client of the
// frontend's ZeroMQ socket like any other. Routes: POST /v1/completions, POST /v1/chat/completions (JSON, or
// Server-Sent Events with "stream": true, stream_options.include_usage), GET /v1/models, GET /health (200 when the
// server is ready, 503 while it loads, when it is degraded or when the frontend stopped answering), GET|POST /ping
// (the same, vLLM's name), GET /version, GET /load (requests in flight), GET /metrics (Prometheus text: vLLM's
// vllm:* families, every actor's zmoe_* metrics and the gateway's own). Errors are OpenAI error objects.
//
// Event-driven (docs/openai_api.md, "Transport"): a few I/O threads multiplex every connection, each connection's
// work serialised on its strand; one frontend connection (actors/async_client.hpp) carries every request. Bounds:
// header and body read times, header and body sizes, connections in total and per remote address, keep-alive idle
// time, a send timeout for slow readers, requests in flight (429 with Retry-After beyond it, and when the frontend
// refuses for load). A client that closes its connection has its request aborted at the frontend.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace zmoe::gateway {

struct gateway_options {
    std::string frontend_endpoint;  ///< the frontend's client endpoint, e.g. tcp://127.0.0.1:5555
    std::string host = "127.0.0.1";
    int port = 8000;                ///< 0: any free port
    std::string served_model_name;  ///< the "model" of /v1/models and responses; empty: the frontend's model name
    int num_threads = 0;            ///< I/O threads; 0: one per core, at most 16
    /// Chat output parsing (docs/tool_calling.md): tool_calls::tool_call_format_from_name's names (empty: none, and
    /// tool_choice "auto" is refused) and reasoning_format_from_name's (empty: no reasoning split).
    std::string tool_call_parser{};
    std::string reasoning_parser{};
    /// Non-empty: every route but /health and /ping needs "Authorization: Bearer <api_key>" (401 otherwise).
    std::string api_key{};
    std::chrono::milliseconds header_timeout{10000};      ///< a request's header must arrive within this
    std::chrono::milliseconds body_timeout{30000};        ///< and its body within this after the header
    std::chrono::milliseconds keep_alive_timeout{30000};  ///< an idle keep-alive connection's next request header
    /// A write to the client not completed within this ends the request (aborted at the frontend); deltas that
    /// arrive while a write is in flight coalesce, so a slow reader costs at most its own output.
    std::chrono::milliseconds send_timeout{30000};
    size_t max_header_bytes = 16 << 10;  ///< 431 beyond
    size_t max_body_bytes = 32 << 20;    ///< 413 beyond
    /// Open connections beyond which a new one is answered 503 and closed at once; 0: as many as the descriptor
    /// limit allows (less a margin).
    size_t max_connections = 0;
    size_t max_connections_per_address = 4096;  ///< the same, per remote IP address
    size_t max_inflight = 16384;                ///< generate requests in flight beyond which a new one gets 429
    int retry_after_s = 1;                      ///< Retry-After of a 429
    std::chrono::milliseconds heartbeat_interval{1000};  ///< of the frontend connection
    int heartbeat_max_missed = 3;  ///< intervals without a frame from the frontend before it is taken for dead
};

class http_gateway {
  public:
    /// Raises the process's RLIMIT_NOFILE soft limit to its hard limit and connects to the frontend (lazily).
    explicit http_gateway(gateway_options options);
    ~http_gateway();
    http_gateway(const http_gateway&) = delete;
    http_gateway& operator=(const http_gateway&) = delete;

    /// Binds the listening socket; returns the port. Throws zmoe::error(io) when it cannot bind.
    int bind();
    /// Serves until stop() (from any thread) on the calling thread and num_threads - 1 others.
    void run();
    void stop();

    struct impl;  ///< defined in the .cpp (its connections use it)

  private:
    std::unique_ptr<impl> impl_;
};

}  // namespace zmoe::gateway
