#include "messages/client_protocol.hpp"

#include "messages/envelope.hpp"
#include "messages/sampling_codec.hpp"

namespace zmoe {

namespace {
constexpr const char* kWhat = "client protocol";

msgpack_writer start(client_kind kind, uint32_t num_fields, size_t reserve = 64) {
    msgpack_writer w(reserve);
    begin_message(w, kClientProtocolVersion, static_cast<uint8_t>(kind), num_fields);
    return w;
}

void write_opt_f32(msgpack_writer& w, const std::optional<float>& v) {
    if (v) {
        w.f32(*v);
    } else {
        w.nil();
    }
}

std::optional<float> read_opt_float(field_cursor& f, const char* field) {
    msgpack_reader& r = f.next(field);
    if (r.try_read_nil()) return std::nullopt;
    return r.read_float(field);
}

// The messages made of plain fields are described once, in wire order, by a `*_fields(io, m)` function that both
// directions run: field_out writes each field, field_in reads it (with the decoder's cap), field_size counts them.
// Names are the decoder's error-message names; the caps matter only when decoding.

struct field_size {
    uint32_t n = 0;
    size_t bytes = 16;
    void operator()(const char*, const std::string& v, size_t = 0) { ++n, bytes += 5 + v.size(); }
    void operator()(const char*, const std::vector<int32_t>& v, uint32_t = 0) { ++n, bytes += 5 + 5 * v.size(); }
    void operator()(const char*, const std::vector<std::string>& v, uint32_t = 0, size_t = 0) {
        ++n, bytes += 5;
        for (const auto& e : v) bytes += 5 + e.size();
    }
    template <class T>
    void operator()(const char*, const T&) {
        ++n, bytes += 9;
    }
};

struct field_out {
    msgpack_writer& w;
    void operator()(const char*, const std::string& v, size_t = 0) { w.str(v); }
    void operator()(const char*, const std::vector<int32_t>& v, uint32_t = 0) { w.int32_array(v); }
    void operator()(const char*, const std::vector<std::string>& v, uint32_t = 0, size_t = 0) { w.string_array(v); }
    void operator()(const char*, bool v) { w.boolean(v); }
    void operator()(const char*, uint32_t v) { w.uint(v); }
    void operator()(const char*, double v) { w.f64(v); }
    void operator()(const char*, errc v) { w.uint(static_cast<uint8_t>(v)); }
};

struct field_in {
    field_cursor& f;
    void operator()(const char* n, std::string& v, size_t max) { v = f.read_string(n, max); }
    void operator()(const char* n, std::vector<int32_t>& v, uint32_t max) { v = f.read_int32_array(n, max); }
    void operator()(const char* n, std::vector<std::string>& v, uint32_t max, size_t max_str) {
        v = f.read_string_array(n, max, max_str);
    }
    void operator()(const char* n, bool& v) { v = f.read_bool(n); }
    void operator()(const char* n, uint32_t& v) { v = f.read_uint32(n); }
    void operator()(const char* n, double& v) { v = f.read_double(n); }
    void operator()(const char* n, errc& v) { v = static_cast<errc>(f.read_uint(n, 255)); }
};

template <class M, class Fields>
std::string encode_fields(client_kind kind, const M& m, Fields fields) {
    field_size size;
    fields(size, m);
    auto w = start(kind, size.n, size.bytes);
    field_out out{w};
    fields(out, m);
    return w.take();
}

template <class M, class Fields>
M decode_fields(field_cursor& f, Fields fields) {
    M m;
    field_in in{f};
    fields(in, m);
    return m;
}

const auto abort_fields = [](auto& io, auto& m) { io("abort.client_request_id", m.client_request_id, kMaxNameBytes); };
const auto health_fields = [](auto& io, auto& m) { io("health.tag", m.tag, kMaxNameBytes); };
const auto metrics_fields = [](auto& io, auto& m) { io("metrics.tag", m.tag, kMaxNameBytes); };
const auto hello_fields = [](auto& io, auto& m) { io("hello.api_key", m.api_key, kMaxNameBytes); };

const auto tokenize_fields = [](auto& io, auto& m) {
    io("tokenize.tag", m.tag, kMaxNameBytes);
    io("tokenize.text", m.text, kMaxStringBytes);
    io("tokenize.chat", m.chat, kMaxStringBytes);
    io("tokenize.add_special_tokens", m.add_special_tokens);
};

const auto detokenize_fields = [](auto& io, auto& m) {
    io("detokenize.tag", m.tag, kMaxNameBytes);
    io("detokenize.token_ids", m.token_ids, kMaxSeqTokens);
};

const auto error_fields = [](auto& io, auto& m) {
    io("error.client_request_id", m.client_request_id, kMaxNameBytes);
    io("error.code", m.code);
    io("error.message", m.message, kMaxStringBytes);
};

const auto health_reply_fields = [](auto& io, auto& m) {
    io("health_reply.tag", m.tag, kMaxNameBytes);
    io("health_reply.status", m.status, kMaxNameBytes);
    io("health_reply.model", m.model, kMaxNameBytes);
    io("health_reply.num_workers", m.num_workers);
    io("health_reply.num_workers_alive", m.num_workers_alive);
    io("health_reply.num_running", m.num_running);
    io("health_reply.num_waiting", m.num_waiting);
    io("health_reply.uptime_s", m.uptime_s);
    io("health_reply.version", m.version, kMaxNameBytes);
    io("health_reply.detail", m.detail, kMaxStringBytes);
    io("health_reply.run_id", m.run_id, kMaxNameBytes);
};

const auto metrics_reply_fields = [](auto& io, auto& m) {
    io("metrics_reply.tag", m.tag, kMaxNameBytes);
    io("metrics_reply.json", m.json, kMaxStringBytes);
};

const auto tokens_reply_fields = [](auto& io, auto& m) {
    io("tokens_reply.tag", m.tag, kMaxNameBytes);
    io("tokens_reply.token_ids", m.token_ids, kMaxSeqTokens);
    io("tokens_reply.text", m.text, kMaxStringBytes);
    io("tokens_reply.pieces", m.pieces, kMaxSeqTokens, kMaxStringBytes);
    io("tokens_reply.max_model_len", m.max_model_len);
    io("tokens_reply.code", m.code);
    io("tokens_reply.message", m.message, kMaxStringBytes);
};

}  // namespace

std::string encode(const client_generate& m) {
    auto w = start(client_kind::generate, 20);
    w.str(m.client_request_id);
    if (const auto* text = std::get_if<std::string>(&m.prompt)) {
        w.str(*text);
    } else {
        w.int32_array(std::get<std::vector<int32_t>>(m.prompt));
    }
    w.uint(m.max_tokens);
    write_opt_f32(w, m.temperature);
    write_opt_f32(w, m.top_p);
    if (m.top_k) {
        w.sint(*m.top_k);
    } else {
        w.nil();
    }
    if (m.seed) {
        w.uint(*m.seed);
    } else {
        w.nil();
    }
    w.string_array(m.stop);
    w.boolean(m.ignore_eos);
    w.boolean(m.stream);
    w.str(m.chat);
    w.int32_array(m.stop_token_ids);
    if (m.logprobs) {
        w.uint(*m.logprobs);
    } else {
        w.nil();
    }
    w.f32(m.presence_penalty);
    w.f32(m.frequency_penalty);
    write_opt_f32(w, m.repetition_penalty);
    write_opt_f32(w, m.min_p);
    w.array_header(static_cast<uint32_t>(m.logit_bias.size()));
    for (const auto& [id, bias] : m.logit_bias) {
        w.array_header(2);
        w.sint(id);
        w.f32(bias);
    }
    w.uint(m.min_tokens);
    w.uint(m.n);
    return w.take();
}

std::string encode(const client_abort& m) { return encode_fields(client_kind::abort, m, abort_fields); }

std::string encode(const client_health& m) { return encode_fields(client_kind::health, m, health_fields); }

std::string encode(const client_metrics& m) { return encode_fields(client_kind::metrics, m, metrics_fields); }

std::string encode(const client_heartbeat&) { return start(client_kind::heartbeat, 0).take(); }

std::string encode(const client_hello& m) { return encode_fields(client_kind::hello, m, hello_fields); }

std::string encode(const client_delta& m) {
    auto w = start(client_kind::delta, 9, 32 + m.client_request_id.size() + m.text.size() + 5 * m.token_ids.size());
    w.str(m.client_request_id);
    w.int32_array(m.token_ids);
    w.str(m.text);
    w.boolean(m.finished);
    w.str(finish_reason_name(m.reason));
    w.uint(m.prompt_tokens);
    w.uint(m.completion_tokens);
    w.array_header(static_cast<uint32_t>(m.logprobs.size()));
    for (const auto& l : m.logprobs) write_logprobs(w, l);
    w.uint(m.index);
    return w.take();
}

std::string encode(const client_error& m) { return encode_fields(client_kind::error, m, error_fields); }

std::string encode(const client_health_reply& m) {
    return encode_fields(client_kind::health_reply, m, health_reply_fields);
}

std::string encode(const client_metrics_reply& m) {
    return encode_fields(client_kind::metrics_reply, m, metrics_reply_fields);
}

std::string encode(const client_tokenize& m) { return encode_fields(client_kind::tokenize, m, tokenize_fields); }

std::string encode(const client_detokenize& m) { return encode_fields(client_kind::detokenize, m, detokenize_fields); }

std::string encode(const client_tokens_reply& m) {
    return encode_fields(client_kind::tokens_reply, m, tokens_reply_fields);
}

client_request decode_client_request(std::string_view bytes) {
    msgpack_reader r(bytes, kWhat);
    auto [kind, f] = open_message(r, bytes, kClientProtocolVersion, kWhat);
    client_request out;
    switch (static_cast<client_kind>(kind)) {
        case client_kind::generate: {
            client_generate m;
            m.client_request_id = f.read_string("generate.client_request_id", kMaxNameBytes);
            msgpack_reader& p = f.next("generate.prompt");
            if (p.peek("generate.prompt") == msgpack_type::array) {
                uint32_t n = p.read_array_header(kMaxSeqTokens, "generate.prompt");
                std::vector<int32_t> ids(n);
                for (auto& id : ids) id = p.read_int32("generate.prompt");
                m.prompt = std::move(ids);
            } else {
                m.prompt = std::string(p.read_str("generate.prompt", kMaxStringBytes));
            }
            m.max_tokens = f.read_uint32("generate.max_tokens");
            m.temperature = read_opt_float(f, "generate.temperature");
            m.top_p = read_opt_float(f, "generate.top_p");
            msgpack_reader& k = f.next("generate.top_k");
            if (!k.try_read_nil()) m.top_k = k.read_int32("generate.top_k");
            msgpack_reader& s = f.next("generate.seed");
            if (!s.try_read_nil()) m.seed = s.read_uint("generate.seed");
            m.stop = f.read_string_array("generate.stop", kMaxStopStrings, kMaxNameBytes);
            m.ignore_eos = f.read_bool("generate.ignore_eos");
            m.stream = f.read_bool("generate.stream");
            m.chat = f.read_string("generate.chat", kMaxStringBytes);
            {  // appended: the sampling parameters
                m.stop_token_ids = f.read_int32_array("generate.stop_token_ids", kMaxStopTokenIds);
                msgpack_reader& l = f.next("generate.logprobs");
                if (!l.try_read_nil()) m.logprobs = l.read_uint32("generate.logprobs");
                m.presence_penalty = f.read_float("generate.presence_penalty");
                m.frequency_penalty = f.read_float("generate.frequency_penalty");
                m.repetition_penalty = read_opt_float(f, "generate.repetition_penalty");
                m.min_p = read_opt_float(f, "generate.min_p");
                msgpack_reader& b = f.next("generate.logit_bias");
                m.logit_bias.resize(b.read_array_header(kMaxLogitBias, "generate.logit_bias"));
                for (auto& [id, bias] : m.logit_bias) {
                    field_cursor pair(r, r.read_array_header(kMaxMessageFields, "generate.logit_bias"));
                    id = pair.read_int32("generate.logit_bias.id");
                    bias = pair.read_float("generate.logit_bias.bias");
                    pair.finish();
                }
                m.min_tokens = f.read_uint32("generate.min_tokens");
            }
            m.n = f.read_uint32("generate.n");  // appended
            out = std::move(m);
            break;
        }
        case client_kind::abort:
            out = decode_fields<client_abort>(f, abort_fields);
            break;
        case client_kind::health:
            out = decode_fields<client_health>(f, health_fields);
            break;
        case client_kind::metrics:
            out = decode_fields<client_metrics>(f, metrics_fields);
            break;
        case client_kind::heartbeat:
            out = client_heartbeat{};
            break;
        case client_kind::hello:
            out = decode_fields<client_hello>(f, hello_fields);
            break;
        case client_kind::tokenize:
            out = decode_fields<client_tokenize>(f, tokenize_fields);
            break;
        case client_kind::detokenize:
            out = decode_fields<client_detokenize>(f, detokenize_fields);
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
        case client_kind::delta: {
            client_delta m;
            m.client_request_id = f.read_string("delta.client_request_id", kMaxNameBytes);
            m.token_ids = f.read_int32_array("delta.token_ids", kMaxSeqTokens);
            m.text = f.read_string("delta.text", kMaxStringBytes);
            m.finished = f.read_bool("delta.finished");
            std::string_view reason = f.next("delta.finish_reason").read_str("delta.finish_reason", 64);
            auto parsed = finish_reason_from_name(reason);
            if (!parsed) r.fail("delta.finish_reason", "unknown finish reason '" + std::string(reason) + "'");
            m.reason = *parsed;
            m.prompt_tokens = f.read_uint32("delta.prompt_tokens");
            m.completion_tokens = f.read_uint32("delta.completion_tokens");
            {  // appended
                m.logprobs.resize(f.next("delta.logprobs").read_array_header(kMaxSeqTokens, "delta.logprobs"));
                for (auto& l : m.logprobs) {
                    field_cursor one(r, 1);
                    l = read_logprobs(one, "delta.logprobs");
                }
            }
            m.index = f.read_uint32("delta.index");  // appended
            out = std::move(m);
            break;
        }
        case client_kind::error:
            out = decode_fields<client_error>(f, error_fields);
            break;
        case client_kind::health_reply:
            out = decode_fields<client_health_reply>(f, health_reply_fields);
            break;
        case client_kind::metrics_reply:
            out = decode_fields<client_metrics_reply>(f, metrics_reply_fields);
            break;
        case client_kind::heartbeat:
            out = client_heartbeat{};
            break;
        case client_kind::tokens_reply:
            out = decode_fields<client_tokens_reply>(f, tokens_reply_fields);
            break;
        default:
            r.fail("kind", "unknown client reply kind " + std::to_string(kind));
    }
    close_message(r, f);
    return out;
}

}  // namespace zmoe
