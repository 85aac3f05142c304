#include "cli/http_bench.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "base/error.hpp"
#include "base/log.hpp"
#include "cli/bench_workload.hpp"
#include "cli/openai_stream.hpp"
#include "cli/sse_parser.hpp"
#include "frontend/tokenizer.hpp"

namespace zmoe::cli {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using clock_type = std::chrono::steady_clock;

http_url parse_http_url(const std::string& url) {
    const std::string scheme = "http://";
    if (url.rfind("https://", 0) == 0)
        throw error(errc::invalid_argument, "--base-url " + url + ": https is not supported (use http://)");
    if (url.rfind(scheme, 0) != 0)
        throw error(errc::invalid_argument, "--base-url " + url + ": must start with http://");
    std::string rest = url.substr(scheme.size());
    http_url out;
    const size_t slash = rest.find('/');
    if (slash != std::string::npos) {
        out.prefix = rest.substr(slash);
        rest.resize(slash);
        while (!out.prefix.empty() && out.prefix.back() == '/') out.prefix.pop_back();
    }
    std::string port;
    if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
        const size_t close = rest.find(']');
        if (close == std::string::npos) throw error(errc::invalid_argument, "--base-url " + url + ": unclosed '['");
        out.host = rest.substr(1, close - 1);
        const std::string after = rest.substr(close + 1);
        if (!after.empty()) {
            if (after[0] != ':') throw error(errc::invalid_argument, "--base-url " + url + ": bad host");
            port = after.substr(1);
        }
    } else {
        const size_t colon = rest.find(':');
        out.host = rest.substr(0, colon);
        if (colon != std::string::npos) port = rest.substr(colon + 1);
    }
    if (out.host.empty()) throw error(errc::invalid_argument, "--base-url " + url + ": no host");
    if (!port.empty()) {
        unsigned long v = 0;
        size_t used = 0;
        try {
            v = std::stoul(port, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != port.size() || v == 0 || v > 65535)
            throw error(errc::invalid_argument, "--base-url " + url + ": bad port '" + port + "'");
        out.port = static_cast<uint16_t>(v);
    }
    return out;
}

std::string openai_request_body(openai_endpoint_type type, const std::string& model, const bench_prompt& prompt,
                                const std::string& text, float temperature) {
    nlohmann::ordered_json j;
    if (!model.empty()) j["model"] = model;
    if (type == openai_endpoint_type::completions)
        j["prompt"] = prompt.token_ids;
    else
        j["messages"] = nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}});
    j["max_tokens"] = prompt.output_len;
    j["temperature"] = temperature;
    j["ignore_eos"] = true;
    j["stream"] = true;
    j["stream_options"] = {{"include_usage", true}};
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

double seconds_since(clock_type::time_point t0, clock_type::time_point t) {
    return std::chrono::duration<double>(t - t0).count();
}

/// What every request of a run shares: where to send, what, and the bookkeeping of requests in flight.
struct http_run {
    net::io_context ioc;
    tcp::resolver::results_type endpoints;
    std::string host_header;
    std::string target;  ///< the request path
    std::string authorization;
    bool keep_alive = true;
    std::chrono::steady_clock::duration timeout{};
    std::vector<bench_request_record>* records = nullptr;
    bench_workload* work = nullptr;  ///< guarded by mu
    /// Multi-turn: each answer's text is encoded with this to be carried into the next turn; null otherwise.
    const tokenizer* answer_tokenizer = nullptr;

    std::mutex pool_mu;
    std::vector<beast::tcp_stream> idle;  ///< kept-alive connections, free for the next request

    std::mutex mu;
    std::condition_variable cv;
    uint32_t in_flight = 0, done = 0, failed = 0;
    std::atomic<uint64_t> token_chunks{0};
    /// A request saw nothing for the whole timeout: the server stalled, and the requests not sent yet fail unsent
    /// (as on the ZeroMQ path) rather than each waiting out the timeout in turn.
    std::atomic<bool> stalled{false};

    explicit http_run(int threads) : ioc(threads) {}

    /// Request i ended (text: its answer). Multi-turn: the answer, encoded, goes into the conversation's next turn,
    /// or the conversation's later turns are given up when it failed.
    void finished(size_t i, bool success, const std::string& text) {
        std::vector<int32_t> answer;
        if (answer_tokenizer && success) answer = answer_tokenizer->encode(text);
        {
            std::lock_guard lock(mu);
            --in_flight;
            ++done;
            if (!success) ++failed;
            if (answer_tokenizer && success) (*records)[i].answer_len = static_cast<uint32_t>(answer.size());
            for (const size_t j : work->finish(i, success, answer)) {
                (*records)[j].error = "not sent: an earlier turn of its conversation failed";
                ++done;
                ++failed;
            }
        }
        cv.notify_all();
    }
    void recycle(beast::tcp_stream stream) {
        std::lock_guard lock(pool_mu);
        idle.push_back(std::move(stream));
    }
    /// A kept-alive connection (true) or a new unconnected one (false).
    std::pair<beast::tcp_stream, bool> take_stream() {
        {
            std::lock_guard lock(pool_mu);
            if (!idle.empty()) {
                beast::tcp_stream s = std::move(idle.back());
                idle.pop_back();
                return {std::move(s), true};
            }
        }
        return {beast::tcp_stream(net::make_strand(ioc)), false};
    }
};

/// One streamed request on one connection, from connect (or reuse) to the end of its SSE body. Its handlers run
/// on the connection's strand; it writes only its own record.
class http_stream_session : public std::enable_shared_from_this<http_stream_session> {
  public:
    http_stream_session(http_run& run, size_t index, std::string body, beast::tcp_stream stream, bool reused)
        : run_(run),
          index_(index),
          body_(std::move(body)),
          stream_(std::move(stream)),
          reused_(reused),
          rec_((*run.records)[index]),
          recorder_(rec_) {}

    void start() {
        net::dispatch(stream_.get_executor(),
                      beast::bind_front_handler(&http_stream_session::begin, shared_from_this()));
    }

  private:
    void begin() {
        sent_ = clock_type::now();
        req_.method(http::verb::post);
        req_.target(run_.target);
        req_.version(11);
        req_.set(http::field::host, run_.host_header);
        req_.set(http::field::user_agent, "zmoe-bench");
        req_.set(http::field::content_type, "application/json");
        req_.set(http::field::accept, "text/event-stream");
        if (!run_.authorization.empty()) req_.set(http::field::authorization, run_.authorization);
        req_.keep_alive(run_.keep_alive);
        req_.body() = std::move(body_);
        req_.prepare_payload();
        if (reused_)
            write();
        else
            connect();
    }

    void connect() {
        stream_.expires_after(run_.timeout);
        stream_.async_connect(run_.endpoints,
                              beast::bind_front_handler(&http_stream_session::on_connect, shared_from_this()));
    }

    void on_connect(beast::error_code ec, const tcp::endpoint&) {
        if (ec == beast::error::timeout) run_.stalled = true;
        if (ec) return end("connect: " + ec.message());
        beast::error_code ignored;
        stream_.socket().set_option(tcp::no_delay(true), ignored);
        write();
    }

    void write() {
        stream_.expires_after(run_.timeout);
        http::async_write(stream_, req_, beast::bind_front_handler(&http_stream_session::on_write, shared_from_this()));
    }

    void on_write(beast::error_code ec, size_t) {
        if (ec == beast::error::timeout) run_.stalled = true;
        if (ec) return retry_or_end("sending the request: " + ec.message());
        parser_.emplace();
        // No limit on a stream's length. Not boost::none: Boost 1.74's parser compares a Content-Length with an
        // empty limit as "over it".
        parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
        read_some();
    }

    void read_some() {
        auto& body = parser_->get().body();
        body.data = chunk_;
        body.size = sizeof(chunk_);
        stream_.expires_after(run_.timeout);
        http::async_read_some(stream_, buffer_, *parser_,
                              beast::bind_front_handler(&http_stream_session::on_read, shared_from_this()));
    }

    void on_read(beast::error_code ec, size_t) {
        const auto now = clock_type::now();
        if (ec == http::error::need_buffer) ec = {};
        const bool header = parser_->is_header_done();
        if (header && status_ == 0) status_ = parser_->get().result_int();
        const size_t got = sizeof(chunk_) - parser_->get().body().size;
        if (got > 0) consume(std::string_view(chunk_, got), now);
        if (ec == beast::error::timeout) {
            run_.stalled = true;
            return end("no data for " + std::to_string(seconds(run_.timeout)) + " s");
        }
        if (ec) {
            if (!header) return retry_or_end("reading the response: " + ec.message());
            return end("reading the response: " + ec.message());
        }
        if (parser_->is_done()) return end({});
        read_some();
    }

    void consume(std::string_view bytes, clock_type::time_point now) {
        if (status_ != 200) {  // an error answer: keep the start of its body for the record
            error_body_.append(
                bytes.substr(0, std::min(bytes.size(), kMaxErrorBody - std::min(kMaxErrorBody, error_body_.size()))));
            return;
        }
        events_.clear();
        sse_.feed(bytes, events_);
        const double t = seconds_since(sent_, now);
        for (const auto& ev : events_) {
            const uint32_t before = recorder_.token_chunks();
            recorder_.on_event(ev, t);
            run_.token_chunks.fetch_add(recorder_.token_chunks() - before, std::memory_order_relaxed);
        }
    }

    /// A kept-alive connection the server closed meanwhile fails before any answer: the request goes again on a
    /// new connection (once); anything else ends it.
    void retry_or_end(const std::string& why) {
        if (!reused_) return end(why);
        reused_ = false;
        beast::error_code ignored;
        stream_.socket().close(ignored);
        buffer_.clear();
        connect();
    }

    void end(const std::string& transport_error) {
        const double t = seconds_since(sent_, clock_type::now());
        if (status_ != 0 && status_ != 200) {
            rec_.latency_s = t;
            rec_.error = "HTTP " + std::to_string(status_) + ": " + error_body_;
            rec_.success = false;
        } else {
            std::string why = transport_error;
            if (why.empty() && sse_.pending()) why = "the stream ended in the middle of an event";
            recorder_.finish(t, why);
        }
        // A connection that answered in full and may stay open serves the next request.
        const bool reusable = transport_error.empty() && run_.keep_alive && parser_ && parser_->is_done() &&
                              parser_->get().keep_alive() && buffer_.size() == 0;
        if (reusable) {
            run_.recycle(std::move(stream_));
        } else {
            beast::error_code ignored;
            stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
            stream_.socket().close(ignored);
        }
        run_.finished(index_, rec_.success, recorder_.text());
    }

    static long seconds(std::chrono::steady_clock::duration d) {
        return static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(d).count());
    }

    static constexpr size_t kMaxErrorBody = 2000;
    http_run& run_;
    size_t index_;
    std::string body_;
    beast::tcp_stream stream_;
    bool reused_;
    bench_request_record& rec_;
    openai_stream_recorder recorder_;
    clock_type::time_point sent_{};
    http::request<http::string_body> req_;
    std::optional<http::response_parser<http::buffer_body>> parser_;
    beast::flat_buffer buffer_;
    char chunk_[16384];
    sse_parser sse_;
    std::vector<sse_event> events_;
    unsigned status_ = 0;
    std::string error_body_;
};

/// One synchronous GET (bounded by timeout): the status (0 when no answer came) and the body; `why` says what
/// went wrong when the status is 0.
struct get_result {
    unsigned status = 0;
    std::string body;
    std::string why;
};

get_result http_get(const tcp::resolver::results_type& endpoints, const std::string& host_header,
                    const std::string& target, const std::string& authorization, std::chrono::milliseconds timeout) {
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    beast::flat_buffer buffer;
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, host_header);
    req.set(http::field::user_agent, "zmoe-bench");
    if (!authorization.empty()) req.set(http::field::authorization, authorization);
    req.keep_alive(false);
    http::response<http::string_body> res;
    get_result out;
    stream.expires_after(timeout);
    stream.async_connect(endpoints, [&](beast::error_code ec, const tcp::endpoint&) {
        if (ec) {
            out.why = "connect: " + ec.message();
            return;
        }
        http::async_write(stream, req, [&](beast::error_code ec2, size_t) {
            if (ec2) {
                out.why = "send: " + ec2.message();
                return;
            }
            http::async_read(stream, buffer, res, [&](beast::error_code ec3, size_t) {
                if (ec3) {
                    out.why = "read: " + ec3.message();
                    return;
                }
                out.status = res.result_int();
                out.body = res.body();
            });
        });
    });
    ioc.run();
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    return out;
}

void raise_open_files_limit() {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
    const rlim_t was = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0)
        ZMOE_LOG(warn, "bench: cannot raise the open-file limit from " << was << " (" << std::strerror(errno) << ")");
}

/// Text of about prompt.token_ids.size() tokens for a chat message: the ids (those without a token or marked
/// special left out) decoded, re-encoded and cut or topped up with more random ids until the text encodes to the
/// asked length (at most a few rounds: decode and encode need not be inverses). Returns the text and sets
/// `tokens` to its encoded length.
std::string chat_text(const tokenizer& tok, const bench_prompt& prompt, std::mt19937_64& rng, uint32_t& tokens) {
    const size_t want = prompt.token_ids.size();
    std::uniform_int_distribution<int32_t> id(0, tok.vocab_size() - 1);
    auto usable = [&](int32_t t) { return tok.is_valid_id(t) && !tok.is_special(t); };
    std::vector<int32_t> ids;
    for (int32_t t : prompt.token_ids)
        if (usable(t)) ids.push_back(t);
    std::string text;
    std::vector<int32_t> enc;
    for (int round = 0; round < 16; ++round) {
        while (ids.size() < want) {
            const int32_t t = id(rng);
            if (usable(t)) ids.push_back(t);
        }
        text = tok.decode(ids);
        enc = tok.encode(text);
        if (enc.size() == want) break;
        if (enc.size() > want) enc.resize(want);
        ids = enc;
    }
    tokens = static_cast<uint32_t>(tok.encode(text).size());
    return text;
}

}  // namespace

serve_bench_run run_http_bench(const serve_bench_params& p, const http_bench_target& target, double ready_timeout_s) {
    raise_open_files_limit();
    const http_url url = parse_http_url(target.base_url);
    const unsigned threads =
        target.num_threads ? target.num_threads : std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u);
    http_run run(static_cast<int>(threads));
    {
        tcp::resolver resolver(run.ioc);
        beast::error_code ec;
        run.endpoints = resolver.resolve(url.host, std::to_string(url.port), ec);
        if (ec) throw error(errc::invalid_argument, "--base-url: cannot resolve " + url.host + ": " + ec.message());
    }
    const bool default_port = url.port == 80;
    const bool v6 = url.host.find(':') != std::string::npos;
    run.host_header = (v6 ? "[" + url.host + "]" : url.host) + (default_port ? "" : ":" + std::to_string(url.port));
    run.target =
        url.prefix + (target.endpoint_type == openai_endpoint_type::chat ? "/v1/chat/completions" : "/v1/completions");
    if (!target.api_key.empty()) run.authorization = "Bearer " + target.api_key;
    run.keep_alive = target.keep_alive;
    run.timeout =
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(p.timeout_s));

    // Ready: GET /health answers 2xx (404: the server has no such route, so go on).
    {
        const auto deadline = clock_type::now() + std::chrono::duration<double>(ready_timeout_s);
        for (;;) {
            const auto r = http_get(run.endpoints, run.host_header, url.prefix + "/health", run.authorization,
                                    std::chrono::seconds(5));
            if ((r.status >= 200 && r.status < 300) || r.status == 404) break;
            if (clock_type::now() >= deadline)
                throw error(errc::peer_dead, "bench: the server at " + target.base_url + " is not ready: " +
                                                 (r.status ? "GET /health answered " + std::to_string(r.status) + " " +
                                                                 r.body.substr(0, 200)
                                                           : r.why));
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    std::string model = target.model_name;
    if (model.empty()) {
        const auto r = http_get(run.endpoints, run.host_header, url.prefix + "/v1/models", run.authorization,
                                std::chrono::seconds(10));
        const auto j = nlohmann::json::parse(r.body, nullptr, false);
        if (r.status == 200 && j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
            j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
            model = j["data"][0]["id"].get<std::string>();
        } else {
            throw error(errc::invalid_argument, "bench: GET /v1/models of " + target.base_url + " names no model (" +
                                                    std::to_string(r.status) + " " +
                                                    (r.status ? r.body.substr(0, 200) : r.why) +
                                                    "): give the model's name with --served-model-name");
        }
    }

    serve_bench_run out;
    out.served_model = model;
    bench_workload work(p);
    const size_t n = work.size();
    out.records.resize(n);
    for (size_t i = 0; i < n; ++i) {
        out.records[i].conversation = work.conversation(i);
        out.records[i].turn = work.turn(i);
        out.records[i].output_len = work.prompt(i).output_len;
    }
    run.records = &out.records;
    run.work = &work;
    std::optional<tokenizer> tok;
    const bool multi_turn = p.dataset == bench_dataset::multi_turn;
    if (target.endpoint_type == openai_endpoint_type::chat || multi_turn) {
        if (target.tokenizer.empty())
            throw error(errc::invalid_argument,
                        multi_turn ? "--dataset multi-turn over HTTP reads each answer as text: give --tokenizer PATH "
                                     "(or --model DIR with a tokenizer.json)"
                                   : "--endpoint-type chat sends text: give --tokenizer PATH (or --model DIR with a "
                                     "tokenizer.json)");
        tok.emplace(tokenizer::from_file(target.tokenizer));
    }
    if (multi_turn) run.answer_tokenizer = &*tok;
    std::mt19937_64 text_rng(p.seed ^ 0x5851f42d4c957f2dull);
    // The body of request i, built when it goes (a multi-turn turn's prompt holds the answer before it).
    auto body_of = [&](size_t i) {
        auto& rec = out.records[i];
        const bench_prompt& prompt = work.prompt(i);
        rec.input_len = static_cast<uint32_t>(prompt.token_ids.size());
        std::string text;
        if (target.endpoint_type == openai_endpoint_type::chat) text = chat_text(*tok, prompt, text_rng, rec.input_len);
        return openai_request_body(target.endpoint_type, model, prompt, text, p.temperature);
    };
    if (!target.metrics_endpoint.empty()) out.metrics_before = scrape_server_metrics(target.metrics_endpoint);
    // The prefix-cache counters of GET /metrics, for the datasets that repeat prefixes (a random run reads none).
    const std::string metrics_target = url.prefix + "/metrics";
    auto scrape_prometheus = [&] {
        if (p.dataset == bench_dataset::random) return std::string();
        const auto r =
            http_get(run.endpoints, run.host_header, metrics_target, run.authorization, std::chrono::seconds(10));
        return r.status == 200 ? r.body : std::string();
    };
    out.prometheus_before = scrape_prometheus();

    auto io_work = net::make_work_guard(run.ioc);
    std::vector<std::thread> io_threads;
    for (unsigned i = 0; i < threads; ++i) io_threads.emplace_back([&run] { run.ioc.run(); });

    const uint32_t cap = p.max_concurrency ? p.max_concurrency : static_cast<uint32_t>(n);
    bench_progress_bar bar(p.progress, static_cast<uint32_t>(n));
    std::optional<rank_load_sampler> sampler;
    if (!target.metrics_endpoint.empty()) sampler.emplace(target.metrics_endpoint, p.rank_sample_interval_s);
    const auto t0 = clock_type::now();
    auto progress = [&](std::unique_lock<std::mutex>&, bool force) {
        bar.update(run.done - run.failed, run.failed, run.in_flight, run.token_chunks.load(),
                   seconds_since(t0, clock_type::now()), force);
    };
    {
        std::unique_lock lock(run.mu);
        while (run.done < n) {
            if (run.stalled) {
                for (const size_t j : work.give_up_unsent()) {
                    out.records[j].error = "not sent: the server stalled";
                    ++run.done;
                    ++run.failed;
                }
            }
            // A free slot and a request whose time has come (as vLLM's semaphore: a request whose time has come
            // waits for a slot); a conversation's next turn goes as soon as the answer before it has ended.
            std::optional<size_t> next;
            if (run.in_flight < cap) next = work.pop_ready(seconds_since(t0, clock_type::now()));
            if (!next) {
                auto until = clock_type::now() + std::chrono::milliseconds(100);
                if (run.in_flight < cap && std::isfinite(work.next_arrival_s()))
                    until = std::min(until, t0 + std::chrono::duration_cast<clock_type::duration>(
                                                     std::chrono::duration<double>(work.next_arrival_s())));
                run.cv.wait_until(lock, until);
                progress(lock, false);
                continue;
            }
            ++run.in_flight;
            const size_t i = *next;
            out.records[i].sent_s = seconds_since(t0, clock_type::now());
            lock.unlock();
            std::string body = body_of(i);
            auto [stream, reused] = run.take_stream();
            std::make_shared<http_stream_session>(run, i, std::move(body), std::move(stream), reused)->start();
            lock.lock();
        }
        progress(lock, true);
    }
    out.duration_s = seconds_since(t0, clock_type::now());
    bar.finish();
    {
        std::lock_guard lock(run.pool_mu);
        for (auto& s : run.idle) {
            beast::error_code ignored;
            s.socket().shutdown(tcp::socket::shutdown_both, ignored);
            s.socket().close(ignored);
        }
        run.idle.clear();
    }
    io_work.reset();
    run.ioc.stop();
    for (auto& t : io_threads) t.join();
    if (sampler) out.rank_samples = sampler->stop();
    out.prometheus_after = scrape_prometheus();
    if (!target.metrics_endpoint.empty()) out.metrics_after = scrape_server_metrics(target.metrics_endpoint);
    return out;
}

}  // namespace zmoe::cli
