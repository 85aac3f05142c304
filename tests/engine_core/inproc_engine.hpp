#pragma once
// The in-process actor test harness: an engine core and its workers (the real actors) in this process, talking over
// inproc:// endpoints, driven by a stand-in frontend. It tests the engine core's step loop, the handshake and how
// the engine flags reach each actor without spawning processes. tests/frontend/inproc_server.hpp puts the real
// frontend in front of the same engine core and workers.

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/actor.hpp"
#include "base/overloaded.hpp"
#include "engine_core/engine_core_actor.hpp"
#include "messages/engine_protocol.hpp"
#include "workers/worker_actor.hpp"

namespace zmoe::test {

/// Polls pred until it holds or timeout passes; returns its last value.
template <typename Pred>
bool wait_until(Pred pred, std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
        if (std::chrono::steady_clock::now() >= deadline) return pred();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
}

/// Stands in for the frontend: a DEALER speaking the engine protocol that records everything the engine core sends.
class engine_client : public actor {
  public:
    struct request_state {
        std::vector<int32_t> tokens;
        bool finished = false;
        finish_reason reason = finish_reason::none;
        errc code = errc::ok;
        std::string message;
        int num_outputs = 0;             ///< outputs messages that carried this request
        uint32_t num_cached_tokens = 0;  ///< prompt tokens the prefix cache served
    };

    explicit engine_client(std::string endpoint, std::chrono::milliseconds heartbeat)
        : actor("test_frontend", actor_options{.heartbeat_interval = heartbeat, .stop_on_signal = false}),
          endpoint_(std::move(endpoint)) {}
    ~engine_client() override {
        request_stop();
        join();
    }

    void add_request(engine_add_request r) {
        post([this, bytes = encode(r)] { send(sock_, bytes); });
    }
    void send_message(std::string bytes) {
        post([this, b = std::move(bytes)] { send(sock_, b); });
    }
    std::optional<engine_welcome> welcome() const {
        std::lock_guard<std::mutex> lock(mu_);
        return welcome_;
    }
    std::optional<request_state> request(uint64_t id) const {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = requests_.find(id);
        if (it == requests_.end()) return std::nullopt;
        return it->second;
    }
    std::vector<engine_outputs> outputs() const {
        std::lock_guard<std::mutex> lock(mu_);
        return outputs_;
    }
    std::vector<engine_error> errors() const {
        std::lock_guard<std::mutex> lock(mu_);
        return errors_;
    }
    /// Asks the engine core for its metrics and waits for the answer.
    nlohmann::json metrics(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
        const std::string tag = "m" + std::to_string(++next_tag_);
        send_message(encode(engine_metrics{tag}));
        std::string json;
        wait_until(
            [&] {
                std::lock_guard<std::mutex> lock(mu_);
                auto it = metrics_.find(tag);
                if (it == metrics_.end()) return false;
                json = it->second;
                return true;
            },
            timeout);
        return json.empty() ? nlohmann::json() : nlohmann::json::parse(json);
    }

  protected:
    void on_start() override {
        sock_ = add_socket(socket_kind::dealer, [this](const inbound_message& m) { on_message(m); });
        connect(sock_, endpoint_);
        send(sock_, encode(engine_hello{.name = "test_frontend", .pid = 0, .auth = {}}));
    }

  private:
    void on_message(const inbound_message& m) {
        std::lock_guard<std::mutex> lock(mu_);
        visit_exhaustive(
            decode_engine_to_frontend(m.payload), [&](const engine_welcome& msg) { welcome_ = msg; },
            [&](engine_outputs&& msg) {
                for (const auto& o : msg.outputs) {
                    auto& r = requests_[o.request_id];
                    r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
                    r.finished = r.finished || o.finished;
                    if (o.finished) {
                        r.reason = o.reason;
                        r.code = o.error_code;
                        r.message = o.error_message;
                    }
                    ++r.num_outputs;
                    r.num_cached_tokens = o.num_cached_tokens;
                }
                outputs_.push_back(std::move(msg));
            },
            [&](const engine_metrics_reply& msg) { metrics_[msg.tag] = msg.json; },
            [&](const engine_error& msg) { errors_.push_back(msg); },
            [&](const engine_heartbeat&) { send(sock_, encode(engine_heartbeat{})); });
    }

    std::string endpoint_;
    socket_id sock_ = -1;
    mutable std::mutex mu_;
    std::optional<engine_welcome> welcome_;
    std::map<uint64_t, request_state> requests_;
    std::vector<engine_outputs> outputs_;
    std::vector<engine_error> errors_;
    std::map<std::string, std::string> metrics_;
    std::atomic<int> next_tag_{0};
};

/// An engine core and config.workers workers, each an actor thread of this process, on inproc endpoints of their
/// own. A frontend (the stand-in below, or the real one: tests/frontend/inproc_server.hpp) connects to
/// frontend_endpoint().
class inproc_backend {
  public:
    explicit inproc_backend(const engine_config& config) {
        static std::atomic<int> counter{0};
        base_ = "inproc://zmoe-harness-" + std::to_string(++counter);
        engine_core_options o;
        o.worker_endpoint = base_ + "-workers";
        o.frontend_endpoint = base_ + "-frontend";
        o.config = config;
        frontend_endpoint_ = o.frontend_endpoint;
        engine_ = std::make_unique<engine_core_actor>(o);
        engine_->start();
        for (int r = 0; r < config.workers; ++r) {
            worker_options w;
            w.engine_endpoint = o.worker_endpoint;
            w.rank = r;
            w.device = config.device;
            w.data_bind = base_ + "-data-" + std::to_string(r);
            w.heartbeat_interval = std::chrono::milliseconds(config.heartbeat_ms);
            workers_.push_back(std::make_unique<worker_actor>(w));
            workers_.back()->start();
        }
    }
    /// The engine core is stopped directly: it notices a vanished frontend only after heartbeats.
    ~inproc_backend() {
        engine_.reset();
        workers_.clear();
    }
    inproc_backend(const inproc_backend&) = delete;
    inproc_backend& operator=(const inproc_backend&) = delete;

    engine_core_actor& engine() { return *engine_; }
    worker_actor& worker(int rank) { return *workers_[rank]; }
    const std::string& frontend_endpoint() const { return frontend_endpoint_; }
    /// A fresh inproc endpoint name of this harness ("-clients", ...).
    std::string endpoint(const std::string& suffix) const { return base_ + suffix; }

  private:
    std::string base_;
    std::string frontend_endpoint_;
    std::unique_ptr<engine_core_actor> engine_;
    std::vector<std::unique_ptr<worker_actor>> workers_;
};

/// An engine core, config.workers workers and a stand-in frontend, each an actor thread of this process.
class inproc_engine : public inproc_backend {
  public:
    explicit inproc_engine(const engine_config& config) : inproc_backend(config) {
        client_ = std::make_unique<engine_client>(frontend_endpoint(), std::chrono::milliseconds(config.heartbeat_ms));
        client_->start();
    }
    ~inproc_engine() { client_.reset(); }

    engine_client& client() { return *client_; }

    /// Waits until every worker is ready and the engine core welcomed the frontend; the welcome.
    std::optional<engine_welcome> wait_serving(std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
        wait_until([&] { return client_->welcome().has_value() || engine().finished(); }, timeout);
        return client_->welcome();
    }

    /// Sends one greedy request and waits for it to finish; its outputs.
    engine_client::request_state run(uint64_t id, std::vector<int32_t> prompt, uint32_t max_tokens) {
        engine_add_request r;
        r.request_id = id;
        r.prompt_token_ids = std::move(prompt);
        r.max_tokens = max_tokens;
        r.ignore_eos = true;
        client_->add_request(std::move(r));
        wait_until([&] {
            auto s = client_->request(id);
            return (s && s->finished) || engine().finished();
        });
        return client_->request(id).value_or(engine_client::request_state{});
    }

  private:
    std::unique_ptr<engine_client> client_;
};

}  // namespace zmoe::test
