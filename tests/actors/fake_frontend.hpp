#pragma once
// A stand-in for the frontend actor, for client tests (C++ and Python).

#include <map>
#include <string>

#include "actors/actor.hpp"
#include "messages/client_protocol.hpp"

namespace zmoe::test {

/// A stand-in for the frontend: "generates" max_tokens tokens, token i = last prompt token + 1 + i, text "<i>",
/// one delta per token (or one final delta when stream is false). A prompt of "fail" gets an error; a prompt of
/// "hang" waits for an abort.
class fake_frontend : public actor {
  public:
    fake_frontend() : actor("fake_frontend") {
        sock_ = add_socket(socket_kind::router, [this](const inbound_message& m) { on_message(m); });
        endpoint_ = bind(sock_, "tcp://127.0.0.1:*");
    }
    ~fake_frontend() override {
        request_stop();
        join();
    }
    const std::string& endpoint() const { return endpoint_; }

  private:
    void on_message(const inbound_message& m) {
        std::string peer(m.peer);
        std::visit([&](const auto& msg) { handle(peer, msg); }, decode_client_request(m.payload));
    }
    void handle(const std::string& peer, const client_generate& g) {
        if (const auto* text = std::get_if<std::string>(&g.prompt)) {
            if (*text == "fail") {
                send_to(sock_, peer, encode(client_error{g.client_request_id, errc::invalid_argument, "bad prompt"}));
                return;
            }
            if (*text == "hang") {
                hanging_[g.client_request_id] = peer;
                return;
            }
        }
        int32_t base = 0;
        uint32_t num_prompt = 1;
        if (const auto* ids = std::get_if<std::vector<int32_t>>(&g.prompt)) {
            base = ids->empty() ? 0 : ids->back();
            num_prompt = static_cast<uint32_t>(ids->size());
        }
        client_delta all{g.client_request_id, {}, "", true, finish_reason::length, num_prompt, g.max_tokens};
        for (uint32_t i = 0; i < g.max_tokens; ++i) {
            client_delta d{g.client_request_id,
                           {base + 1 + static_cast<int32_t>(i)},
                           std::string("<").append(std::to_string(i)).append(">"),
                           i + 1 == g.max_tokens,
                           i + 1 == g.max_tokens ? finish_reason::length : finish_reason::none,
                           num_prompt,
                           i + 1};
            all.token_ids.push_back(d.token_ids[0]);
            all.text += d.text;
            if (g.stream) send_to(sock_, peer, encode(d));
        }
        if (!g.stream) send_to(sock_, peer, encode(all));
    }
    void handle(const std::string& peer, const client_abort& a) {
        auto it = hanging_.find(a.client_request_id);
        if (it == hanging_.end()) return;
        send_to(sock_, peer, encode(client_delta{a.client_request_id, {}, "", true, finish_reason::abort, 1, 0}));
        hanging_.erase(it);
    }
    void handle(const std::string& peer, const client_health& h) {
        send_to(sock_, peer, encode(client_health_reply{h.tag, "ok", "fake-moe", 2, 2, 0, 0, 1.5, "test", "", ""}));
    }
    void handle(const std::string& peer, const client_metrics& m) {
        send_to(sock_, peer, encode(client_metrics_reply{m.tag, R"({"requests":1})"}));
    }
    void handle(const std::string&, const client_tokenize&) {}
    void handle(const std::string&, const client_detokenize&) {}
    void handle(const std::string& peer, const client_heartbeat&) {
        if (echo_heartbeats) send_to(sock_, peer, encode(client_heartbeat{}));
    }
    void handle(const std::string&, const client_hello&) {}  // asks for no key

  public:
    /// false: a frontend that has hung (it answers nothing any more). Set before start().
    bool echo_heartbeats = true;

  private:
    socket_id sock_;
    std::string endpoint_;
    std::map<std::string, std::string> hanging_;
};

}  // namespace zmoe::test
