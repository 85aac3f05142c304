#include "gateway/http_gateway.hpp"

#include <httplib.h>

#include <atomic>
#include <filesystem>
#include <mutex>

#include "actors/run_secret.hpp"
#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "base/metrics.hpp"
#include "gateway/openai_api.hpp"

namespace zmoe::gateway {

namespace {

constexpr const char* kJson = "application/json";

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

void send_error(httplib::Response& res, const api_error& e) {
    res.status = e.status;
    res.set_content(error_body(e), kJson);
}

// A refusal from the frontend: "the engine is still starting" is a 503 (retry later), not a bad request.
api_error frontend_error(const client_error& e) {
    if (e.code == errc::unsupported && e.message.find("starting") != std::string::npos)
        return {.status = 503, .message = e.message, .type = "service_unavailable", .param = {}};
    return error_from_errc(e.code, e.message);
}

// One generate request in flight: its frontend connection and what has been answered so far.
struct stream_state {
    std::unique_ptr<zmoe_client> client;
    openai_request req;
    std::string id;
    int64_t created = 0;
    std::optional<client_event> pending;  // the first event, read before the response status was chosen
    bool first_chunk = true;
    bool done = false;
    uint32_t prompt_tokens = 0;
    uint32_t completion_tokens = 0;
};

}  // namespace

struct http_gateway::impl {
    gateway_options options;
    httplib::Server server;
    std::mutex metrics_mutex;
    metrics_registry metrics;
    std::atomic<uint64_t> next_id{0};
    int bound_port = 0;

    void count(const std::string& name, double v = 1.0) {
        std::lock_guard<std::mutex> lock(metrics_mutex);
        metrics.counter_add(name, v);
    }

    std::string model_name(zmoe_client& client) {
        if (!options.served_model_name.empty()) return options.served_model_name;
        try {
            const auto h = client.health(std::chrono::seconds(5));
            return std::filesystem::path(h.model).filename().string().empty()
                       ? h.model
                       : std::filesystem::path(h.model).filename().string();
        } catch (const error&) {
            return "zmoe";
        }
    }

    void routes() {
        server.new_task_queue = [n = options.num_threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
        // The API key (zmoe serve --api-key): checked before any route but /health, in constant time.
        server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            if (options.api_key.empty() || req.path == "/health" ||
                secrets_equal(req.get_header_value("Authorization"), "Bearer " + options.api_key))
                return httplib::Server::HandlerResponse::Unhandled;
            send_error(res, {.status = 401,
                             .message = "missing or wrong API key (send the header Authorization: Bearer KEY)",
                             .type = "authentication_error",
                             .param = {}});
            return httplib::Server::HandlerResponse::Handled;
        });
        server.Get("/health", [this](const httplib::Request&, httplib::Response& res) { health(res); });
        server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { models(res); });
        server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { prometheus(res); });
        server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
            generate(req, res, endpoint_kind::completion);
        });
        server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
            generate(req, res, endpoint_kind::chat);
        });
        server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return;
            const int status = res.status;
            send_error(res, {.status = status,
                             .message = status == 404 ? "no route " + req.method + " " + req.path
                                                      : "HTTP error " + std::to_string(status),
                             .type = status == 404 ? "not_found_error" : "invalid_request_error",
                             .param = {}});
        });
        server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "internal error";
            try {
                if (ep) std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            send_error(res, {.status = 500, .message = what, .type = "internal_server_error", .param = {}});
        });
    }

    void health(httplib::Response& res) {
        try {
            zmoe_client client(options.frontend_endpoint);
            const auto h = client.health(std::chrono::seconds(5));
            if (h.status == "ok") {
                res.set_content(R"({"status":"ok"})", kJson);
                return;
            }
            send_error(res, {.status = 503,
                             .message = "server " + h.status + (h.detail.empty() ? "" : ": " + h.detail),
                             .type = "service_unavailable",
                             .param = {}});
        } catch (const error& e) {
            send_error(res, {.status = 503, .message = e.what(), .type = "service_unavailable", .param = {}});
        }
    }

    void models(httplib::Response& res) {
        zmoe_client client(options.frontend_endpoint);
        const ojson model = {
            {"id", model_name(client)}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "zmoe"}};
        res.set_content(ojson{{"object", "list"}, {"data", ojson::array({model})}}.dump(), kJson);
    }

    void prometheus(httplib::Response& res) {
        nlohmann::json actors = nlohmann::json::object();
        try {
            zmoe_client client(options.frontend_endpoint);
            const auto all = nlohmann::json::parse(client.metrics(std::chrono::seconds(5)));
            for (const auto& [k, v] : all.items())
                if (v.is_object() && v.contains("counters")) actors[k] = v;
        } catch (const std::exception& e) {
            count("metrics_scrape_failures");
        }
        {
            std::lock_guard<std::mutex> lock(metrics_mutex);
            actors["gateway"] = metrics.to_json();
        }
        res.set_content(metrics_to_prometheus(actors), "text/plain; version=0.0.4");
    }

    void generate(const httplib::Request& http_req, httplib::Response& res, endpoint_kind kind) {
        count(kind == endpoint_kind::chat ? "http_chat_completions" : "http_completions");
        auto st = std::make_shared<stream_state>();
        try {
            st->req = parse_openai_request(http_req.body, kind);
        } catch (const api_error& e) {
            count("http_bad_requests");
            return send_error(res, e);
        }
        st->client = std::make_unique<zmoe_client>(options.frontend_endpoint);
        if (st->req.model.empty()) st->req.model = model_name(*st->client);
        const uint64_t n = next_id++;
        st->id = std::string(kind == endpoint_kind::chat ? "chatcmpl-" : "cmpl-") + std::to_string(unix_now()) + "-" +
                 std::to_string(n);
        st->created = unix_now();
        st->req.generate.client_request_id = "http" + std::to_string(n);
        st->client->generate(st->req.generate);
        // The first event decides the status: a refusal is an HTTP error, anything else a 200.
        st->pending = st->client->next(st->req.generate.client_request_id, options.request_timeout);
        if (!st->pending)
            return send_error(
                res,
                {.status = 503, .message = "no answer from the server", .type = "service_unavailable", .param = {}});
        if (auto* e = std::get_if<client_error>(&*st->pending)) {
            count("http_refused");
            return send_error(res, frontend_error(*e));
        }
        if (!st->req.stream) return complete(st, res);
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream", [this, st](size_t, httplib::DataSink& sink) { return stream_step(*st, sink); });
    }

    // Non-streamed: waits for the whole output.
    void complete(const std::shared_ptr<stream_state>& st, httplib::Response& res) {
        std::string text;
        finish_reason reason = finish_reason::none;
        for (;;) {
            std::optional<client_event> ev = std::move(st->pending);
            st->pending.reset();
            if (!ev) ev = st->client->next(st->req.generate.client_request_id, options.request_timeout);
            if (!ev) {
                st->client->abort(st->req.generate.client_request_id);
                return send_error(res, {.status = 503,
                                        .message = "no answer from the server",
                                        .type = "service_unavailable",
                                        .param = {}});
            }
            if (auto* e = std::get_if<client_error>(&*ev)) return send_error(res, frontend_error(*e));
            const auto& d = std::get<client_delta>(*ev);
            text += d.text;
            st->prompt_tokens = d.prompt_tokens;
            st->completion_tokens = d.completion_tokens;
            if (d.finished) {
                reason = d.reason;
                break;
            }
        }
        count("http_completed");
        res.set_content(
            response_object(st->req, st->id, st->created, text, reason, st->prompt_tokens, st->completion_tokens)
                .dump(-1, ' ', false, ojson::error_handler_t::replace),
            kJson);
    }

    // One call of the SSE content provider: writes what has arrived (or a keep-alive comment after a second of
    // silence, which also finds out whether the client is still there). false: the client went away.
    bool stream_step(stream_state& st, httplib::DataSink& sink) {
        const std::string& cid = st.req.generate.client_request_id;
        const auto write = [&](const std::string& s) {
            if (sink.write(s.data(), s.size())) return true;
            // The client disconnected: stop generating for it.
            st.client->abort(cid);
            count("http_client_disconnects");
            ZMOE_LOG(info, "gateway: client disconnected; aborted " << st.id);
            return false;
        };
        if (st.done) return false;
        std::optional<client_event> ev = std::move(st.pending);
        st.pending.reset();
        if (!ev) ev = st.client->next(cid, std::chrono::milliseconds(1000));
        if (!ev) return write(": keep-alive\n\n");
        if (auto* e = std::get_if<client_error>(&*ev)) {
            // Mid-stream failure: an error event, then the end of the stream.
            const api_error err = frontend_error(*e);
            st.done = true;
            const bool ok = write("data: " + error_body(err) + "\n\n") && write("data: [DONE]\n\n");
            if (ok) sink.done();
            return ok;
        }
        const auto& d = std::get<client_delta>(*ev);
        st.prompt_tokens = d.prompt_tokens;
        st.completion_tokens = d.completion_tokens;
        if (!d.text.empty() || d.finished || st.first_chunk) {
            if (!write(
                    sse_event(chunk_object(st.req, st.id, st.created, d.text, st.first_chunk, d.finished, d.reason))))
                return false;
            st.first_chunk = false;
        }
        if (!d.finished) return true;
        st.done = true;
        if (st.req.include_usage &&
            !write(sse_event(usage_chunk(st.req, st.id, st.created, st.prompt_tokens, st.completion_tokens))))
            return false;
        if (!write("data: [DONE]\n\n")) return false;
        count("http_completed");
        sink.done();
        return true;
    }
};

http_gateway::http_gateway(gateway_options options) : impl_(std::make_unique<impl>()) {
    impl_->options = std::move(options);
    impl_->routes();
}

http_gateway::~http_gateway() { stop(); }

int http_gateway::bind() {
    if (impl_->options.port == 0) {
        impl_->bound_port = impl_->server.bind_to_any_port(impl_->options.host);
    } else if (impl_->server.bind_to_port(impl_->options.host, impl_->options.port)) {
        impl_->bound_port = impl_->options.port;
    } else {
        impl_->bound_port = -1;
    }
    if (impl_->bound_port <= 0)
        throw error(errc::io, "cannot listen on " + impl_->options.host + ":" + std::to_string(impl_->options.port));
    return impl_->bound_port;
}

void http_gateway::run() { impl_->server.listen_after_bind(); }

void http_gateway::stop() {
    if (impl_) impl_->server.stop();
}

}  // namespace zmoe::gateway
