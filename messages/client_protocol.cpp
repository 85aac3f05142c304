#include "messages/client_protocol.hpp"

#include "messages/envelope.hpp"
#include "messages/field_list.hpp"
#include "messages/sampling_codec.hpp"

namespace zmoe {

namespace {
constexpr const char* kWhat = "client protocol";

/// A prompt: its text as a str, or its token ids as an array of integers.
struct as_prompt {
    void write(msgpack_writer& w, const std::variant<std::string, std::vector<int32_t>>& v) const {
        if (const auto* text = std::get_if<std::string>(&v)) {
            w.str(*text);
        } else {
            w.int32_array(std::get<std::vector<int32_t>>(v));
        }
    }
    void read(field_cursor& f, const char* name, std::variant<std::string, std::vector<int32_t>>& v) const {
        msgpack_reader& p = f.next(name);
        if (p.peek(name) == msgpack_type::array) {
            std::vector<int32_t> ids(p.read_array_header(kMaxSeqTokens, name));
            for (auto& id : ids) id = p.read_int32(name);
            v = std::move(ids);
        } else {
            v = std::string(p.read_str(name, kMaxStringBytes));
        }
    }
    size_t hint(const std::variant<std::string, std::vector<int32_t>>& v) const {
        const auto* text = std::get_if<std::string>(&v);
        return 5 + (text ? text->size() : 5 * std::get<std::vector<int32_t>>(v).size());
    }
};

/// A finish reason by its name ("", "length", ...); a reader refuses one it does not know.
struct as_finish_reason_name {
    void write(msgpack_writer& w, const finish_reason& v) const { w.str(finish_reason_name(v)); }
    void read(field_cursor& f, const char* name, finish_reason& v) const {
        msgpack_reader& r = f.next(name);
        std::string_view reason = r.read_str(name, 64);
        auto parsed = finish_reason_from_name(reason);
        if (!parsed) r.fail(name, "unknown finish reason '" + std::string(reason) + "'");
        v = *parsed;
    }
    size_t hint(const finish_reason&) const { return 8; }
};

const auto logit_bias_fields = [](auto& io, auto& p) {
    io.field("generate.logit_bias.id", p.first, as_sint{});
    io.field("generate.logit_bias.bias", p.second, as_f32{});
};

}  // namespace

void fields(auto& io, message_of<client_generate> auto& m) {
    io.field("generate.client_request_id", m.client_request_id, as_str{kMaxNameBytes});
    io.field("generate.prompt", m.prompt, as_prompt{});
    io.field("generate.max_tokens", m.max_tokens, as_uint{});
    io.field("generate.temperature", m.temperature, as_nullable<as_f32>{});
    io.field("generate.top_p", m.top_p, as_nullable<as_f32>{});
    io.field("generate.top_k", m.top_k, as_nullable<as_sint>{});
    io.field("generate.seed", m.seed, as_nullable<as_uint>{});
    io.field("generate.stop", m.stop, as_string_array{kMaxStopStrings, kMaxNameBytes});
    io.field("generate.ignore_eos", m.ignore_eos, as_bool{});
    io.field("generate.stream", m.stream, as_bool{});
    io.field("generate.chat", m.chat, as_str{kMaxStringBytes});
    // appended: the sampling parameters
    io.field("generate.stop_token_ids", m.stop_token_ids, as_int32_array{kMaxStopTokenIds});
    io.field("generate.logprobs", m.logprobs, as_nullable<as_uint>{});
    io.field("generate.presence_penalty", m.presence_penalty, as_f32{});
    io.field("generate.frequency_penalty", m.frequency_penalty, as_f32{});
    io.field("generate.repetition_penalty", m.repetition_penalty, as_nullable<as_f32>{});
    io.field("generate.min_p", m.min_p, as_nullable<as_f32>{});
    io.field("generate.logit_bias", m.logit_bias, as_records(logit_bias_fields, kMaxLogitBias, "generate.logit_bias"));
    io.field("generate.min_tokens", m.min_tokens, as_uint{});
    io.field("generate.n", m.n, as_uint{});                                // appended
    io.field("generate.cache_salt", m.cache_salt, as_str{kMaxNameBytes});  // appended
    io.field("generate.structured", m.structured, as_structured{});        // appended
}

void fields(auto& io, message_of<client_abort> auto& m) {
    io.field("abort.client_request_id", m.client_request_id, as_str{kMaxNameBytes});
}

void fields(auto& io, message_of<client_health> auto& m) { io.field("health.tag", m.tag, as_str{kMaxNameBytes}); }

void fields(auto& io, message_of<client_metrics> auto& m) { io.field("metrics.tag", m.tag, as_str{kMaxNameBytes}); }

void fields(auto&, message_of<client_heartbeat> auto&) {}

void fields(auto& io, message_of<client_hello> auto& m) { io.field("hello.api_key", m.api_key, as_str{kMaxNameBytes}); }

void fields(auto& io, message_of<client_tokenize> auto& m) {
    io.field("tokenize.tag", m.tag, as_str{kMaxNameBytes});
    io.field("tokenize.text", m.text, as_str{kMaxStringBytes});
    io.field("tokenize.chat", m.chat, as_str{kMaxStringBytes});
    io.field("tokenize.add_special_tokens", m.add_special_tokens, as_bool{});
}

void fields(auto& io, message_of<client_detokenize> auto& m) {
    io.field("detokenize.tag", m.tag, as_str{kMaxNameBytes});
    io.field("detokenize.token_ids", m.token_ids, as_int32_array{kMaxSeqTokens});
}

void fields(auto& io, message_of<client_delta> auto& m) {
    io.field("delta.client_request_id", m.client_request_id, as_str{kMaxNameBytes});
    io.field("delta.token_ids", m.token_ids, as_int32_array{kMaxSeqTokens});
    io.field("delta.text", m.text, as_str{kMaxStringBytes});
    io.field("delta.finished", m.finished, as_bool{});
    io.field("delta.finish_reason", m.reason, as_finish_reason_name{});
    io.field("delta.prompt_tokens", m.prompt_tokens, as_uint{});
    io.field("delta.completion_tokens", m.completion_tokens, as_uint{});
    io.field("delta.logprobs", m.logprobs, as_array<decltype(as_logprobs)>{kMaxSeqTokens, as_logprobs});  // appended
    io.field("delta.index", m.index, as_uint{});                                                          // appended
    io.field("delta.cached_tokens", m.cached_tokens, as_uint{});                                          // appended
}

void fields(auto& io, message_of<client_error> auto& m) {
    io.field("error.client_request_id", m.client_request_id, as_str{kMaxNameBytes});
    io.field("error.code", m.code, as_errc{});
    io.field("error.message", m.message, as_str{kMaxStringBytes});
}

void fields(auto& io, message_of<client_health_reply> auto& m) {
    io.field("health_reply.tag", m.tag, as_str{kMaxNameBytes});
    io.field("health_reply.status", m.status, as_str{kMaxNameBytes});
    io.field("health_reply.model", m.model, as_str{kMaxNameBytes});
    io.field("health_reply.num_workers", m.num_workers, as_uint{});
    io.field("health_reply.num_workers_alive", m.num_workers_alive, as_uint{});
    io.field("health_reply.num_running", m.num_running, as_uint{});
    io.field("health_reply.num_waiting", m.num_waiting, as_uint{});
    io.field("health_reply.uptime_s", m.uptime_s, as_f64{});
    io.field("health_reply.version", m.version, as_str{kMaxNameBytes});
    io.field("health_reply.detail", m.detail, as_str{kMaxStringBytes});
    io.field("health_reply.run_id", m.run_id, as_str{kMaxNameBytes});
}

void fields(auto& io, message_of<client_metrics_reply> auto& m) {
    io.field("metrics_reply.tag", m.tag, as_str{kMaxNameBytes});
    io.field("metrics_reply.json", m.json, as_str{kMaxStringBytes});
}

void fields(auto& io, message_of<client_tokens_reply> auto& m) {
    io.field("tokens_reply.tag", m.tag, as_str{kMaxNameBytes});
    io.field("tokens_reply.token_ids", m.token_ids, as_int32_array{kMaxSeqTokens});
    io.field("tokens_reply.text", m.text, as_str{kMaxStringBytes});
    io.field("tokens_reply.pieces", m.pieces, as_string_array{kMaxSeqTokens, kMaxStringBytes});
    io.field("tokens_reply.max_model_len", m.max_model_len, as_uint{});
    io.field("tokens_reply.code", m.code, as_errc{});
    io.field("tokens_reply.message", m.message, as_str{kMaxStringBytes});
}

namespace {

template <class M>
std::string encode_client(client_kind kind, const M& m) {
    return encode_message(kClientProtocolVersion, static_cast<uint8_t>(kind), m);
}

}  // namespace

std::string encode(const client_generate& m) { return encode_client(client_kind::generate, m); }
std::string encode(const client_abort& m) { return encode_client(client_kind::abort, m); }
std::string encode(const client_health& m) { return encode_client(client_kind::health, m); }
std::string encode(const client_metrics& m) { return encode_client(client_kind::metrics, m); }
std::string encode(const client_heartbeat& m) { return encode_client(client_kind::heartbeat, m); }
std::string encode(const client_hello& m) { return encode_client(client_kind::hello, m); }
std::string encode(const client_delta& m) { return encode_client(client_kind::delta, m); }
std::string encode(const client_error& m) { return encode_client(client_kind::error, m); }
std::string encode(const client_health_reply& m) { return encode_client(client_kind::health_reply, m); }
std::string encode(const client_metrics_reply& m) { return encode_client(client_kind::metrics_reply, m); }
std::string encode(const client_tokenize& m) { return encode_client(client_kind::tokenize, m); }
std::string encode(const client_detokenize& m) { return encode_client(client_kind::detokenize, m); }
std::string encode(const client_tokens_reply& m) { return encode_client(client_kind::tokens_reply, m); }

client_request decode_client_request(std::string_view bytes) {
    msgpack_reader r(bytes, kWhat);
    auto [kind, f] = open_message(r, bytes, kClientProtocolVersion, kWhat);
    client_request out;
    switch (static_cast<client_kind>(kind)) {
        case client_kind::generate:
            out = decode_fields<client_generate>(f, "generate");
            break;
        case client_kind::abort:
            out = decode_fields<client_abort>(f, "abort");
            break;
        case client_kind::health:
            out = decode_fields<client_health>(f, "health");
            break;
        case client_kind::metrics:
            out = decode_fields<client_metrics>(f, "metrics");
            break;
        case client_kind::heartbeat:
            out = decode_fields<client_heartbeat>(f, "heartbeat");
            break;
        case client_kind::hello:
            out = decode_fields<client_hello>(f, "hello");
            break;
        case client_kind::tokenize:
            out = decode_fields<client_tokenize>(f, "tokenize");
            break;
        case client_kind::detokenize:
            out = decode_fields<client_detokenize>(f, "detokenize");
            break;
        default:
            r.fail("kind", "unknown client request kind " + std::to_string(kind));
    }
    close_message(r, f);
    return out;
}

std::string peek_client_request_id(std::string_view bytes) noexcept {
    try {
        msgpack_reader r(bytes, kWhat);
        auto [kind, f] = open_message(r, bytes, kClientProtocolVersion, kWhat);
        const auto k = static_cast<client_kind>(kind);
        if (k != client_kind::generate && k != client_kind::abort) return {};
        return f.read_string("client_request_id", kMaxNameBytes);
    } catch (...) {
        return {};
    }
}

client_reply decode_client_reply(std::string_view bytes) {
    msgpack_reader r(bytes, kWhat);
    auto [kind, f] = open_message(r, bytes, kClientProtocolVersion, kWhat);
    client_reply out;
    switch (static_cast<client_kind>(kind)) {
        case client_kind::delta:
            out = decode_fields<client_delta>(f, "delta");
            break;
        case client_kind::error:
            out = decode_fields<client_error>(f, "error");
            break;
        case client_kind::health_reply:
            out = decode_fields<client_health_reply>(f, "health_reply");
            break;
        case client_kind::metrics_reply:
            out = decode_fields<client_metrics_reply>(f, "metrics_reply");
            break;
        case client_kind::heartbeat:
            out = decode_fields<client_heartbeat>(f, "heartbeat");
            break;
        case client_kind::tokens_reply:
            out = decode_fields<client_tokens_reply>(f, "tokens_reply");
            break;
        default:
            r.fail("kind", "unknown client reply kind " + std::to_string(kind));
    }
    close_message(r, f);
    return out;
}

}  // namespace zmoe
