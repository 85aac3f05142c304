#include "frontend/frontend_actor.hpp"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "actors/client_auth.hpp"
#include "actors/run_secret.hpp"
#include "base/check.hpp"
#include "base/log.hpp"
#include "base/overloaded.hpp"
#include "base/version.hpp"
#include "frontend/chat_prompt.hpp"
#include "frontend/sampling_defaults.hpp"
#include "frontend/token_requests.hpp"

namespace zmoe {

using clock_type = std::chrono::steady_clock;

namespace {

double ms_between(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

/// Length of the longest suffix of `text` that is a proper prefix of some stop string: text that must be held
/// back because the next tokens could complete a stop string.
size_t stop_prefix_hold(const std::string& text, const std::vector<std::string>& stops) {
    size_t hold = 0;
    for (const auto& s : stops) {
        for (size_t n = std::min(s.size() - 1, text.size()); n > hold; --n) {
            if (text.compare(text.size() - n, n, s, 0, n) == 0) {
                hold = n;
                break;
            }
        }
    }
    return hold;
}

int64_t read_vocab_size(const std::string& model_dir) {
    std::ifstream in(std::filesystem::path(model_dir) / "config.json");
    if (!in) return 0;
    try {
        const auto j = nlohmann::json::parse(in);
        return j.value("vocab_size", int64_t{0});
    } catch (const std::exception&) {
        return 0;
    }
}

}  // namespace

frontend_actor::frontend_actor(frontend_options options)
    : actor("frontend", actor_options{.heartbeat_interval = options.heartbeat_interval,
                                      .heartbeat_max_missed = options.heartbeat_max_missed}),
      options_(std::move(options)) {}

frontend_actor::~frontend_actor() {
    request_stop();
    join();
}

void frontend_actor::on_start() {
    started_at_ = clock_type::now();
    // Counters of hostile or broken input exist from the start (0 is an answer, not a missing series).
    for (const char* c :
         {"frames_dropped", "client_frames_malformed", "requests_unauthenticated", "clients_unauthenticated"})
        metrics_.counter_add(c, 0);
    const std::string tok_path = options_.tokenizer_path.empty() ? options_.model_dir : options_.tokenizer_path;
    const auto json_path = std::filesystem::is_directory(tok_path) ? std::filesystem::path(tok_path) / "tokenizer.json"
                                                                   : std::filesystem::path(tok_path);
    if (options_.skip_tokenizer_init) {
        ZMOE_LOG(info, "frontend: --skip-tokenizer-init: serving prompt_token_ids only (no text, no chat)");
    } else if (!std::filesystem::exists(json_path)) {
        // Fatal: a server without a tokenizer fails every text request; that must be asked for, not found out.
        ZMOE_LOG(error, "frontend: no tokenizer.json at " << json_path.string()
                                                          << ": give --tokenizer, or --skip-tokenizer-init to serve "
                                                             "prompt_token_ids only");
        exit_code_ = 1;
        stop_now();
        return;
    } else {
        tokenizer_ = tokenizer::from_file(tok_path);
        tokenize_pool_ = std::make_unique<work_pool>(std::max<size_t>(1, options_.tokenizer_threads));
        ZMOE_LOG(info, "frontend: tokenizer " << json_path.string() << " (" << tokenizer_->vocab_size() << " ids)");
        chat_template_ = chat_template::from_tokenizer(tok_path, options_.chat_template_path);
        if (chat_template_) {
            if (auto format = parse_content_format(options_.chat_template_content_format))
                chat_template_->set_content_format(*format);
            ZMOE_LOG(info, "frontend: chat template loaded (" << describe(chat_template_->message_shape()) << ")");
        }
    }
    if (options_.api_key.empty() && endpoint_reachable_off_host(options_.client_endpoint)) {
        ZMOE_LOG(error, "frontend: " << options_.client_endpoint
                                     << " takes clients from other hosts: set an API key (--api-key or ZMOE_API_KEY), "
                                        "or bind a loopback address");
        exit_code_ = 1;
        stop_now();
        return;
    }
    client_endpoint_is_tcp_ = options_.client_endpoint.rfind("tcp://", 0) == 0;
    model_vocab_size_ = read_vocab_size(options_.model_dir);
    try {
        sampling_defaults_ = sampling_defaults::load(options_.model_dir);
    } catch (const error& e) {
        ZMOE_LOG(warn, "frontend: " << e.what() << "; using vLLM's sampling defaults");
    }
    client_sock_ = add_socket(socket_kind::router, [this](const inbound_message& m) { on_client_message(m); });
    engine_sock_ = add_socket(socket_kind::dealer, [this](const inbound_message& m) { on_engine_message(m); });
    try {
        bound_client_endpoint_ = bind(client_sock_, options_.client_endpoint);
    } catch (const error& e) {
        // Fatal: a frontend that cannot take clients must not look alive (or let a check reach another server).
        ZMOE_LOG(error, "frontend: " << e.what());
        exit_code_ = 1;
        stop_now();
        return;
    }
    set_routing_id(engine_sock_, "frontend-" + std::to_string(getpid()));
    connect(engine_sock_, options_.engine_endpoint);
    send_reliable(engine_sock_, encode(engine_hello{"frontend", getpid(), run_secret()}));
    watch_peer(engine_sock_, "", encode(engine_heartbeat{}), [this] {
        engine_failed_ = true;
        engine_failure_ = "the engine core stopped answering";
        exit_code_ = 1;
        fail_all(errc::peer_dead, engine_failure_);
        // Keep reporting the failure to health checks for a while, then leave: nothing can be served any more.
        add_timer(std::chrono::seconds(5), [this] { stop_now(); });
    });
    add_timer(
        options_.heartbeat_interval, [this] { check_clients(); }, true);
    ZMOE_LOG(info, "frontend: clients on " << bound_client_endpoint_);
}

bool frontend_actor::on_stop_requested() {
    if (!draining_) {
        draining_ = true;
        ZMOE_LOG(info, "frontend: draining " << live_.size() << " request(s)");
        add_timer(options_.drain_timeout, [this] {
            // What did not finish within the shutdown timeout ends with the documented error (errc::aborted).
            for (const uint64_t id : live_ids()) {
                if (!live_.count(id)) continue;  // ended with another sequence of its request
                send_reliable(engine_sock_, encode(engine_abort{id}));
                finish_request(id, finish_reason::error, errc::aborted,
                               "the server shut down before this request finished (--shutdown-timeout " +
                                   std::to_string(options_.drain_timeout.count()) + " ms)");
            }
            maybe_finish_drain();
        });
        maybe_finish_drain();
    }
    return false;
}

void frontend_actor::maybe_finish_drain() {
    if (!draining_ || !live_.empty() || !tokenizing_.empty() || drain_done_) return;
    drain_done_ = true;
    send_reliable(engine_sock_, encode(engine_shutdown{}));
    // The engine core drains its side and stops the workers; give the shutdown a moment to leave.
    add_timer(std::chrono::milliseconds(200), [this] { stop_now(); });
}

// ---------------------------------------------------------------------------------------------------------------
// Clients

void frontend_actor::send_client_error(const std::string& client, const std::string& client_request_id, errc code,
                                       const std::string& message) {
    metrics_.counter_add(std::string("request_errors{code=\"") + errc_name(code) + "\"}");
    if (code == errc::duplicate_request) metrics_.counter_add("requests_rejected_duplicate");
    send_to_client(client, encode(client_error{client_request_id, code, message}));
}

void frontend_actor::send_to_client(const std::string& client, std::string bytes) {
    auto cit = clients_.find(client);
    if (cit == clients_.end()) {
        // Not a client we know (reaped, or gone): one try, nothing kept.
        send_to(client_sock_, client, bytes);
        return;
    }
    auto& c = cit->second;
    if (!c.blocked) {
        const send_status st = try_send_to(client_sock_, client, bytes);
        if (st == send_status::sent) return;
        if (st == send_status::no_peer) return client_gone(client);
        c.blocked = true;
        c.last_progress = clock_type::now();
        blocked_clients_.insert(client);
        metrics_.counter_add("client_pipe_full");
        arm_client_flush();
    }
    c.outbox.push_back(std::move(bytes));
}

bool frontend_actor::send_pending_delta(uint64_t id) {
    auto it = live_.find(id);
    if (it == live_.end()) return true;
    auto& r = it->second;
    if (r.pending_ids.empty() && r.pending_text.empty()) return true;
    client_delta d;
    d.client_request_id = r.client_request_id;
    d.token_ids = r.pending_ids;
    d.text = r.pending_text;
    d.prompt_tokens = r.prompt_tokens;
    d.completion_tokens = r.completion_tokens;
    d.cached_tokens = r.cached_tokens;
    d.logprobs = r.pending_logprobs;
    d.index = r.index;
    const send_status st = try_send_to(client_sock_, r.client, encode(d));
    if (st == send_status::full) return false;
    r.pending_ids.clear();
    r.pending_text.clear();
    r.pending_logprobs.clear();
    if (st == send_status::no_peer) client_gone(r.client);
    return true;
}

void frontend_actor::arm_client_flush() {
    if (flush_armed_) return;
    flush_armed_ = true;
    add_timer(std::chrono::milliseconds(5), [this] { flush_clients(); });
}

void frontend_actor::flush_clients() {
    const auto now = clock_type::now();
    for (auto bit = blocked_clients_.begin(); bit != blocked_clients_.end();) {
        const std::string client = *bit++;
        auto cit = clients_.find(client);
        if (cit == clients_.end()) {
            blocked_clients_.erase(client);
            continue;
        }
        auto& c = cit->second;
        bool full = false, gone = false;
        while (!c.outbox.empty()) {
            const send_status st = try_send_to(client_sock_, client, c.outbox.front());
            if (st == send_status::full) {
                full = true;
                break;
            }
            if (st == send_status::no_peer) {
                gone = true;
                break;
            }
            c.outbox.pop_front();
            c.last_progress = now;
        }
        if (gone) {
            client_gone(client);
            continue;
        }
        while (!full && !c.dirty.empty()) {
            const uint64_t id = *c.dirty.begin();
            if (!send_pending_delta(id)) {
                full = true;
                break;
            }
            if (!clients_.count(client)) break;  // it went away during the send
            c.dirty.erase(id);
            c.last_progress = now;
        }
        if (!clients_.count(client)) continue;
        if (!full) {
            c.blocked = false;
            blocked_clients_.erase(client);
            continue;
        }
        if (now - c.last_progress >= options_.client_send_timeout && c.num_live == 0) {
            // Its requests have already been failed and it still takes nothing: forget it.
            metrics_.counter_add("clients_dropped");
            clients_.erase(client);
            blocked_clients_.erase(client);
        } else if (now - c.last_progress >= options_.client_send_timeout) {
            // The client takes nothing: end its requests (the errors wait in its outbox, behind nothing else).
            metrics_.counter_add("clients_stuck");
            ZMOE_LOG(warn, "frontend: a client took no message for " << options_.client_send_timeout.count()
                                                                     << " ms; failing its requests");
            c.outbox.clear();
            c.dirty.clear();
            c.last_progress = now;
            fail_client_requests(client, errc::aborted,
                                 "the client read nothing for " + std::to_string(options_.client_send_timeout.count()) +
                                     " ms: request ended");
        }
    }
    flush_armed_ = false;
    if (!blocked_clients_.empty()) arm_client_flush();
    maybe_finish_drain();
}

void frontend_actor::fail_client_requests(const std::string& client, errc code, const std::string& why) {
    for (const uint64_t id : live_ids(client)) {
        auto lit = live_.find(id);
        if (lit == live_.end()) continue;  // ended with another sequence of its request
        send_reliable(engine_sock_, encode(engine_abort{id}));
        lit->second.pending_ids.clear();
        lit->second.pending_text.clear();
        lit->second.pending_logprobs.clear();
        finish_request(id, code == errc::ok ? finish_reason::abort : finish_reason::error, code, why);
    }
}

void frontend_actor::client_gone(const std::string& client) {
    auto cit = clients_.find(client);
    if (cit == clients_.end()) return;
    // Its requests end here; nothing can be delivered, so the terminal messages are counted but not sent.
    size_t n = cit->second.num_live;
    clients_.erase(cit);
    blocked_clients_.erase(client);
    if (n == 0) return;
    metrics_.counter_add("requests_aborted_client_gone", static_cast<double>(n));
    fail_client_requests(client, errc::ok, {});
}

void frontend_actor::reap_clients() {
    const auto now = clock_type::now();
    for (auto it = clients_.begin(); it != clients_.end();) {
        const auto& c = it->second;
        if (c.num_live == 0 && !c.blocked && c.outbox.empty() && now - c.last_seen >= options_.client_idle_timeout) {
            it = clients_.erase(it);
            metrics_.counter_add("clients_reaped");
        } else {
            ++it;
        }
    }
}

void frontend_actor::on_client_message(const inbound_message& msg) {
    const std::string client(msg.peer);
    auto& info = clients_[client];
    info.last_seen = clock_type::now();
    client_request decoded;
    try {
        decoded = decode_client_request(msg.payload);
    } catch (const error& e) {
        metrics_.counter_add("client_frames_malformed");
        send_client_error(client, peek_client_request_id(msg.payload), errc::protocol, e.what());
        return;
    }
    // Client authentication (actors/client_auth.hpp): hello, health and heartbeats are open to all; generate, abort and
    // metrics need the API key from a client over TCP that is not on loopback, and from anyone who gave a wrong one.
    const bool open_message = std::holds_alternative<client_hello>(decoded) ||
                              std::holds_alternative<client_health>(decoded) ||
                              std::holds_alternative<client_heartbeat>(decoded);
    if (!open_message && !options_.api_key.empty() && info.auth != client_info::auth_state::ok) {
        const bool local = !client_endpoint_is_tcp_ || is_loopback_address(msg.peer_address);
        if (!local || info.auth == client_info::auth_state::refused) {
            metrics_.counter_add("requests_unauthenticated");
            std::string id;
            if (auto* g = std::get_if<client_generate>(&decoded)) id = g->client_request_id;
            if (auto* a = std::get_if<client_abort>(&decoded)) id = a->client_request_id;
            return send_client_error(client, id, errc::unauthenticated,
                                     info.auth == client_info::auth_state::refused
                                         ? "wrong API key"
                                         : "this server needs an API key from clients not on loopback (zmoe client "
                                           "--api-key, ZMOE_API_KEY, or the HTTP header Authorization: Bearer KEY)");
        }
    }
    visit_exhaustive(
        std::move(decoded),
        [&](const client_hello& m) {
            if (options_.api_key.empty() || m.api_key.empty()) return;  // no key asked for, or none given
            if (secrets_equal(m.api_key, options_.api_key)) {
                info.auth = client_info::auth_state::ok;
            } else {
                info.auth = client_info::auth_state::refused;
                metrics_.counter_add("clients_unauthenticated");
                send_client_error(client, "", errc::unauthenticated, "wrong API key");
            }
        },
        [&](client_generate&& m) { handle_generate(client, std::move(m)); },
        [&](const client_abort& m) { handle_abort(client, m); },
        [&](const client_heartbeat&) {
            note_client_heartbeat(info);
            if (!info.blocked) send_to(client_sock_, client, encode(client_heartbeat{}));
        },
        [&](const client_health& m) {
            client_health_reply r;
            r.tag = m.tag;
            r.status = engine_failed_ ? "degraded" : draining_ ? "draining" : engine_ready_ ? "ok" : "starting";
            r.model = std::filesystem::path(options_.model_dir).filename().string();
            r.num_workers = engine_ready_ ? welcome_.num_workers : options_.num_workers;
            r.num_workers_alive = engine_failed_ ? 0 : engine_ready_ ? welcome_.num_workers : 0;
            // Running: producing tokens; waiting: accepted, no token yet (queued or in prefill).
            for (const auto& [id, lr] : live_) ++(lr.first_token_seen ? r.num_running : r.num_waiting);
            r.uptime_s = ms_between(started_at_, clock_type::now()) / 1000.0;
            r.version = kVersion;
            r.detail = engine_failure_;
            r.run_id = options_.run_id;
            send_to_client(client, encode(r));
        },
        [&](const client_tokenize& m) {
            client_tokens_reply r =
                answer_tokenize(m, tokenizer_ ? &*tokenizer_ : nullptr, chat_template_, options_.max_prompt_bytes);
            r.max_model_len = engine_ready_ ? welcome_.max_model_len : 0;
            send_to_client(client, encode(r));
        },
        [&](const client_detokenize& m) {
            client_tokens_reply r = answer_detokenize(m, tokenizer_ ? &*tokenizer_ : nullptr);
            r.max_model_len = engine_ready_ ? welcome_.max_model_len : 0;
            send_to_client(client, encode(r));
        },
        [&](const client_metrics& m) {
            if (!engine_ready_ || engine_failed_) {
                nlohmann::json all = {{"frontend", metrics_json()}};
                send_to_client(client, encode(client_metrics_reply{m.tag, all.dump()}));
                return;
            }
            const std::string tag = "m" + std::to_string(next_tag_++);
            metrics_waiters_[tag] = {client, m.tag};
            send_reliable(engine_sock_, encode(engine_metrics{tag}));
            add_timer(std::chrono::milliseconds(3000), [this, tag] {
                auto it = metrics_waiters_.find(tag);
                if (it == metrics_waiters_.end()) return;
                nlohmann::json all = {{"frontend", metrics_json()}, {"engine_core", "no answer"}};
                send_to_client(it->second.first, encode(client_metrics_reply{it->second.second, all.dump()}));
                metrics_waiters_.erase(it);
            });
        });
}

void frontend_actor::handle_generate(const std::string& client, client_generate&& m) {
    metrics_.counter_add("requests_received");
    const std::string& cid = m.client_request_id;
    if (cid.empty()) return send_client_error(client, cid, errc::invalid_argument, "client_request_id is empty");
    if (by_client_id_.count({client, cid}) || tokenizing_.count({client, cid}))
        return send_client_error(client, cid, errc::duplicate_request,
                                 "client_request_id '" + cid + "' is already in use by a live request (left running)");
    if (draining_) return send_client_error(client, cid, errc::aborted, "the server is shutting down");
    if (engine_failed_) return send_client_error(client, cid, errc::peer_dead, engine_failure_);
    if (!engine_ready_) return send_client_error(client, cid, errc::unsupported, "the engine is still starting");
    if (m.max_tokens < 1) return send_client_error(client, cid, errc::invalid_argument, "max_tokens must be >= 1");
    if (m.n < 1 || m.n > kMaxChoices)
        return send_client_error(client, cid, errc::invalid_argument,
                                 "n must be in [1, " + std::to_string(kMaxChoices) + "], got " + std::to_string(m.n));
    sampling_params sampling;
    try {
        sampling = resolve_sampling(m, sampling_defaults_, model_vocab_size_);
    } catch (const error& e) {
        return send_client_error(client, cid, e.code(), e.what());
    }
    for (const auto& s : m.stop)
        if (s.empty()) return send_client_error(client, cid, errc::invalid_argument, "stop strings must not be empty");
    if (m.structured.active()) {
        if (!tokenizer_)
            return send_client_error(client, cid, errc::unsupported,
                                     "structured outputs need the tokenizer: the server runs with "
                                     "--skip-tokenizer-init");
        // Compiled here (cached by canonical text) so that a constraint that cannot be built is refused before the
        // request is queued; the workers compile it again against their vocabulary.
        try {
            grammar_check_.check(m.structured);
        } catch (const error& e) {
            metrics_.counter_add("structured_outputs_refused");
            return send_client_error(client, cid, e.code(), e.what());
        }
        metrics_.counter_add("structured_outputs_requests");
    }

    if (!m.chat.empty() && !std::holds_alternative<std::string>(m.prompt))
        return send_client_error(client, cid, errc::invalid_argument, "give either prompt_token_ids or chat messages");
    if (auto* text = std::get_if<std::string>(&m.prompt)) {
        if (!tokenizer_)
            return send_client_error(client, cid, errc::unsupported,
                                     "the server runs with --skip-tokenizer-init (no tokenizer): send "
                                     "prompt_token_ids");
        if (!m.chat.empty() && !text->empty())
            return send_client_error(client, cid, errc::invalid_argument, "give either a prompt or chat messages");
        if (m.chat.size() > options_.max_prompt_bytes)
            return send_client_error(client, cid, errc::invalid_argument,
                                     "the chat request has " + std::to_string(m.chat.size()) +
                                         " bytes, over the limit of " + std::to_string(options_.max_prompt_bytes) +
                                         " (--max-prompt-bytes)");
        if (text->size() > options_.max_prompt_bytes)
            return send_client_error(client, cid, errc::invalid_argument,
                                     "the prompt has " + std::to_string(text->size()) + " bytes, over the limit of " +
                                         std::to_string(options_.max_prompt_bytes) + " (--max-prompt-bytes)");
        // Off this thread: heartbeats and other clients go on while a large prompt is encoded.
        tokenizing_[{client, cid}] = false;
        metrics_.gauge_set("prompts_tokenizing", static_cast<double>(tokenizing_.size()));
        auto req = std::make_shared<client_generate>(std::move(m));
        tokenize_pool_->submit([this, client, req, sampling] {
            const auto t0 = clock_type::now();
            std::vector<int32_t> ids;
            std::optional<error> failed;
            try {
                // A chat request: its conversation rendered by the chat template (docs/chat_templates.md).
                ids = req->chat.empty()
                          ? tokenizer_->encode(std::get<std::string>(req->prompt), /*add_special_tokens=*/true)
                          : chat_prompt_ids(chat_template_, *tokenizer_, req->chat);
            } catch (const error& e) {
                failed = e;
            } catch (const std::exception& e) {
                failed = error(errc::internal, e.what());
            }
            const double ms = ms_between(t0, clock_type::now());
            post([this, client, req, sampling, ids = std::move(ids), failed = std::move(failed), ms]() mutable {
                metrics_.observe("tokenize_ms", ms);
                const std::string& cid = req->client_request_id;
                auto it = tokenizing_.find({client, cid});
                const bool aborted = it != tokenizing_.end() && it->second;
                if (it != tokenizing_.end()) tokenizing_.erase(it);
                metrics_.gauge_set("prompts_tokenizing", static_cast<double>(tokenizing_.size()));
                if (aborted) {
                    for (uint32_t i = 0; i < req->n; ++i) {  // each sequence ends with its own finished delta
                        client_delta d;
                        d.client_request_id = cid;
                        d.finished = true;
                        d.reason = finish_reason::abort;
                        d.index = i;
                        send_to_client(client, encode(d));
                    }
                } else if (failed) {
                    send_client_error(client, cid, failed->code(), std::string("prompt: ") + failed->what());
                } else {
                    accept_generate(client, std::move(*req), std::move(ids), std::move(sampling));
                }
                maybe_finish_drain();
            });
        });
        return;
    }
    accept_generate(client, std::move(m), std::move(std::get<std::vector<int32_t>>(m.prompt)), std::move(sampling));
}

void frontend_actor::accept_generate(const std::string& client, client_generate&& m, std::vector<int32_t> ids,
                                     sampling_params sampling) {
    const std::string& cid = m.client_request_id;
    if (draining_) return send_client_error(client, cid, errc::aborted, "the server is shutting down");
    if (engine_failed_) return send_client_error(client, cid, errc::peer_dead, engine_failure_);
    if (num_queued(engine_sock_) >= options_.max_engine_backlog)
        return send_client_error(client, cid, errc::overloaded,
                                 "the engine core's queue is full (" + std::to_string(num_queued(engine_sock_)) +
                                     " messages waiting): retry later");
    if (std::holds_alternative<std::vector<int32_t>>(m.prompt)) {
        const int64_t vocab = model_vocab_size_ > 0 ? model_vocab_size_ : (tokenizer_ ? tokenizer_->vocab_size() : 0);
        for (size_t i = 0; i < ids.size(); ++i)
            if (ids[i] < 0 || (vocab > 0 && ids[i] >= vocab))
                return send_client_error(client, cid, errc::invalid_argument,
                                         "prompt_token_ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                                             " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    if (ids.empty()) return send_client_error(client, cid, errc::invalid_argument, "the prompt is empty");
    const uint64_t max_len = welcome_.max_model_len;
    if (ids.size() >= max_len)
        return send_client_error(client, cid, errc::invalid_argument,
                                 "the prompt has " + std::to_string(ids.size()) +
                                     " tokens, longer than the model's context of " + std::to_string(max_len));
    if (ids.size() + m.max_tokens > max_len)
        return send_client_error(client, cid, errc::invalid_argument,
                                 "prompt (" + std::to_string(ids.size()) + " tokens) + max_tokens (" +
                                     std::to_string(m.max_tokens) + ") exceeds the model's context of " +
                                     std::to_string(max_len));

    // n sequences share the prompt: n engine requests, the i-th seeded seed + i, so that each is reproducible alone
    // and they differ. The engine core's prefix cache computes the shared prompt once (docs/scheduler.md).
    auto& group = by_client_id_[{client, cid}];
    for (uint32_t i = 0; i < m.n; ++i) {
        const uint64_t id = next_request_id_++;
        engine_add_request req;
        req.request_id = id;
        req.prompt_token_ids = ids;
        req.sampling = sampling;
        req.stop_token_ids = m.stop_token_ids;
        if (m.seed) {
            req.sampling.seed = *m.seed + i;
        } else {
            static std::random_device rd;
            req.sampling.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
        }
        req.max_tokens = m.max_tokens;
        req.ignore_eos = m.ignore_eos;
        req.cache_salt = m.cache_salt;
        req.structured = m.structured;

        live_request lr;
        lr.client = client;
        lr.client_request_id = cid;
        lr.index = i;
        if (tokenizer_) lr.detok = std::make_unique<incremental_detokenizer>(*tokenizer_);
        lr.stop = m.stop;
        lr.stream = m.stream;
        lr.min_tokens = m.min_tokens;
        lr.prompt_tokens = static_cast<uint32_t>(ids.size());
        lr.arrived = clock_type::now();
        live_.emplace(id, std::move(lr));
        group.push_back(id);
        ++clients_[client].num_live;
        metrics_.counter_add("requests_accepted");
        send_reliable(engine_sock_, encode(req));
    }
    metrics_.counter_add("prompt_tokens", static_cast<double>(ids.size()));
    metrics_.gauge_set("requests_live", static_cast<double>(live_.size()));
}

void frontend_actor::handle_abort(const std::string& client, const client_abort& m) {
    auto tit = tokenizing_.find({client, m.client_request_id});
    if (tit != tokenizing_.end()) {
        tit->second = true;  // its stream ends with an abort delta once its tokenization returns
        return;
    }
    auto it = by_client_id_.find({client, m.client_request_id});
    if (it == by_client_id_.end()) {
        // Already finished, or never was: a no-op (an error here could reach a later request reusing the id).
        metrics_.counter_add("aborts_unknown_id");
        return;
    }
    for (const uint64_t id : std::vector<uint64_t>(it->second)) {  // every sequence of the request
        send_reliable(engine_sock_, encode(engine_abort{id}));
        finish_request(id, finish_reason::abort);
    }
    maybe_finish_drain();
}

void frontend_actor::note_client_heartbeat(client_info& info) {
    const auto now = clock_type::now();
    if (info.num_heartbeats > 0) {
        // The period decays towards the latest gaps but never below one: a client that once paused between calls
        // is judged by that pause for a while. Capped, so a dead client is still found within a bound.
        const auto gap = std::chrono::duration_cast<std::chrono::milliseconds>(now - info.last_heartbeat);
        info.heartbeat_period = std::min(std::max(gap, info.heartbeat_period * 3 / 4), kMaxClientHeartbeatPeriod);
    }
    info.last_heartbeat = now;
    if (++info.num_heartbeats >= 2) info.sends_heartbeats = true;
}

void frontend_actor::check_clients() {
    // A client that heartbeats on schedule and then falls silent for 3 of its periods (ours, or its own when
    // longer) has gone: its requests end with an error saying so. A client that is only reading still heartbeats
    // (the clients send on schedule whatever arrives), and any frame it sends counts (last_seen).
    const auto now = clock_type::now();
    std::vector<std::pair<std::string, std::chrono::milliseconds>> silent;  // failed after the walk: sends may erase
    for (auto& [client, info] : clients_) {
        if (!info.sends_heartbeats) continue;
        const auto period = std::max(options_.heartbeat_interval, info.heartbeat_period);
        const auto bound = period * std::max(options_.heartbeat_max_missed, 1);
        if (now - info.last_seen < bound) continue;
        info.sends_heartbeats = false;
        info.num_heartbeats = 0;
        info.heartbeat_period = std::chrono::milliseconds(0);
        if (info.num_live == 0) continue;
        metrics_.counter_add("requests_aborted_client_gone", static_cast<double>(info.num_live));
        ZMOE_LOG(info, "frontend: a client sent nothing for " << ms_between(info.last_seen, now) << " ms; ending its "
                                                              << info.num_live << " requests");
        silent.emplace_back(client, std::chrono::duration_cast<std::chrono::milliseconds>(bound));
    }
    for (const auto& [client, bound] : silent) {
        fail_client_requests(client, errc::aborted,
                             "the client sent no heartbeat for " + std::to_string(bound.count()) +
                                 " ms (it must call into its client library at least every heartbeat interval): "
                                 "request ended");
    }
    reap_clients();
    maybe_finish_drain();
}

// ---------------------------------------------------------------------------------------------------------------
// Engine core

void frontend_actor::on_engine_message(const inbound_message& msg) {
    engine_to_frontend decoded;
    try {
        decoded = decode_engine_to_frontend(msg.payload);
    } catch (const error& e) {
        ZMOE_LOG(warn, "frontend: dropped a malformed engine message: " << e.what());
        metrics_.counter_add("frames_dropped");
        return;
    }
    visit_exhaustive(
        std::move(decoded),
        [&](const engine_welcome& m) {
            welcome_ = m;
            engine_ready_ = true;
            ZMOE_LOG(info,
                     "frontend: engine ready (" << m.num_workers << " worker(s), context " << m.max_model_len << ")");
        },
        [&](const engine_outputs& m) { handle_outputs(m); },
        [&](const engine_metrics_reply& m) {
            auto it = metrics_waiters_.find(m.tag);
            if (it == metrics_waiters_.end()) return;
            nlohmann::json all;
            try {
                all = nlohmann::json::parse(m.json);
            } catch (const std::exception&) {
                all = nlohmann::json::object();
            }
            all["frontend"] = metrics_json();
            send_to_client(it->second.first, encode(client_metrics_reply{it->second.second, all.dump()}));
            metrics_waiters_.erase(it);
        },
        [&](const engine_error& m) {
            ZMOE_LOG(error, "frontend: engine core error: " << m.message);
            if (m.code != errc::protocol) {  // a failed run (a dead worker, a refused start-up)
                engine_failed_ = true;
                engine_failure_ = m.message;
                exit_code_ = 1;
                fail_all(m.code, m.message);
            }
        },
        [](const engine_heartbeat&) {});  // a sign of life, which the runtime already noted
}

void frontend_actor::handle_outputs(const engine_outputs& m) {
    const auto now = clock_type::now();
    for (const auto& o : m.outputs) {
        auto it = live_.find(o.request_id);
        if (it == live_.end()) continue;  // aborted or stopped here already
        auto& r = it->second;
        if (o.reason == finish_reason::error) {
            finish_request(o.request_id, finish_reason::error, o.error_code, o.error_message);
            continue;
        }
        r.cached_tokens = o.num_cached_tokens;
        std::vector<int32_t> new_ids;
        std::string new_text;
        bool stopped = false;
        size_t k = 0;  // index into o.new_logprobs
        for (int32_t tok : o.new_token_ids) {
            if (!r.first_token_seen) {
                r.first_token_seen = true;
                metrics_.observe("ttft_ms", ms_between(r.arrived, now));
            } else {
                metrics_.observe("inter_token_ms", ms_between(r.last_token, now));
            }
            r.last_token = now;
            ++r.completion_tokens;
            metrics_.counter_add("generation_tokens");
            new_ids.push_back(tok);
            if (k < o.new_logprobs.size()) r.pending_logprobs.push_back(o.new_logprobs[k]);
            ++k;
            // The token that ended the request by being a stop id (EOS, stop_token_ids) keeps its id but adds no
            // text, as vLLM's detokenizer does: a structured output ends with its grammar, not with "<|im_end|>".
            const bool stop_id = o.finished && o.reason == finish_reason::stop && k == o.new_token_ids.size();
            if (r.detok && !stop_id) {
                try {
                    new_text += r.detok->push(tok);
                } catch (const error&) {
                    // An id past the tokenizer's vocabulary (checkpoints pad their embedding rows): HF decodes it
                    // to nothing, and so do we; the request goes on.
                    metrics_.counter_add("unknown_token_ids");
                }
            }
            if (!r.stop.empty() && r.completion_tokens >= r.min_tokens) {  // vLLM: no stop before min_tokens
                // Search the text not yet emitted (held back + new) for a stop string.
                const std::string window = r.held_text + new_text;
                size_t best = std::string::npos;
                for (const auto& s : r.stop) best = std::min(best, window.find(s));
                if (best != std::string::npos) {
                    r.held_text.clear();
                    new_text = window.substr(0, best);
                    stopped = true;
                    break;
                }
            }
        }
        const bool finished = stopped || o.finished;
        if (!stopped && r.detok && o.finished) new_text += r.detok->flush();
        if (!stopped) {
            std::string window = r.held_text + new_text;
            const size_t hold = finished ? 0 : stop_prefix_hold(window, r.stop);
            r.held_text = window.substr(window.size() - hold);
            new_text = window.substr(0, window.size() - hold);
        }
        r.pending_ids.insert(r.pending_ids.end(), new_ids.begin(), new_ids.end());
        r.pending_text += new_text;
        if (stopped) send_reliable(engine_sock_, encode(engine_abort{o.request_id}));
        if (finished) {
            finish_request(o.request_id, stopped ? finish_reason::stop : o.reason);
        } else if (r.stream && (!r.pending_ids.empty() || !r.pending_text.empty())) {
            auto cit = clients_.find(r.client);
            if (cit != clients_.end() && cit->second.blocked) {
                cit->second.dirty.insert(o.request_id);  // coalesces with what is already pending
            } else if (!send_pending_delta(o.request_id)) {
                // The pipe is full: the client is slow, not gone. Hold this stream's output until it has room.
                auto& c = clients_[r.client];
                c.blocked = true;
                c.last_progress = now;
                c.dirty.insert(o.request_id);
                blocked_clients_.insert(r.client);
                metrics_.counter_add("client_pipe_full");
                arm_client_flush();
            }
        }
    }
    maybe_finish_drain();
}

void frontend_actor::finish_request(uint64_t id, finish_reason reason, errc code, const std::string& message) {
    auto it = live_.find(id);
    if (it == live_.end()) return;
    // The sequence is forgotten before anything is sent: a send can find its client gone, whose live requests then
    // end (client_gone), and this one must not be among them.
    const std::string client = it->second.client;
    const bool connected = clients_.count(client) > 0;
    if (reason == finish_reason::error) {
        const std::string cid = it->second.client_request_id;
        // The error ends the whole request: its other sequences stop here too.
        std::vector<uint64_t> group = {id};
        if (auto git = by_client_id_.find({client, cid}); git != by_client_id_.end()) group = git->second;
        for (const uint64_t seq : group) {
            if (seq != id) send_reliable(engine_sock_, encode(engine_abort{seq}));
            metrics_.counter_add("requests_failed");
            drop_sequence(seq);
        }
        if (connected) send_client_error(client, cid, code, message);
        return;
    }
    live_request& r = it->second;
    client_delta d;
    d.client_request_id = r.client_request_id;
    d.index = r.index;
    d.token_ids = std::move(r.pending_ids);
    d.logprobs = std::move(r.pending_logprobs);
    d.text = std::move(r.pending_text);
    d.text += r.held_text;  // empty after a stop string: the match and what followed are dropped
    d.finished = true;
    d.reason = reason;
    d.prompt_tokens = r.prompt_tokens;
    d.completion_tokens = r.completion_tokens;
    d.cached_tokens = r.cached_tokens;
    metrics_.counter_add("requests_finished");
    metrics_.counter_add(std::string("requests_finished{reason=\"") + std::string(finish_reason_name(reason)) + "\"}");
    metrics_.observe("request_latency_ms", ms_between(r.arrived, clock_type::now()));
    drop_sequence(id);
    if (connected) send_to_client(client, encode(d));
}

void frontend_actor::drop_sequence(uint64_t id) {
    auto it = live_.find(id);
    if (it == live_.end()) return;
    const auto& r = it->second;
    auto cit = clients_.find(r.client);
    if (cit != clients_.end()) {
        --cit->second.num_live;
        cit->second.dirty.erase(id);
    }
    auto git = by_client_id_.find({r.client, r.client_request_id});
    if (git != by_client_id_.end()) {
        std::erase(git->second, id);
        if (git->second.empty()) by_client_id_.erase(git);
    }
    live_.erase(it);
    metrics_.gauge_set("requests_live", static_cast<double>(live_.size()));
}

std::vector<uint64_t> frontend_actor::live_ids(const std::string& client) const {
    std::vector<uint64_t> ids;
    for (const auto& [id, r] : live_)
        if (client.empty() || r.client == client) ids.push_back(id);
    return ids;
}

void frontend_actor::fail_all(errc code, const std::string& why) {
    for (const uint64_t id : live_ids()) finish_request(id, finish_reason::error, code, why);
    maybe_finish_drain();
}

nlohmann::json frontend_actor::metrics_json() const {
    auto copy = metrics_;
    copy.gauge_set("clients", static_cast<double>(clients_.size()));
    copy.gauge_set("uptime_s", ms_between(started_at_, clock_type::now()) / 1000.0);
    return copy.to_json();
}

}  // namespace zmoe
