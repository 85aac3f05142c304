#pragma once
// The frontend as an actor: the clients' ROUTER socket and the engine core's DEALER. It validates and tokenizes
// requests, assigns engine request ids, and turns the engine core's token outputs into streamed deltas (token ids
// plus incrementally detokenized text), applying stop strings. It answers health and metrics itself.
//
// Takes from clients:      generate, abort, health, metrics, heartbeat, hello (the API key)
// Sends to clients:        delta, error, health_reply, metrics_reply, heartbeat
// Takes from engine core:  welcome, outputs, metrics_reply, heartbeat, error
// Sends to engine core:    hello, add_request, abort, metrics, heartbeat, shutdown
//
// Every accepted request's stream ends with exactly one terminal message (a finished delta or an error), and the
// metrics prove it: requests_accepted = requests_finished + requests_failed + requests_live.
//
// Flow control (docs/reliability.md): the engine-core link never drops a message (checked sends, queued when the
// pipe is full; new requests are refused with `overloaded` while that queue is over max_engine_backlog). A client
// whose pipe is full is never taken for gone: its messages wait in its outbox and its streams' deltas coalesce in
// their requests; if it takes nothing for client_send_timeout, its requests end with an error. Only a client
// ZeroMQ no longer knows (disconnected) is gone, and its requests are aborted.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/actor.hpp"
#include "base/metrics.hpp"
#include "frontend/chat_template.hpp"
#include "frontend/grammar_check.hpp"
#include "frontend/incremental_detokenizer.hpp"
#include "frontend/sampling_defaults.hpp"
#include "frontend/tokenizer.hpp"
#include "frontend/work_pool.hpp"
#include "messages/client_protocol.hpp"
#include "messages/engine_protocol.hpp"

namespace zmoe {

struct frontend_options {
    std::string client_endpoint = "tcp://127.0.0.1:5555";  ///< bound; clients connect here
    std::string engine_endpoint;                           ///< the engine core's frontend ROUTER
    std::string model_dir;                                 ///< for tokenizer.json and the name in health
    std::string tokenizer_path;                            ///< empty = model_dir
    std::string chat_template_path;  ///< a Jinja file replacing the tokenizer's chat template; empty = the tokenizer's
    /// How the template reads message content: "auto" (detected from its syntax), "string" or "openai" (vLLM's flag).
    std::string chat_template_content_format = "auto";
    std::chrono::milliseconds heartbeat_interval{1000};
    std::chrono::milliseconds drain_timeout{5000};  ///< on stop: how long running requests may finish
    int heartbeat_max_missed = 3;                   ///< intervals of silence before the engine core is dead
    /// A client that takes none of its messages for this long has its requests failed (errc::aborted).
    std::chrono::milliseconds client_send_timeout{30000};
    /// Messages queued for the engine core beyond which new requests are refused (errc::overloaded).
    size_t max_engine_backlog = 65536;
    /// Clients without live requests and silent this long are forgotten (the per-client map stays bounded).
    std::chrono::milliseconds client_idle_timeout{60000};
    uint32_t num_workers = 0;
    size_t max_prompt_bytes = size_t{4} << 20;  ///< text prompts longer than this are refused before tokenizing
    size_t tokenizer_threads = 2;               ///< threads encoding prompts, off the socket thread
    std::string run_id;  ///< echoed in health replies: who started this frontend knows it reached its own
    /// Non-empty: clients connected over TCP from an address that is not loopback must present it in a hello
    /// (actors/client_auth.hpp has the rule). Empty: the frontend refuses to bind where such clients can reach it.
    std::string api_key;
    /// Serve token ids only: no tokenizer is loaded (text prompts and chat get a clear error). Without it, a
    /// missing tokenizer.json is fatal at start-up.
    bool skip_tokenizer_init = false;
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
        uint32_t index = 0;  // which of the client request's n sequences
        std::unique_ptr<incremental_detokenizer> detok;
        std::vector<std::string> stop;
        bool stream = true;
        uint32_t prompt_tokens = 0;
        uint32_t cached_tokens = 0;  // prompt tokens the engine's prefix cache served
        uint32_t completion_tokens = 0;
        std::string text;                              // text emitted so far (for stop-string search)
        std::string held_text;                         // decoded but held back: could be the start of a stop string
        std::vector<int32_t> pending_ids;              // not yet sent (non-streaming requests, or held with held_text)
        std::vector<token_logprobs> pending_logprobs;  // with pending_ids, when the request asked for logprobs
        uint32_t min_tokens = 0;                       // stop strings apply from this many tokens on
        std::string pending_text;
        std::chrono::steady_clock::time_point arrived;
        std::chrono::steady_clock::time_point last_token;
        bool first_token_seen = false;
    };
    struct client_info {
        std::chrono::steady_clock::time_point last_seen;
        /// none: no hello with a key yet; ok: the right key; refused: a wrong key (everything but health and
        /// heartbeat is refused from then on, loopback or not).
        enum class auth_state { none, ok, refused };
        auth_state auth = auth_state::none;
        /// Liveness (check_clients): judged only for a client seen heartbeating twice, against its own observed
        /// heartbeat period, so a client whose interval is longer than ours is never taken for dead.
        bool sends_heartbeats = false;
        int num_heartbeats = 0;
        std::chrono::steady_clock::time_point last_heartbeat;
        std::chrono::milliseconds heartbeat_period{0};  ///< the longest recent gap between its heartbeats (capped)
        size_t num_live = 0;
        /// The pipe was full: messages wait here, in order, and streaming deltas coalesce in their requests.
        bool blocked = false;
        std::chrono::steady_clock::time_point last_progress;  // last message taken while blocked
        std::deque<std::string> outbox;
        std::set<uint64_t> dirty;  // live requests with output not yet sent
    };

    void on_client_message(const inbound_message& msg);
    void handle_generate(const std::string& client, client_generate&& m);
    /// After tokenization (or at once for prompt_token_ids): the checks that need the ids, then acceptance with
    /// `sampling` (resolved and checked by handle_generate).
    void accept_generate(const std::string& client, client_generate&& m, std::vector<int32_t> ids,
                         sampling_params sampling);
    void handle_abort(const std::string& client, const client_abort& m);
    void on_engine_message(const inbound_message& msg);
    void handle_outputs(const engine_outputs& m);
    /// Ends one sequence: a finished delta (its own), or for finish_reason::error the request's one error, which
    /// also ends its other sequences (aborted in the engine core, nothing more sent for them).
    void finish_request(uint64_t id, finish_reason reason, errc code = errc::ok, const std::string& message = {});
    /// Forgets one sequence (its client's count, its pending output, its id in its request's group).
    void drop_sequence(uint64_t id);
    /// Ids of the live sequences of `client` (all clients when empty), for loops that end them.
    std::vector<uint64_t> live_ids(const std::string& client = {}) const;
    void send_client_error(const std::string& client, const std::string& client_request_id, errc code,
                           const std::string& message);
    /// Sends to a client, or queues behind what already waits for it; never takes a full pipe for a gone client.
    void send_to_client(const std::string& client, std::string bytes);
    /// Sends the coalesced output of a streaming request; false when the client's pipe is full.
    bool send_pending_delta(uint64_t id);
    void flush_clients();
    void arm_client_flush();
    void client_gone(const std::string& client);
    void fail_client_requests(const std::string& client, errc code, const std::string& why);
    void reap_clients();
    void fail_all(errc code, const std::string& why);
    void check_clients();
    void note_client_heartbeat(client_info& info);
    /// The longest heartbeat period a client is granted (a silent client is ended within 3 of these at most).
    static constexpr std::chrono::milliseconds kMaxClientHeartbeatPeriod{20000};
    void maybe_finish_drain();
    nlohmann::json metrics_json() const;

    frontend_options options_;
    std::optional<tokenizer> tokenizer_;
    std::optional<chat_template> chat_template_;  ///< renders client_generate.chat (docs/chat_templates.md)
    /// After tokenizer_: destroyed (its jobs finished) before the tokenizer they use.
    std::unique_ptr<work_pool> tokenize_pool_;
    /// Text prompts being tokenized, by (client, client_request_id) -> aborted meanwhile.
    std::map<std::pair<std::string, std::string>, bool> tokenizing_;
    socket_id client_sock_ = -1;
    socket_id engine_sock_ = -1;
    std::string bound_client_endpoint_;
    bool client_endpoint_is_tcp_ = false;
    bool engine_ready_ = false;
    bool engine_failed_ = false;
    std::string engine_failure_;
    bool draining_ = false;
    int exit_code_ = 0;
    engine_welcome welcome_;
    uint64_t next_request_id_ = 1;
    std::map<uint64_t, live_request> live_;
    /// (client, client_request_id) -> the engine ids of its live sequences (n of them at first, by index).
    std::map<std::pair<std::string, std::string>, std::vector<uint64_t>> by_client_id_;
    std::map<std::string, client_info> clients_;
    std::set<std::string> blocked_clients_;
    bool flush_armed_ = false;
    std::map<std::string, std::pair<std::string, std::string>> metrics_waiters_;  // our tag -> (client, its tag)
    int64_t model_vocab_size_ = 0;
    sampling_defaults sampling_defaults_;
    grammar_check grammar_check_;  // structured outputs: constraints are compiled before queueing
    bool drain_done_ = false;
    uint64_t next_tag_ = 1;
    metrics_registry metrics_;
    std::chrono::steady_clock::time_point started_at_;
};

}  // namespace zmoe
