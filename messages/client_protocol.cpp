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

}  // namespace

std::string encode(const client_generate& m) {
    auto w = start(client_kind::generate, 19);
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
    return w.take();
}

std::string encode(const client_abort& m) {
    auto w = start(client_kind::abort, 1);
    w.str(m.client_request_id);
    return w.take();
}

std::string encode(const client_health& m) {
    auto w = start(client_kind::health, 1);
    w.str(m.tag);
    return w.take();
}

std::string encode(const client_metrics& m) {
    auto w = start(client_kind::metrics, 1);
    w.str(m.tag);
    return w.take();
}

std::string encode(const client_heartbeat&) { return start(client_kind::heartbeat, 0).take(); }

std::string encode(const client_hello& m) {
    auto w = start(client_kind::hello, 1);
    w.str(m.api_key);
    return w.take();
}

std::string encode(const client_delta& m) {
    auto w = start(client_kind::delta, 8, 32 + m.client_request_id.size() + m.text.size() + 5 * m.token_ids.size());
    w.str(m.client_request_id);
    w.int32_array(m.token_ids);
    w.str(m.text);
    w.boolean(m.finished);
    w.str(finish_reason_name(m.reason));
    w.uint(m.prompt_tokens);
    w.uint(m.completion_tokens);
    w.array_header(static_cast<uint32_t>(m.logprobs.size()));
    for (const auto& l : m.logprobs) write_logprobs(w, l);
    return w.take();
}

std::string encode(const client_error& m) {
    auto w = start(client_kind::error, 3);
    w.str(m.client_request_id);
    w.uint(static_cast<uint8_t>(m.code));
    w.str(m.message);
    return w.take();
}

std::string encode(const client_health_reply& m) {
    auto w = start(client_kind::health_reply, 11);
    w.str(m.tag);
    w.str(m.status);
    w.str(m.model);
    w.uint(m.num_workers);
    w.uint(m.num_workers_alive);
    w.uint(m.num_running);
    w.uint(m.num_waiting);
    w.f64(m.uptime_s);
    w.str(m.version);
    w.str(m.detail);
    w.str(m.run_id);
    return w.take();
}

std::string encode(const client_metrics_reply& m) {
    auto w = start(client_kind::metrics_reply, 2, 16 + m.json.size());
    w.str(m.tag);
    w.str(m.json);
    return w.take();
}

std::string encode(const client_tokenize& m) {
    auto w = start(client_kind::tokenize, 4, 32 + m.text.size() + m.chat.size());
    w.str(m.tag);
    w.str(m.text);
    w.str(m.chat);
    w.boolean(m.add_special_tokens);
    return w.take();
}

std::string encode(const client_detokenize& m) {
    auto w = start(client_kind::detokenize, 2, 32 + 5 * m.token_ids.size());
    w.str(m.tag);
    w.int32_array(m.token_ids);
    return w.take();
}

std::string encode(const client_tokens_reply& m) {
    auto w = start(client_kind::tokens_reply, 7, 64 + 5 * m.token_ids.size() + 2 * m.text.size());
    w.str(m.tag);
    w.int32_array(m.token_ids);
    w.str(m.text);
    w.string_array(m.pieces);
    w.uint(m.max_model_len);
    w.uint(static_cast<uint8_t>(m.code));
    w.str(m.message);
    return w.take();
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
            out = std::move(m);
            break;
        }
        case client_kind::abort:
            out = client_abort{f.read_string("abort.client_request_id", kMaxNameBytes)};
            break;
        case client_kind::health:
            out = client_health{f.read_string("health.tag", kMaxNameBytes)};
            break;
        case client_kind::metrics:
            out = client_metrics{f.read_string("metrics.tag", kMaxNameBytes)};
            break;
        case client_kind::heartbeat:
            out = client_heartbeat{};
            break;
        case client_kind::hello:
            out = client_hello{f.read_string("hello.api_key", kMaxNameBytes)};
            break;
        case client_kind::tokenize: {
            client_tokenize m;
            m.tag = f.read_string("tokenize.tag", kMaxNameBytes);
            m.text = f.read_string("tokenize.text", kMaxStringBytes);
            m.chat = f.read_string("tokenize.chat", kMaxStringBytes);
            m.add_special_tokens = f.read_bool("tokenize.add_special_tokens");
            out = std::move(m);
            break;
        }
        case client_kind::detokenize: {
            client_detokenize m;
            m.tag = f.read_string("detokenize.tag", kMaxNameBytes);
            m.token_ids = f.read_int32_array("detokenize.token_ids", kMaxSeqTokens);
            out = std::move(m);
            break;
        }
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
            out = std::move(m);
            break;
        }
        case client_kind::error: {
            client_error m;
            m.client_request_id = f.read_string("error.client_request_id", kMaxNameBytes);
            m.code = static_cast<errc>(f.read_uint("error.code", 255));
            m.message = f.read_string("error.message", kMaxStringBytes);
            out = std::move(m);
            break;
        }
        case client_kind::health_reply: {
            client_health_reply m;
            m.tag = f.read_string("health_reply.tag", kMaxNameBytes);
            m.status = f.read_string("health_reply.status", kMaxNameBytes);
            m.model = f.read_string("health_reply.model", kMaxNameBytes);
            m.num_workers = f.read_uint32("health_reply.num_workers");
            m.num_workers_alive = f.read_uint32("health_reply.num_workers_alive");
            m.num_running = f.read_uint32("health_reply.num_running");
            m.num_waiting = f.read_uint32("health_reply.num_waiting");
            m.uptime_s = f.read_double("health_reply.uptime_s");
            m.version = f.read_string("health_reply.version", kMaxNameBytes);
            m.detail = f.read_string("health_reply.detail", kMaxStringBytes);
            m.run_id = f.read_string("health_reply.run_id", kMaxNameBytes);
            out = std::move(m);
            break;
        }
        case client_kind::metrics_reply: {
            client_metrics_reply m;
            m.tag = f.read_string("metrics_reply.tag", kMaxNameBytes);
            m.json = f.read_string("metrics_reply.json", kMaxStringBytes);
            out = std::move(m);
            break;
        }
        case client_kind::heartbeat:
            out = client_heartbeat{};
            break;
        case client_kind::tokens_reply: {
            client_tokens_reply m;
            m.tag = f.read_string("tokens_reply.tag", kMaxNameBytes);
            m.token_ids = f.read_int32_array("tokens_reply.token_ids", kMaxSeqTokens);
            m.text = f.read_string("tokens_reply.text", kMaxStringBytes);
            m.pieces = f.read_string_array("tokens_reply.pieces", kMaxSeqTokens, kMaxStringBytes);
            m.max_model_len = f.read_uint32("tokens_reply.max_model_len");
            m.code = static_cast<errc>(f.read_uint("tokens_reply.code", 255));
            m.message = f.read_string("tokens_reply.message", kMaxStringBytes);
            out = std::move(m);
            break;
        }
        default:
            r.fail("kind", "unknown client reply kind " + std::to_string(kind));
    }
    close_message(r, f);
    return out;
}

}  // namespace zmoe
