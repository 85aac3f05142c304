#pragma once
// The OpenAI-compatible HTTP gateway: an HTTP/1.1 server (cpp-httplib) that is a client of the frontend's ZeroMQ
// socket like any other. Routes: POST /v1/completions, POST /v1/chat/completions (JSON, or Server-Sent Events with
// "stream": true, stream_options.include_usage), GET /v1/models, GET /health (200 when the server is ready, 503
// while it loads or when it is degraded), GET /metrics (Prometheus text of every actor plus the gateway's own
// counters). Errors are OpenAI error objects: 400 for bad JSON or fields, 404 for unknown routes, 503 while the
// engine loads or when the frontend is unreachable. A streaming client that disconnects has its request aborted.
// Each HTTP request runs on its own thread with its own frontend connection.

#include <chrono>
#include <memory>
#include <string>

namespace zmoe::gateway {

struct gateway_options {
    std::string frontend_endpoint;  ///< the frontend's client endpoint, e.g. tcp://127.0.0.1:5555
    std::string host = "127.0.0.1";
    int port = 8000;                ///< 0: any free port
    std::string served_model_name;  ///< the "model" of /v1/models and responses; empty: the frontend's model name
    int num_threads = 64;           ///< concurrent HTTP requests
    std::chrono::milliseconds request_timeout{600000};  ///< longest wait for the frontend's next event
    /// Non-empty: every route but /health needs "Authorization: Bearer <api_key>" (401 otherwise).
    std::string api_key{};
};

class http_gateway {
  public:
    explicit http_gateway(gateway_options options);
    ~http_gateway();
    http_gateway(const http_gateway&) = delete;
    http_gateway& operator=(const http_gateway&) = delete;

    /// Binds the listening socket; returns the port. Throws zmoe::error(io) when it cannot bind.
    int bind();
    /// Serves until stop() (from any thread).
    void run();
    void stop();

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace zmoe::gateway
