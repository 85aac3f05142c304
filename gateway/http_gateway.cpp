#include "gateway/http_gateway.hpp"

#include <sys/resource.h>
#include <sys/socket.h>

// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without including <utility>
// clang-format on
#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "actors/async_client.hpp"
#include "actors/run_secret.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "base/metrics.hpp"
#include "base/version.hpp"
#include "frontend/utf8.hpp"
#include "gateway/openai_api.hpp"
#include "gateway/serving_metrics.hpp"
#include "tool_calls/output_parser.hpp"

namespace zmoe::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* kJson = "application/json";
// Pipelined bytes read while a request is answered (to notice a close) are kept up to this much; beyond it the
// connection is no longer watched until the answer is written.
constexpr size_t kMaxPipelinedBytes = 64 << 10;

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

// A refusal from the frontend: "the engine is still starting" is a 503 (retry later), not a bad request.
api_error frontend_error(const client_error& e) {
    if (e.code == errc::unsupported && e.message.find("starting") != std::string::npos)
        return {.status = 503, .message = e.message, .type = "service_unavailable", .param = {}};
    return error_from_errc(e.code, e.message);
}

// X-Request-Id: 1 to 256 visible ASCII characters (it becomes part of the response id).
bool valid_request_id(std::string_view id) {
    if (id.empty() || id.size() > 256) return false;
    return std::all_of(id.begin(), id.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// Raises RLIMIT_NOFILE's soft limit to the hard limit; returns the soft limit now in force.
rlim_t raise_nofile_limit() {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1024;
    if (lim.rlim_cur < lim.rlim_max) {
        rlimit want = lim;
        want.rlim_cur = lim.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &want) == 0) lim = want;
    }
    return lim.rlim_cur;
}

// One choice of a request in flight (the delta index of one of its n sequences).
struct choice_state {
    std::string text{};                // everything generated (non-streamed answer; stream text offsets)
    std::vector<int32_t> token_ids{};  // with logprobs, non-streamed: every generated id
    std::vector<token_logprobs> logprobs{};
    bool first_chunk = true;
    bool finished = false;
    finish_reason reason = finish_reason::none;
    uint32_t completion_tokens = 0;
    // Streamed: what arrived and is not written yet, coalesced while the client reads (bounded by the output).
    bool has_pending = false;
    std::string pending_text{};
    std::vector<int32_t> pending_ids{};
    std::vector<token_logprobs> pending_logprobs{};
    size_t pending_offset = 0;  // text offset of the first pending token (logprobs)
    // The end of the last delta when it stops inside a UTF-8 character: held back until the character completes,
    // so that no chunk, parse event or text carries half a character (JSON would turn it into U+FFFD).
    std::string utf8_carry{};
    // Chat with tool-call or reasoning parsing: the parser, the whole parse (non-streamed) and the events not
    // written yet (streamed).
    std::unique_ptr<tool_calls::output_parser> parser{};
    tool_calls::parsed_output parsed{};
    std::vector<tool_calls::parse_event> pending_events{};
};

// OpenAI's look of a tool call id: "call_" and 24 random letters and digits.
std::string new_tool_call_id() {
    static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof kChars - 1)];
    return id;
}

// One generate request of a connection.
struct generation {
    openai_request req;
    std::string cid;  // the client_request_id at the frontend
    std::string id;   // the response id
    int64_t created = 0;
    std::vector<choice_state> choices;
    clock_type::time_point arrived;
    std::optional<clock_type::time_point> last_token;  // of any choice
    uint32_t prompt_tokens = 0;
    uint32_t cached_tokens = 0;                       // of the prompt, from the prefix cache (choice 0's count)
    bool headers_sent = false;                        // streamed: the 200 is out
    bool ended = false;                               // the frontend's part is over (terminal event, or aborted)
    bool answered = false;                            // the whole answer is queued for writing
    bool resolving = false;                           // waiting for token texts (logprobs)
    bool reasoning = false;                           // a reasoning parser splits the output
    std::unordered_map<int32_t, std::string> pieces;  // token id -> text, for logprobs

    uint32_t completion_tokens() const {
        uint32_t n = 0;
        for (const choice_state& c : choices) n += c.completion_tokens;
        return n;
    }
    bool all_finished() const {
        return std::all_of(choices.begin(), choices.end(), [](const choice_state& c) { return c.finished; });
    }
};

}  // namespace

class session;

struct http_gateway::impl {
    // Declared before the I/O objects: connections (whose destructors use these) may outlive the client and the
    // io_context's handlers, and are destroyed with them.
    gateway_options options;
    int bound_port = 0;
    size_t max_connections = 0;

    std::mutex metrics_mutex;
    metrics_registry metrics;  // the gateway's own counters (zmoe_*{actor="gateway"})
    serving_metrics serving;   // vllm:*

    std::atomic<uint64_t> next_id{0};
    std::atomic<int64_t> inflight{0};

    std::mutex conn_mutex;
    size_t num_connections = 0;
    std::unordered_map<std::string, size_t> per_address;

    asio::io_context ioc;
    tcp::acceptor acceptor{ioc};
    asio::steady_timer accept_pause{ioc};
    std::unique_ptr<async_client> client;
    std::vector<std::thread> threads;

    void count(const std::string& name, double v = 1.0) {
        std::lock_guard<std::mutex> lock(metrics_mutex);
        metrics.counter_add(name, v);
    }

    /// The output parsers of a chat request: the tool-call parser unless tool_choice is none (400 when the server
    /// has none), the reasoning parser unless chat_template_kwargs.enable_thinking is false. tool_choice required
    /// or named also constrains the request by the grammar of that parser's format.
    tool_calls::output_parser_options output_parsing(openai_request& req) const {
        tool_calls::output_parser_options o;
        o.make_id = new_tool_call_id;
        if (req.enable_thinking) o.reasoning = tool_calls::reasoning_format_from_name(options.reasoning_parser);
        if (req.tool_choice != tool_choice_mode::none) {
            o.tools = tool_calls::tool_call_format_from_name(options.tool_call_parser);
            if (!o.tools)
                throw api_error{.status = 400,
                                .message =
                                    "'tool_choice' other than \"none\" (\"auto\" is the default with 'tools') "
                                    "needs a tool-call parser: this server runs without one (start it with "
                                    "--tool-call-parser NAME)",
                                .type = "invalid_request_error",
                                .param = "tool_choice"};
            constrain_tool_choice(req, *o.tools, o.reasoning);
        }
        return o;
    }

    std::string model_name() const {
        if (!options.served_model_name.empty()) return options.served_model_name;
        const auto h = client->health();
        if (!h.health || h.health->model.empty()) return "zmoe";
        const std::string name = std::filesystem::path(h.health->model).filename().string();
        return name.empty() ? h.health->model : name;
    }

    /// nullopt when healthy, else why not (the 503's message).
    std::optional<std::string> unhealthy() const {
        const auto h = client->health();
        if (!h.alive) return "the frontend is not answering: " + h.why_not;
        if (!h.health) return std::string("no health reply from the frontend yet");
        if (clock_type::now() - h.health_at > options.heartbeat_interval * (options.heartbeat_max_missed + 1))
            return std::string("the frontend's health reply is stale");
        if (h.health->status != "ok")
            return "server " + h.health->status + (h.health->detail.empty() ? "" : ": " + h.health->detail);
        return std::nullopt;
    }

    bool admit(const std::string& address) {
        std::lock_guard<std::mutex> lock(conn_mutex);
        if (num_connections >= max_connections) return false;
        size_t& n = per_address[address];
        if (n >= options.max_connections_per_address) {
            if (n == 0) per_address.erase(address);
            return false;
        }
        ++n;
        ++num_connections;
        return true;
    }
    void release(const std::string& address) {
        std::lock_guard<std::mutex> lock(conn_mutex);
        --num_connections;
        auto it = per_address.find(address);
        if (it != per_address.end() && --it->second == 0) per_address.erase(it);
    }

    void accept();
    void on_accept(beast::error_code ec, tcp::socket sock);
};

// One HTTP connection. Every handler runs on the connection's strand (the socket's and the timer's executor), so
// the members need no lock; the frontend's events are posted there too.
class session : public std::enable_shared_from_this<session> {
  public:
    session(http_gateway::impl& gw, tcp::socket sock, std::string address)
        : gw_(gw), sock_(std::move(sock)), timer_(sock_.get_executor()), address_(std::move(address)) {}
    ~session() { gw_.release(address_); }

    void start() {
        beast::error_code ec;
        sock_.non_blocking(true, ec);  // the synchronous read of on_readable never waits
        read_request();
    }

  private:
    enum class phase : uint8_t { header, body, idle, busy, writing };

    http_gateway::impl& gw_;
    tcp::socket sock_;
    asio::steady_timer timer_;
    std::string address_;
    beast::flat_buffer buf_;
    std::optional<http::request_parser<http::string_body>> parser_;
    std::optional<http::response<http::string_body>> res_;
    phase phase_ = phase::header;
    bool first_request_ = true;
    bool keep_alive_ = true;
    bool http10_ = false;  // an HTTP/1.0 request: no chunked encoding, so a stream ends with the connection
    bool closed_ = false;
    std::string request_id_;  // X-Request-Id, echoed
    // Watching for a close while a request is answered.
    bool watching_ = false;
    bool resume_after_watch_ = false;
    // Streamed output: what is being written, and whether a write is in flight.
    std::string out_;
    bool writing_ = false;
    std::unique_ptr<generation> gen_;
    uint64_t gen_serial_ = 0;  // tells a request's late events from the next request's on the same connection

    // --- timers -------------------------------------------------------------------------------------------------

    // A bound on the current phase: when it passes, the connection is closed (its request aborted).
    void arm(std::chrono::milliseconds d) {
        timer_.expires_after(d);
        timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
            if (ec) return;  // re-armed or cancelled
            self->on_timeout();
        });
    }
    void disarm() { timer_.cancel(); }

    void on_timeout() {
        switch (phase_) {
            case phase::header:
                gw_.count("http_header_timeouts");
                break;
            case phase::body:
                gw_.count("http_body_timeouts");
                break;
            case phase::idle:
                gw_.count("http_keep_alive_closes");
                break;
            case phase::writing:
            case phase::busy:
                gw_.count("http_send_timeouts");
                if (gen_ && !gen_->ended) ZMOE_LOG(debug, "gateway: client read nothing; ending " << gen_->id);
                break;
        }
        close();
    }

    // --- reading ----------------------------------------------------------------------------------------------

    void read_request() {
        if (closed_) return;
        parser_.emplace();
        parser_->header_limit(static_cast<uint32_t>(gw_.options.max_header_bytes));
        parser_->body_limit(gw_.options.max_body_bytes);
        res_.reset();
        gen_.reset();
        request_id_.clear();
        phase_ = first_request_ ? phase::header : phase::idle;
        arm(first_request_ ? gw_.options.header_timeout : gw_.options.keep_alive_timeout);
        http::async_read_header(sock_, buf_, *parser_,
                                [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
    }

    void on_header(beast::error_code ec) {
        if (ec) return read_failed(ec);
        first_request_ = false;
        if (parser_->is_done()) return on_request();
        phase_ = phase::body;
        arm(gw_.options.body_timeout);
        const auto& h = parser_->get();
        if (beast::iequals(h[http::field::expect], "100-continue")) {
            // curl and others wait for this before a large body.
            auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
            asio::async_write(sock_, asio::buffer(*cont),
                              [self = shared_from_this(), cont](beast::error_code wec, size_t) {
                                  if (wec) return self->close();
                                  self->read_body();
                              });
            return;
        }
        read_body();
    }

    void read_body() {
        http::async_read(sock_, buf_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
            if (ec) return self->read_failed(ec);
            self->on_request();
        });
    }

    void read_failed(beast::error_code ec) {
        if (closed_) return;
        if (ec == http::error::header_limit) {
            gw_.count("http_header_too_large");
            return respond_error(
                {.status = 431, .message = "request header too large", .type = "invalid_request_error", .param = {}},
                true);
        }
        if (ec == http::error::body_limit) {
            gw_.count("http_body_too_large");
            return respond_error(
                {.status = 413,
                 .message = "request body larger than " + std::to_string(gw_.options.max_body_bytes) + " bytes",
                 .type = "invalid_request_error",
                 .param = {}},
                true);
        }
        if (ec.category() == http::make_error_code(http::error::end_of_stream).category() &&
            ec != http::error::end_of_stream && ec != http::error::partial_message) {
            gw_.count("http_malformed");
            return respond_error({.status = 400,
                                  .message = "malformed HTTP request: " + ec.message(),
                                  .type = "invalid_request_error",
                                  .param = {}},
                                 true);
        }
        close();  // the client closed, or a timeout closed the socket
    }

    // While a request is answered the connection is watched for readability: end of stream means the client went
    // away (its request is aborted); bytes are a pipelined request, kept for after the answer.
    void watch() {
        if (watching_ || closed_ || buf_.size() >= kMaxPipelinedBytes) return;
        watching_ = true;
        sock_.async_wait(tcp::socket::wait_read,
                         [self = shared_from_this()](beast::error_code ec) { self->on_readable(ec); });
    }

    void on_readable(beast::error_code ec) {
        watching_ = false;
        if (resume_after_watch_) {
            resume_after_watch_ = false;
            if (ec && ec != asio::error::operation_aborted) return close();
            return read_request();
        }
        if (closed_) return;
        if (ec) return client_gone();
        beast::error_code rec;
        const size_t avail = std::max<size_t>(sock_.available(rec), 1);
        const size_t n = sock_.read_some(buf_.prepare(std::min(avail, kMaxPipelinedBytes)), rec);
        if (rec == asio::error::would_block || rec == asio::error::try_again) return watch();  // spurious
        if (rec || n == 0) return client_gone();
        buf_.commit(n);
        watch();
    }

    // --- the request --------------------------------------------------------------------------------------------

    void on_request() {
        disarm();
        phase_ = phase::busy;
        const auto& req = parser_->get();
        keep_alive_ = req.keep_alive();
        http10_ = req.version() < 11;
        std::string_view target(req.target().data(), req.target().size());
        const std::string path(target.substr(0, target.find('?')));
        const http::verb method = req.method();
        const auto rid = req[beast::string_view("X-Request-Id")];
        if (!rid.empty()) {
            if (!valid_request_id({rid.data(), rid.size()}))
                return respond_error({.status = 400,
                                      .message = "X-Request-Id must be 1 to 256 visible ASCII characters",
                                      .type = "invalid_request_error",
                                      .param = {}});
            request_id_.assign(rid.data(), rid.size());
        }
        // The API key (zmoe serve --api-key): checked before any route but the probes, in constant time.
        if (!gw_.options.api_key.empty() && path != "/health" && path != "/ping") {
            const auto auth = req[http::field::authorization];
            if (!secrets_equal(std::string(auth.data(), auth.size()), "Bearer " + gw_.options.api_key))
                return respond_error({.status = 401,
                                      .message = "missing or wrong API key (send the header Authorization: Bearer KEY)",
                                      .type = "authentication_error",
                                      .param = {}});
        }
        const auto route = [&](std::initializer_list<http::verb> verbs) {
            return std::find(verbs.begin(), verbs.end(), method) != verbs.end();
        };
        bool known = true;
        if (path == "/health") {
            if (route({http::verb::get})) return health();
        } else if (path == "/ping") {
            if (route({http::verb::get, http::verb::post})) return health();
        } else if (path == "/version") {
            if (route({http::verb::get})) return respond(200, ojson{{"version", kVersion}}.dump());
        } else if (path == "/load") {
            if (route({http::verb::get}))
                return respond(200, ojson{{"server_load", std::max<int64_t>(gw_.inflight.load(), 0)}}.dump());
        } else if (path == "/v1/models") {
            if (route({http::verb::get})) return models();
        } else if (path == "/metrics") {
            if (route({http::verb::get})) return prometheus();
        } else if (path == "/v1/completions") {
            if (route({http::verb::post})) return generate(endpoint_kind::completion);
        } else if (path == "/v1/chat/completions") {
            if (route({http::verb::post})) return generate(endpoint_kind::chat);
        } else if (path == "/tokenize") {
            if (route({http::verb::post})) return tokenize();
        } else if (path == "/detokenize") {
            if (route({http::verb::post})) return detokenize();
        } else {
            known = false;
        }
        const std::string what = std::string(req.method_string()) + " " + path;
        if (known)
            return respond_error({.status = 405,
                                  .message = "method not allowed: " + what,
                                  .type = "invalid_request_error",
                                  .param = {}});
        respond_error({.status = 404, .message = "no route " + what, .type = "not_found_error", .param = {}});
    }

    void health() {
        if (const auto why = gw_.unhealthy())
            return respond_error({.status = 503, .message = *why, .type = "service_unavailable", .param = {}});
        respond(200, R"({"status":"ok"})");
    }

    void models() {
        const ojson model = {
            {"id", gw_.model_name()}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "zmoe"}};
        respond(200, ojson{{"object", "list"}, {"data", ojson::array({model})}}.dump());
    }

    // Posts f to this connection's strand, keeping the connection alive until it runs.
    template <class F>
    auto on_strand(F f) {
        return [self = shared_from_this(), f = std::move(f)](auto&&... args) mutable {
            asio::post(
                self->sock_.get_executor(),
                [self, f = std::move(f), ... a = std::forward<decltype(args)>(args)]() mutable { f(std::move(a)...); });
        };
    }

    void prometheus() {
        gw_.client->metrics(on_strand([this](std::optional<std::string> json) {
            nlohmann::json actors = nlohmann::json::object();
            engine_gauges engine;
            if (json) {
                try {
                    const auto all = nlohmann::json::parse(*json);
                    for (const auto& [k, v] : all.items())
                        if (v.is_object() && v.contains("counters")) actors[k] = v;
                    engine = engine_gauges_of(all);
                } catch (const std::exception&) {
                    gw_.count("metrics_scrape_failures");
                }
            } else {
                gw_.count("metrics_scrape_failures");
            }
            if (engine.num_running < 0) {
                // Without the engine's metrics: the frontend's counts from its last health reply.
                const auto h = gw_.client->health();
                if (h.health) {
                    engine.num_running = h.health->num_running;
                    engine.num_waiting = h.health->num_waiting;
                }
            }
            {
                std::lock_guard<std::mutex> lock(gw_.metrics_mutex);
                gw_.metrics.gauge_set("http_connections", static_cast<double>(connections()));
                gw_.metrics.gauge_set("http_requests_inflight", static_cast<double>(gw_.inflight.load()));
                actors["gateway"] = gw_.metrics.to_json();
            }
            respond(200, gw_.serving.prometheus(gw_.model_name(), engine) + metrics_to_prometheus(actors),
                    "text/plain; version=0.0.4");
        }));
    }

    size_t connections() const {
        std::lock_guard<std::mutex> lock(gw_.conn_mutex);
        return gw_.num_connections;
    }

    static engine_gauges engine_gauges_of(const nlohmann::json& all) {
        engine_gauges g;
        const auto it = all.find("engine_core");
        if (it == all.end() || !it->is_object() || !it->contains("gauges")) return g;
        const auto& gauges = (*it)["gauges"];
        const auto get = [&](const char* name) {
            const auto v = gauges.find(name);
            return v != gauges.end() && v->is_number() ? v->get<double>() : -1.0;
        };
        g.num_running = get("requests_running");
        g.num_waiting = get("requests_waiting");
        // The sum over ranks of blocks used and in the pool (the unlabelled series are the totals, when the engine
        // writes them; else add up the per-rank ones).
        double used = 0, total = 0;
        for (const auto& [name, v] : gauges.items()) {
            if (!v.is_number()) continue;
            if (name.rfind("kv_blocks_used{", 0) == 0) used += v.get<double>();
            if (name.rfind("kv_blocks_total{", 0) == 0) total += v.get<double>();
        }
        if (total <= 0 && get("kv_blocks_total") > 0) {
            used = get("kv_blocks_used");
            total = get("kv_blocks_total");
        }
        if (total > 0) g.kv_cache_usage = std::clamp(used / total, 0.0, 1.0);
        if (it->contains("counters") && (*it)["counters"].is_object()) {
            const auto& counters = (*it)["counters"];
            const auto q = counters.find("prefix_cache_queries");
            const auto h = counters.find("prefix_cache_hits");
            if (q != counters.end() && h != counters.end() && q->is_number() && h->is_number()) {
                g.prefix_cache_queries = q->get<double>();
                g.prefix_cache_hits = h->get<double>();
            }
        }
        const auto hs = it->find("histograms");
        if (hs != it->end() && hs->is_object()) {
            const auto q = hs->find("request_queue_time_ms");
            if (q != hs->end() && q->is_object()) {
                g.queue_time_count = q->value("count", uint64_t{0});
                g.queue_time_sum_ms = q->value("sum", 0.0);
                for (const auto& b : q->value("buckets", nlohmann::json::array()))
                    if (b.is_array() && b.size() == 2 && b[0].is_number() && b[1].is_number_unsigned())
                        g.queue_time_buckets_ms.emplace_back(b[0].get<double>(), b[1].get<uint64_t>());
            }
        }
        return g;
    }

    void tokenize() {
        gw_.count("http_tokenize");
        client_tokenize t;
        try {
            t = parse_tokenize_request(parser_->get().body());
        } catch (const api_error& e) {
            gw_.count("http_bad_requests");
            return respond_error(e);
        }
        gw_.client->tokenize(std::move(t), on_strand([this](client_tokens_reply r) {
                                 if (r.code != errc::ok) return respond_error(error_from_errc(r.code, r.message));
                                 respond(200, ojson{{"count", r.token_ids.size()},
                                                    {"max_model_len", r.max_model_len},
                                                    {"tokens", r.token_ids},
                                                    {"token_strs", nullptr}}
                                                  .dump());
                             }));
    }

    void detokenize() {
        gw_.count("http_detokenize");
        std::vector<int32_t> ids;
        try {
            ids = parse_detokenize_request(parser_->get().body());
        } catch (const api_error& e) {
            gw_.count("http_bad_requests");
            return respond_error(e);
        }
        gw_.client->detokenize(
            std::move(ids), on_strand([this](client_tokens_reply r) {
                if (r.code != errc::ok) return respond_error(error_from_errc(r.code, r.message));
                respond(200, ojson{{"prompt", r.text}}.dump(-1, ' ', false, ojson::error_handler_t::replace));
            }));
    }

    // --- generate -----------------------------------------------------------------------------------------------

    void generate(endpoint_kind kind) {
        gw_.count(kind == endpoint_kind::chat ? "http_chat_completions" : "http_completions");
        auto g = std::make_unique<generation>();
        g->arrived = clock_type::now();
        try {
            g->req = parse_openai_request(parser_->get().body(), kind);
        } catch (const api_error& e) {
            gw_.count("http_bad_requests");
            return respond_error(e);
        }
        if (gw_.inflight.load() >= static_cast<int64_t>(gw_.options.max_inflight)) {
            gw_.count("http_refused_inflight_cap");
            return respond_error({.status = 429,
                                  .message = "too many requests in flight (" +
                                             std::to_string(gw_.options.max_inflight) + "): retry later",
                                  .type = "rate_limit_error",
                                  .param = {}});
        }
        if (g->req.model.empty()) g->req.model = gw_.model_name();
        tool_calls::output_parser_options parsing;
        if (kind == endpoint_kind::chat) {
            try {
                parsing = gw_.output_parsing(g->req);
            } catch (const api_error& e) {
                gw_.count("http_bad_requests");
                return respond_error(e);
            }
        }
        const uint64_t n = gw_.next_id++;
        const char* prefix = kind == endpoint_kind::chat ? "chatcmpl-" : "cmpl-";
        g->id = prefix + (request_id_.empty() ? std::to_string(unix_now()) + "-" + std::to_string(n) : request_id_);
        g->created = unix_now();
        // Streamed from the frontend even when the answer is not: the first token (or a refusal) arrives early.
        client_generate cg = g->req.generate;
        cg.stream = true;
        g->choices.resize(std::max<uint32_t>(cg.n, 1));
        g->reasoning = parsing.reasoning.has_value();
        if (parsing.tools || parsing.reasoning)
            for (choice_state& c : g->choices) c.parser = std::make_unique<tool_calls::output_parser>(parsing);
        gen_ = std::move(g);
        ++gw_.inflight;
        const uint64_t serial = ++gen_serial_;
        gen_->cid = gw_.client->generate(std::move(cg), on_strand([this, serial](async_client::event ev) {
                                             if (serial == gen_serial_) on_event(std::move(ev));
                                         }));
        watch();
    }

    // The frontend's part of the request is over: by a terminal event (completed true) or aborted.
    void end_generation(bool completed) {
        if (!gen_ || gen_->ended) return;
        gen_->ended = true;
        --gw_.inflight;
        if (completed)
            gw_.serving.observe_finished(seconds_between(gen_->arrived, clock_type::now()), gen_->prompt_tokens,
                                         gen_->completion_tokens());
    }

    void on_event(async_client::event ev) {
        if (!gen_ || gen_->ended || closed_) return;  // a late event of a request already given up
        generation& g = *gen_;
        if (auto* e = std::get_if<client_error>(&ev)) {
            end_generation(false);
            if (e->code == errc::overloaded) gw_.count("http_refused_overloaded");
            const api_error err = frontend_error(*e);
            g.answered = true;  // nothing pending is written after this
            if (!g.req.stream || !g.headers_sent) {
                if (!g.headers_sent) gw_.count("http_refused");
                return respond_error(err);
            }
            // Mid-stream failure: an error event, then the end of the stream.
            out_ += chunk("data: " + error_body(err) + "\n\n" + "data: [DONE]\n\n") + (http10_ ? "" : "0\r\n\r\n");
            return flush();
        }
        const client_delta& d = std::get<client_delta>(ev);
        if (d.index >= g.choices.size()) return;
        choice_state& c = g.choices[d.index];
        const auto now = clock_type::now();
        const uint32_t new_tokens = static_cast<uint32_t>(d.token_ids.size());
        if (new_tokens > 0) {
            if (!g.last_token) {
                gw_.serving.observe_ttft(seconds_between(g.arrived, now));
                if (new_tokens > 1) gw_.serving.observe_inter_token(0.0, new_tokens - 1);
            } else {
                gw_.serving.observe_inter_token(seconds_between(*g.last_token, now), new_tokens);
            }
            g.last_token = now;
        }
        if (!c.has_pending) c.pending_offset = c.text.size() + c.utf8_carry.size();
        std::string text = std::move(c.utf8_carry);
        text += d.text;
        c.utf8_carry.clear();
        if (!d.finished) {
            const size_t tail = utf8::incomplete_tail(text);
            c.utf8_carry.assign(text, text.size() - tail, tail);
            text.resize(text.size() - tail);
        }
        c.text += text;
        c.has_pending = true;
        c.pending_text += text;
        if (c.parser) {
            std::vector<tool_calls::parse_event> events = c.parser->feed(text);
            if (d.finished)
                for (tool_calls::parse_event& e : c.parser->finish()) events.push_back(std::move(e));
            if (g.req.stream) {
                for (tool_calls::parse_event& e : events) {
                    auto& p = c.pending_events;
                    if (!p.empty() && e.kind != tool_calls::event_kind::call_start && p.back().kind == e.kind &&
                        p.back().call_index == e.call_index)
                        p.back().text += e.text;
                    else
                        p.push_back(std::move(e));
                }
            } else {
                tool_calls::add_events(c.parsed, events);
            }
        }
        if (g.req.logprobs) {
            if (g.req.stream) {
                c.pending_ids.insert(c.pending_ids.end(), d.token_ids.begin(), d.token_ids.end());
                c.pending_logprobs.insert(c.pending_logprobs.end(), d.logprobs.begin(), d.logprobs.end());
            } else {
                c.token_ids.insert(c.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
                c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
            }
        }
        g.prompt_tokens = d.prompt_tokens;
        if (d.index == 0) g.cached_tokens = d.cached_tokens;
        c.completion_tokens = d.completion_tokens;
        if (d.finished) {
            c.finished = true;
            c.reason = d.reason;
            gw_.serving.count_finished_choice(d.reason);
        }
        const bool done = g.all_finished();
        if (done) {
            end_generation(true);
            gw_.count("http_completed");
        }
        if (g.req.stream) return flush();
        if (done) answer_whole();
    }

    // The non-streamed answer, once every choice has finished (token texts fetched first for logprobs).
    void answer_whole() {
        generation& g = *gen_;
        if (g.answered) return;
        if (g.req.logprobs && !resolve_pieces(g.choices, false)) return;
        std::vector<choice_output> out;
        for (uint32_t i = 0; i < g.choices.size(); ++i) {
            const choice_state& c = g.choices[i];
            out.push_back({.index = i,
                           .text = c.text,
                           .reason = c.reason,
                           .logprobs = logprobs_of(c.token_ids, c.logprobs, 0),
                           .parsed = c.parser ? parsed_message(c.parsed, g.reasoning) : ojson(),
                           .tool_called = !c.parsed.calls.empty()});
        }
        g.answered = true;
        respond(200,
                response_object(g.req, g.id, g.created, out, g.prompt_tokens, g.completion_tokens(), g.cached_tokens)
                    .dump(-1, ' ', false, ojson::error_handler_t::replace));
    }

    // True when the texts of every id the choices' logprobs name are known; otherwise asks the frontend for them
    // and returns false (the caller runs again when they come).
    bool resolve_pieces(const std::vector<choice_state>& choices, bool pending) {
        generation& g = *gen_;
        std::vector<int32_t> missing;
        std::unordered_set<int32_t> seen;
        const auto need = [&](int32_t id) {
            if (!g.pieces.count(id) && seen.insert(id).second) missing.push_back(id);
        };
        for (const choice_state& c : choices) {
            for (int32_t id : pending ? c.pending_ids : c.token_ids) need(id);
            for (const token_logprobs& l : pending ? c.pending_logprobs : c.logprobs)
                for (int32_t id : l.top_ids) need(id);
        }
        if (missing.empty()) return true;
        g.resolving = true;
        gw_.client->detokenize(missing,
                               on_strand([this, missing, pending, serial = gen_serial_](client_tokens_reply r) {
                                   if (!gen_ || closed_ || serial != gen_serial_) return;
                                   gen_->resolving = false;
                                   if (r.code != errc::ok)
                                       ZMOE_LOG(warn, "gateway: no token texts for logprobs: " << r.message);
                                   // Unknown ones stay empty rather than being asked for again.
                                   for (size_t i = 0; i < missing.size(); ++i)
                                       gen_->pieces[missing[i]] = i < r.pieces.size() ? r.pieces[i] : std::string();
                                   if (pending)
                                       flush();
                                   else
                                       answer_whole();
                               }));
        return false;
    }

    ojson logprobs_of(const std::vector<int32_t>& ids, const std::vector<token_logprobs>& lps, size_t text_offset) {
        if (!gen_->req.logprobs) return nullptr;
        const auto& table = gen_->pieces;
        return logprobs_json(
            gen_->req.kind, ids, lps,
            [&table](int32_t id) {
                auto it = table.find(id);
                return it == table.end() ? std::string() : it->second;
            },
            text_offset);
    }

    std::string chunk(const std::string& data) const {
        if (http10_) return data;
        char size[20];
        std::snprintf(size, sizeof size, "%zx\r\n", data.size());
        return size + data + "\r\n";
    }

    // Streamed: writes what has accumulated, unless a write is in flight (its completion calls this again). Deltas
    // that arrive meanwhile coalesce per choice, so a slow reader costs at most its request's output.
    void flush() {
        if (writing_ || closed_ || !gen_ || res_) return;  // res_: a plain answer (an error) is being written
        generation& g = *gen_;
        if (!g.answered && !g.resolving) {
            if (g.req.logprobs && !resolve_pieces(g.choices, true)) return;
            std::string events;
            for (uint32_t i = 0; i < g.choices.size(); ++i) {
                choice_state& c = g.choices[i];
                if (!c.has_pending) continue;
                if (c.parser) {
                    std::vector<ojson> deltas = parsed_deltas(c.pending_events);
                    ojson lps = logprobs_of(c.pending_ids, c.pending_logprobs, c.pending_offset);
                    if (deltas.empty() && (c.finished || c.first_chunk || !lps.is_null()))
                        deltas.push_back(ojson::object());
                    for (size_t k = 0; k < deltas.size(); ++k) {
                        const choice_output out{.index = i,
                                                .text = {},
                                                .reason = c.reason,
                                                .logprobs = k == 0 ? lps : ojson(),
                                                .parsed = std::move(deltas[k]),
                                                .tool_called = c.parser->num_calls() > 0};
                        events += sse_event(chunk_object(g.req, g.id, g.created, out, c.first_chunk,
                                                         c.finished && k + 1 == deltas.size()));
                        c.first_chunk = false;
                    }
                    c.pending_events.clear();
                } else if (!c.pending_text.empty() || c.finished || c.first_chunk ||
                           (g.req.logprobs && !c.pending_ids.empty())) {
                    const choice_output out{
                        .index = i,
                        .text = c.pending_text,
                        .reason = c.reason,
                        .logprobs = logprobs_of(c.pending_ids, c.pending_logprobs, c.pending_offset)};
                    events += sse_event(chunk_object(g.req, g.id, g.created, out, c.first_chunk, c.finished));
                    c.first_chunk = false;
                }
                c.has_pending = false;
                c.pending_text.clear();
                c.pending_ids.clear();
                c.pending_logprobs.clear();
            }
            if (g.all_finished()) {
                if (g.req.include_usage)
                    events += sse_event(
                        usage_chunk(g.req, g.id, g.created, g.prompt_tokens, g.completion_tokens(), g.cached_tokens));
                events += "data: [DONE]\n\n";
                g.answered = true;
            }
            if (!g.headers_sent) {
                g.headers_sent = true;
                if (http10_) keep_alive_ = false;
                std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n";
                if (!http10_) head += "Transfer-Encoding: chunked\r\n";
                if (!keep_alive_) head += "Connection: close\r\n";
                if (!request_id_.empty()) head += "X-Request-Id: " + request_id_ + "\r\n";
                out_ = head + "\r\n" + out_;
            }
            if (!events.empty()) out_ += chunk(events);
            if (g.answered && !http10_) out_ += "0\r\n\r\n";
        }
        if (out_.empty()) return;
        writing_ = true;
        phase_ = phase::writing;
        arm(gw_.options.send_timeout);
        auto data = std::make_shared<std::string>(std::move(out_));
        out_.clear();
        asio::async_write(sock_, asio::buffer(*data), [self = shared_from_this(), data](beast::error_code ec, size_t) {
            self->on_stream_written(ec);
        });
    }

    void on_stream_written(beast::error_code ec) {
        writing_ = false;
        disarm();
        phase_ = phase::busy;
        if (ec) return client_gone();
        if (!out_.empty() || (gen_ && !gen_->answered &&
                              std::any_of(gen_->choices.begin(), gen_->choices.end(),
                                          [](const choice_state& c) { return c.has_pending; })))
            return flush();
        if (gen_ && gen_->answered) return exchange_done();
    }

    // --- writing plain responses ----------------------------------------------------------------------------------

    void respond_error(const api_error& e, bool close_after = false) {
        if (close_after) keep_alive_ = false;
        respond(e.status, error_body(e));
    }

    void respond(int status, std::string body, const char* content_type = kJson) {
        if (closed_) return;
        if (gen_ && !gen_->ended) {
            // An answer before the frontend's end (an error): the request is over at the frontend too.
            gw_.client->abort(gen_->cid);
            end_generation(false);
        }
        res_.emplace(static_cast<http::status>(status), 11);
        res_->set(http::field::server, "zmoe");
        res_->set(http::field::content_type, content_type);
        if (status == 429) res_->set(http::field::retry_after, std::to_string(gw_.options.retry_after_s));
        if (!request_id_.empty()) res_->set("X-Request-Id", request_id_);
        res_->body() = std::move(body);
        res_->keep_alive(keep_alive_);
        res_->prepare_payload();
        phase_ = phase::writing;
        arm(gw_.options.send_timeout);
        http::async_write(sock_, *res_, [self = shared_from_this()](beast::error_code ec, size_t) {
            self->disarm();
            if (ec) return self->close();
            self->exchange_done();
        });
    }

    // The answer is written: the next request, or the end of the connection.
    void exchange_done() {
        res_.reset();
        if (!keep_alive_) return shutdown();
        gen_.reset();
        if (watching_) {
            // The readiness wait must end before the next read starts: cancelled, its handler reads on.
            resume_after_watch_ = true;
            beast::error_code ec;
            sock_.cancel(ec);
            return;
        }
        read_request();
    }

    void client_gone() {
        if (gen_ && !gen_->ended) {
            gw_.count("http_client_disconnects");
            ZMOE_LOG(debug, "gateway: client disconnected; aborted " << gen_->id);
        }
        close();
    }

    void shutdown() {
        beast::error_code ec;
        sock_.shutdown(tcp::socket::shutdown_send, ec);
        close();
    }

    void close() {
        if (closed_) return;
        closed_ = true;
        if (gen_ && !gen_->ended) {
            gw_.client->abort(gen_->cid);
            end_generation(false);
        }
        beast::error_code ec;
        timer_.cancel();
        sock_.close(ec);
    }
};

void http_gateway::impl::accept() {
    acceptor.async_accept(asio::make_strand(ioc),
                          [this](beast::error_code ec, tcp::socket sock) { on_accept(ec, std::move(sock)); });
}

void http_gateway::impl::on_accept(beast::error_code ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
        // Out of descriptors (or another transient failure): pause rather than spin.
        count("http_accept_failures");
        ZMOE_LOG(warn, "gateway: accept failed: " << ec.message());
        accept_pause.expires_after(std::chrono::milliseconds(50));
        accept_pause.async_wait([this](beast::error_code) { accept(); });
        return;
    }
    beast::error_code aec;
    const auto remote = sock.remote_endpoint(aec);
    const std::string address = aec ? std::string("?") : remote.address().to_string();
    if (!admit(address)) {
        // Over a cap: a 503 written at once if the socket takes it (its buffer is empty), then closed; nothing kept.
        count("http_connections_refused");
        static const std::string body =
            R"({"error":{"message":"too many connections","type":"service_unavailable","param":null,"code":503}})";
        static const std::string reply =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
            std::to_string(body.size()) + "\r\n\r\n" + body;
        [[maybe_unused]] const ssize_t n =
            ::send(sock.native_handle(), reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        sock.shutdown(tcp::socket::shutdown_both, aec);
        sock.close(aec);
    } else {
        sock.set_option(tcp::no_delay(true), aec);
        std::make_shared<session>(*this, std::move(sock), address)->start();
    }
    accept();
}

http_gateway::http_gateway(gateway_options options) : impl_(std::make_unique<impl>()) {
    const rlim_t nofile = raise_nofile_limit();
    if (options.num_threads <= 0)
        options.num_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
    impl_->options = options;
    // A margin of descriptors for the frontend connection, logs and ZeroMQ's own.
    const size_t fd_cap = nofile > 128 ? static_cast<size_t>(nofile) - 64 : 64;
    impl_->max_connections = options.max_connections == 0 ? fd_cap : std::min(options.max_connections, fd_cap);
    impl_->client =
        std::make_unique<async_client>(async_client_options{.endpoint = options.frontend_endpoint,
                                                            .heartbeat_interval = options.heartbeat_interval,
                                                            .heartbeat_max_missed = options.heartbeat_max_missed,
                                                            .api_key = options.api_key,
                                                            .reply_timeout = std::chrono::seconds(30)});
}

http_gateway::~http_gateway() {
    stop();
    for (auto& t : impl_->threads)
        if (t.joinable()) t.join();
}

int http_gateway::bind() {
    auto& im = *impl_;
    beast::error_code ec;
    const auto address = asio::ip::make_address(im.options.host == "localhost" ? "127.0.0.1" : im.options.host, ec);
    if (ec) throw error(errc::io, "cannot listen on " + im.options.host + ": not an IP address");
    const tcp::endpoint ep(address, static_cast<uint16_t>(im.options.port));
    im.acceptor.open(ep.protocol(), ec);
    if (!ec) im.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) im.acceptor.bind(ep, ec);
    if (!ec) im.acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
        throw error(errc::io, "cannot listen on " + im.options.host + ":" + std::to_string(im.options.port) + ": " +
                                  ec.message());
    im.bound_port = im.acceptor.local_endpoint().port();
    return im.bound_port;
}

void http_gateway::run() {
    auto& im = *impl_;
    im.accept();
    for (int i = 1; i < im.options.num_threads; ++i) im.threads.emplace_back([&im] { im.ioc.run(); });
    im.ioc.run();
    for (auto& t : im.threads)
        if (t.joinable()) t.join();
    im.threads.clear();
}

void http_gateway::stop() {
    if (!impl_) return;
    asio::post(impl_->ioc, [im = impl_.get()] {
        beast::error_code ec;
        im->acceptor.close(ec);
    });
    impl_->ioc.stop();
}

}  // namespace zmoe::gateway
