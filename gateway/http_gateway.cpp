#include "gateway/http_gateway.hpp"

#include <httplib.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <unordered_map>

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

// One choice of a request in flight (the delta index of one of its n sequences).
struct choice_state {
    std::string text{};
    std::vector<int32_t> token_ids{};  // with logprobs: every generated id
    std::vector<token_logprobs> logprobs{};
    bool first_chunk = true;
    bool finished = false;
    finish_reason reason = finish_reason::none;
    uint32_t completion_tokens = 0;
};

// One HTTP generate request in flight: its frontend connection, its one generate request (n sequences, the
// choices) and what has been answered so far.
struct stream_state {
    std::unique_ptr<zmoe_client> client;
    openai_request req;
    std::string cid;  // the generate request's client_request_id
    std::string id;
    int64_t created = 0;
    std::vector<choice_state> choices;
    std::optional<client_event> pending;  // the first event, read before the response status was chosen
    bool done = false;
    uint32_t prompt_tokens = 0;
    std::chrono::steady_clock::time_point last_event = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();

    choice_state* find(const client_delta& d) {
        return d.client_request_id == cid && d.index < choices.size() ? &choices[d.index] : nullptr;
    }
    uint32_t completion_tokens() const {
        uint32_t n = 0;
        for (const choice_state& c : choices) n += c.completion_tokens;
        return n;
    }
    bool all_finished() const {
        for (const choice_state& c : choices)
            if (!c.finished) return false;
        return true;
    }
    void abort_all() {
        if (!all_finished()) client->abort(cid);  // ends every sequence of the request
    }
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
        server.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
        server.Post("/detokenize",
                    [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });
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

    void tokenize(const httplib::Request& http_req, httplib::Response& res) {
        count("http_tokenize");
        client_tokenize t;
        try {
            t = parse_tokenize_request(http_req.body);
        } catch (const api_error& e) {
            count("http_bad_requests");
            return send_error(res, e);
        }
        zmoe_client client(options.frontend_endpoint);
        try {
            const client_tokens_reply r = client.tokenize(std::move(t), std::chrono::seconds(30));
            res.set_content(ojson{{"count", r.token_ids.size()},
                                  {"max_model_len", r.max_model_len},
                                  {"tokens", r.token_ids},
                                  {"token_strs", nullptr}}
                                .dump(),
                            kJson);
        } catch (const error& e) {
            send_error(res, error_from_errc(e.code(), e.what()));
        }
    }

    void detokenize(const httplib::Request& http_req, httplib::Response& res) {
        count("http_detokenize");
        std::vector<int32_t> ids;
        try {
            ids = parse_detokenize_request(http_req.body);
        } catch (const api_error& e) {
            count("http_bad_requests");
            return send_error(res, e);
        }
        zmoe_client client(options.frontend_endpoint);
        try {
            const client_tokens_reply r = client.detokenize(std::move(ids), std::chrono::seconds(30));
            res.set_content(ojson{{"prompt", r.text}}.dump(-1, ' ', false, ojson::error_handler_t::replace), kJson);
        } catch (const error& e) {
            send_error(res, error_from_errc(e.code(), e.what()));
        }
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
        // n choices: one generate request of n sequences, whose deltas name their choice's index.
        client_generate g = st->req.generate;
        g.client_request_id = st->cid = "http" + std::to_string(n);
        // Streamed from the frontend even when the answer is not: the first token (or a refusal) arrives early, and
        // while the rest is generated the gateway keeps checking that the client is still there.
        g.stream = true;
        st->choices.resize(g.n);
        st->client->generate(g);
        // The first event decides the status: a refusal is an HTTP error, anything else a 200.
        st->pending = st->client->next_any(options.request_timeout);
        if (!st->pending) {
            st->abort_all();
            return send_error(
                res,
                {.status = 503, .message = "no answer from the server", .type = "service_unavailable", .param = {}});
        }
        if (auto* e = std::get_if<client_error>(&*st->pending)) {
            count("http_refused");
            st->abort_all();
            return send_error(res, frontend_error(*e));
        }
        // Both kinds of answer are written by a content provider: while it waits it writes (a keep-alive comment,
        // or JSON whitespace for a non-streamed answer) every second, and a failed write means the client went
        // away: its requests are aborted.
        if (st->req.stream) {
            res.set_header("Cache-Control", "no-cache");
            res.set_chunked_content_provider(
                "text/event-stream", [this, st](size_t, httplib::DataSink& sink) { return stream_step(*st, sink); });
        } else {
            res.set_chunked_content_provider(
                kJson, [this, st](size_t, httplib::DataSink& sink) { return complete_step(*st, sink); });
        }
    }

    // Writes to the client; false (and the request's choices aborted) when it has gone away.
    bool write(stream_state& st, httplib::DataSink& sink, const std::string& s) {
        st.last_write = std::chrono::steady_clock::now();
        if (sink.write(s.data(), s.size())) return true;
        st.abort_all();
        st.done = true;
        count("http_client_disconnects");
        ZMOE_LOG(info, "gateway: client disconnected; aborted " << st.id);
        return false;
    }

    // The next event of any of the request's choices, waiting at most a second; nullopt when none came.
    std::optional<client_event> next_event(stream_state& st) {
        std::optional<client_event> ev = std::move(st.pending);
        st.pending.reset();
        if (!ev) ev = st.client->next_any(std::chrono::milliseconds(1000));
        if (ev) st.last_event = std::chrono::steady_clock::now();
        return ev;
    }

    // The frontend said nothing for request_timeout: give up on it.
    bool timed_out(const stream_state& st) const {
        return std::chrono::steady_clock::now() - st.last_event > options.request_timeout;
    }

    // Records a delta into its choice; returns it (null for a stray id).
    choice_state* apply(stream_state& st, const client_delta& d) {
        choice_state* c = st.find(d);
        if (!c) return nullptr;
        c->text += d.text;
        if (st.req.logprobs) {
            c->token_ids.insert(c->token_ids.end(), d.token_ids.begin(), d.token_ids.end());
            c->logprobs.insert(c->logprobs.end(), d.logprobs.begin(), d.logprobs.end());
        }
        st.prompt_tokens = d.prompt_tokens;
        c->completion_tokens = d.completion_tokens;
        if (d.finished) {
            c->finished = true;
            c->reason = d.reason;
        }
        return c;
    }

    // The text of every id that logprobs name (the generated ids and their alternatives), from the frontend.
    std::function<std::string(int32_t)> pieces_for(stream_state& st, const std::vector<int32_t>& ids,
                                                   const std::vector<token_logprobs>& lps) {
        std::vector<int32_t> all = ids;
        for (const token_logprobs& l : lps) all.insert(all.end(), l.top_ids.begin(), l.top_ids.end());
        auto table = std::make_shared<std::unordered_map<int32_t, std::string>>();
        if (!all.empty()) {
            try {
                const client_tokens_reply r = st.client->detokenize(all, std::chrono::seconds(30));
                for (size_t i = 0; i < all.size() && i < r.pieces.size(); ++i) (*table)[all[i]] = r.pieces[i];
            } catch (const error& e) {
                ZMOE_LOG(warn, "gateway: no token texts for logprobs: " << e.what());
            }
        }
        return [table](int32_t id) {
            auto it = table->find(id);
            return it == table->end() ? std::string() : it->second;
        };
    }

    ojson logprobs_of(stream_state& st, const std::vector<int32_t>& ids, const std::vector<token_logprobs>& lps,
                      size_t text_offset) {
        if (!st.req.logprobs) return nullptr;
        return logprobs_json(st.req.kind, ids, lps, pieces_for(st, ids, lps), text_offset);
    }

    // One call of the non-streamed answer's content provider.
    bool complete_step(stream_state& st, httplib::DataSink& sink) {
        if (st.done) return false;
        std::optional<client_event> ev = next_event(st);
        if (!ev) {
            if (timed_out(st)) {
                st.abort_all();
                st.done = true;
                const bool ok = write(st, sink,
                                      error_body({.status = 503,
                                                  .message = "no answer from the server",
                                                  .type = "service_unavailable",
                                                  .param = {}}));
                if (ok) sink.done();
                return ok;
            }
            return write(st, sink, " ");  // JSON whitespace: finds out whether the client is still there
        }
        if (auto* e = std::get_if<client_error>(&*ev)) {
            // After the 200 went out: the body is the error object.
            st.abort_all();
            st.done = true;
            const bool ok = write(st, sink, error_body(frontend_error(*e)));
            if (ok) sink.done();
            return ok;
        }
        apply(st, std::get<client_delta>(*ev));
        if (!st.all_finished()) {
            // Tokens are arriving: still find out once a second whether the client is there.
            if (std::chrono::steady_clock::now() - st.last_write >= std::chrono::seconds(1))
                return write(st, sink, " ");
            return true;
        }
        std::vector<choice_output> out;
        for (uint32_t i = 0; i < st.choices.size(); ++i) {
            const choice_state& c = st.choices[i];
            out.push_back({.index = i,
                           .text = c.text,
                           .reason = c.reason,
                           .logprobs = logprobs_of(st, c.token_ids, c.logprobs, 0)});
        }
        st.done = true;
        count("http_completed");
        const bool ok = write(st, sink,
                              response_object(st.req, st.id, st.created, out, st.prompt_tokens, st.completion_tokens())
                                  .dump(-1, ' ', false, ojson::error_handler_t::replace));
        if (ok) sink.done();
        return ok;
    }

    // One call of the SSE content provider: writes what has arrived (or a keep-alive comment after a second of
    // silence, which also finds out whether the client is still there). false: the client went away.
    bool stream_step(stream_state& st, httplib::DataSink& sink) {
        if (st.done) return false;
        std::optional<client_event> ev = next_event(st);
        if (!ev && timed_out(st)) {
            st.abort_all();
            ev = client_error{st.cid, errc::peer_dead, "no answer from the server"};
        }
        if (!ev) return write(st, sink, ": keep-alive\n\n");
        if (auto* e = std::get_if<client_error>(&*ev)) {
            // Mid-stream failure: an error event, then the end of the stream.
            st.abort_all();
            st.done = true;
            const bool ok = write(st, sink, "data: " + error_body(frontend_error(*e)) + "\n\n") &&
                            write(st, sink, "data: [DONE]\n\n");
            if (ok) sink.done();
            return ok;
        }
        const auto& d = std::get<client_delta>(*ev);
        const size_t offset_before = st.find(d) ? st.find(d)->text.size() : 0;
        choice_state* c = apply(st, d);
        if (!c) return true;
        if (!d.text.empty() || d.finished || c->first_chunk || (st.req.logprobs && !d.token_ids.empty())) {
            const choice_output out{.index = static_cast<uint32_t>(c - st.choices.data()),
                                    .text = d.text,
                                    .reason = d.reason,
                                    .logprobs = logprobs_of(st, d.token_ids, d.logprobs, offset_before)};
            if (!write(st, sink, sse_event(chunk_object(st.req, st.id, st.created, out, c->first_chunk, d.finished))))
                return false;
            c->first_chunk = false;
        }
        if (!st.all_finished()) return true;
        st.done = true;
        if (st.req.include_usage &&
            !write(st, sink,
                   sse_event(usage_chunk(st.req, st.id, st.created, st.prompt_tokens, st.completion_tokens()))))
            return false;
        if (!write(st, sink, "data: [DONE]\n\n")) return false;
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
