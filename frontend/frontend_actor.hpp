#pragma once
// The frontend as an actor: the clients' ROUTER socket and the engine core's DEALER. It validates and tokenizes
// requests, assigns engine request ids, and turns the engine core's token outputs into streamed deltas (token ids
// plus incrementally detokenized text), applying stop strings. It answers health and metrics itself.
//
// Takes from clients:      generate, abort, health, metrics, heartbeat
// Sends to clients:        delta, error, health_reply, metrics_reply, heartbeat
// Takes from engine core:  welcome, outputs, metrics_reply, heartbeat, error
// Sends to engine core:    hello, add_request, abort, metrics, heartbeat, shutdown
//
// Every accepted request's stream ends with exactly one terminal message (a finished delta or an error).

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/actor.hpp"
#include "base/metrics.hpp"
#include "frontend/chat_template.hpp"
#include "frontend/incremental_detokenizer.hpp"
#include "frontend/tokenizer.hpp"
#include "messages/client_protocol.hpp"
#include "messages/engine_protocol.hpp"

namespace zmoe {

struct frontend_options {
    std::string client_endpoint = "tcp://127.0.0.1:5555";  ///< bound; clients connect here
    std::string engine_endpoint;                           ///< the engine core's frontend ROUTER
    std::string model_dir;                                 ///< for tokenizer.json and the name in health
    std::string tokenizer_path;                            ///< empty = model_dir
    std::string chat_template_path;  ///< a Jinja file replacing the tokenizer's chat template; empty = the tokenizer's
    std::chrono::milliseconds heartbeat_interval{1000};
    std::chrono::milliseconds drain_timeout{5000};  ///< on stop: how long running requests may finish
    uint32_t num_workers = 0;
};

class frontend_actor : public actor {
  public:
    explicit frontend_actor(frontend_options options);
    ~frontend_actor() override;
    /// 0 after a clean drain; 1 when the engine core failed or vanished.
    int exit_code() const { return exit_code_; }
    const std::string& client_endpoint() const { return bound_client_endpoint_; }

  protected:
    void on_start() override;
    bool on_stop_requested() override;

  private:
    struct live_request {
        std::string client;  // ROUTER identity
        std::string client_request_id;
        std::unique_ptr<incremental_detokenizer> detok;
        std::vector<std::string> stop;
        bool stream = true;
        uint32_t prompt_tokens = 0;
        uint32_t completion_tokens = 0;
        std::string text;                  // text emitted so far (for stop-string search)
        std::string held_text;             // decoded but held back: could be the start of a stop string
        std::vector<int32_t> pending_ids;  // not yet sent (non-streaming requests, or held with held_text)
        std::string pending_text;
        std::chrono::steady_clock::time_point arrived;
        std::chrono::steady_clock::time_point last_token;
        bool first_token_seen = false;
    };
    struct client_info {
        std::chrono::steady_clock::time_point last_seen;
        bool sends_heartbeats = false;
    };

    void on_client_message(const inbound_message& msg);
    void handle_generate(const std::string& client, client_generate&& m);
    void handle_abort(const std::string& client, const client_abort& m);
    void on_engine_message(const inbound_message& msg);
    void handle_outputs(const engine_outputs& m);
    void finish_request(uint64_t id, finish_reason reason, errc code = errc::ok, const std::string& message = {});
    void send_client_error(const std::string& client, const std::string& client_request_id, errc code,
                           const std::string& message);
    void fail_all(errc code, const std::string& why);
    void check_clients();
    void maybe_finish_drain();
    nlohmann::json metrics_json() const;

    frontend_options options_;
    std::optional<tokenizer> tokenizer_;
    std::optional<chat_template> chat_template_;  ///< renders client_generate.chat (docs/chat_templates.md)
    socket_id client_sock_ = -1;
    socket_id engine_sock_ = -1;
    std::string bound_client_endpoint_;
    bool engine_ready_ = false;
    bool engine_failed_ = false;
    std::string engine_failure_;
    bool draining_ = false;
    int exit_code_ = 0;
    engine_welcome welcome_;
    uint64_t next_request_id_ = 1;
    std::map<uint64_t, live_request> live_;
    std::map<std::pair<std::string, std::string>, uint64_t> by_client_id_;  // (client, client_request_id) -> id
    std::map<std::string, client_info> clients_;
    std::map<std::string, std::pair<std::string, std::string>> metrics_waiters_;  // our tag -> (client, its tag)
    int64_t model_vocab_size_ = 0;
    bool drain_done_ = false;
    uint64_t next_tag_ = 1;
    metrics_registry metrics_;
    std::chrono::steady_clock::time_point started_at_;
};

}  // namespace zmoe
