#include "messages/engine_protocol.hpp"

#include "messages/envelope.hpp"
#include "messages/field_list.hpp"
#include "messages/sampling_codec.hpp"

namespace zmoe {

namespace {
constexpr const char* kWhat = "engine protocol";
constexpr uint32_t kMaxOutputsPerStep = uint32_t{1} << 16;

/// A finish reason as its byte; a reader refuses one it does not know.
struct as_finish_reason {
    void write(msgpack_writer& w, const finish_reason& v) const { w.uint(static_cast<uint8_t>(v)); }
    void read(field_cursor& f, const char* name, finish_reason& v) const {
        msgpack_reader& r = f.next(name);
        auto code = r.read_uint(name, 255);
        if (code > static_cast<uint64_t>(finish_reason::error))
            r.fail(name, "unknown finish reason " + std::to_string(code));
        v = static_cast<finish_reason>(code);
    }
    size_t hint(const finish_reason&) const { return 1; }
};

const auto output_fields = [](auto& io, auto& o) {
    io.field("output.request_id", o.request_id, as_uint{});
    io.field("output.new_token_ids", o.new_token_ids, as_int32_array{kMaxSeqTokens});
    io.field("output.finished", o.finished, as_bool{});
    io.field("output.finish_reason", o.reason, as_finish_reason{});
    io.field("output.error_code", o.error_code, as_errc{});
    io.field("output.error_message", o.error_message, as_str{kMaxStringBytes});
    io.field("output.num_prompt_tokens", o.num_prompt_tokens, as_uint{});
    io.appended(1);
    io.field("output.new_logprobs", o.new_logprobs, as_array<decltype(as_logprobs)>{kMaxSeqTokens, as_logprobs});
    io.appended(1);
    io.field("output.num_cached_tokens", o.num_cached_tokens, as_uint{});
};

}  // namespace

void fields(auto& io, message_of<engine_hello> auto& m) {
    io.field("hello.name", m.name, as_str{kMaxNameBytes});
    io.field("hello.pid", m.pid, as_sint{});
    io.field("hello.auth", m.auth, as_str{kMaxNameBytes});
}

void fields(auto& io, message_of<engine_welcome> auto& m) {
    io.field("welcome.num_workers", m.num_workers, as_uint{});
    io.field("welcome.max_num_seqs", m.max_num_seqs, as_uint{});
    io.field("welcome.max_model_len", m.max_model_len, as_uint{});
    io.field("welcome.block_size", m.block_size, as_uint{});
    io.field("welcome.num_kv_blocks", m.num_kv_blocks, as_uint{});
    io.field("welcome.heartbeat_interval_ms", m.heartbeat_interval_ms, as_uint{});
}

void fields(auto& io, message_of<engine_add_request> auto& m) {
    io.field("add_request.request_id", m.request_id, as_uint{});
    io.field("add_request.prompt_token_ids", m.prompt_token_ids, as_int32_array{kMaxSeqTokens});
    io.field("add_request.sampling", m.sampling, as_sampling);
    io.field("add_request.max_tokens", m.max_tokens, as_uint{});
    io.field("add_request.stop_token_ids", m.stop_token_ids, as_int32_array{4096});
    io.field("add_request.ignore_eos", m.ignore_eos, as_bool{});
    io.field("add_request.cache_salt", m.cache_salt, as_str{kMaxNameBytes});  // appended
    io.field("add_request.structured", m.structured, as_structured{});        // appended
}

void fields(auto& io, message_of<engine_abort> auto& m) { io.field("abort.request_id", m.request_id, as_uint{}); }

void fields(auto& io, message_of<engine_outputs> auto& m) {
    io.field("outputs.step_id", m.step_id, as_uint{});
    io.field("outputs.outputs", m.outputs, as_records(output_fields, kMaxOutputsPerStep, "outputs.output"));
}

void fields(auto& io, message_of<engine_metrics> auto& m) { io.field("metrics.tag", m.tag, as_str{kMaxNameBytes}); }

void fields(auto& io, message_of<engine_metrics_reply> auto& m) {
    io.field("metrics_reply.tag", m.tag, as_str{kMaxNameBytes});
    io.field("metrics_reply.json", m.json, as_str{kMaxStringBytes});
}

void fields(auto&, message_of<engine_heartbeat> auto&) {}
void fields(auto&, message_of<engine_shutdown> auto&) {}

void fields(auto& io, message_of<engine_error> auto& m) {
    io.field("error.code", m.code, as_errc{});
    io.field("error.message", m.message, as_str{kMaxStringBytes});
}

namespace {

template <class M>
std::string encode_engine(engine_kind kind, const M& m) {
    return encode_message(kEngineProtocolVersion, static_cast<uint8_t>(kind), m);
}

}  // namespace

std::string encode(const engine_hello& m) { return encode_engine(engine_kind::hello, m); }
std::string encode(const engine_welcome& m) { return encode_engine(engine_kind::welcome, m); }
std::string encode(const engine_add_request& m) { return encode_engine(engine_kind::add_request, m); }
std::string encode(const engine_abort& m) { return encode_engine(engine_kind::abort, m); }
std::string encode(const engine_outputs& m) { return encode_engine(engine_kind::outputs, m); }
std::string encode(const engine_metrics& m) { return encode_engine(engine_kind::metrics, m); }
std::string encode(const engine_metrics_reply& m) { return encode_engine(engine_kind::metrics_reply, m); }
std::string encode(const engine_heartbeat& m) { return encode_engine(engine_kind::heartbeat, m); }
std::string encode(const engine_shutdown& m) { return encode_engine(engine_kind::shutdown, m); }
std::string encode(const engine_error& m) { return encode_engine(engine_kind::error, m); }

frontend_to_engine decode_frontend_to_engine(std::string_view bytes) {
    msgpack_reader r(bytes, kWhat);
    auto [kind, f] = open_message(r, bytes, kEngineProtocolVersion, kWhat);
    frontend_to_engine out;
    switch (static_cast<engine_kind>(kind)) {
        case engine_kind::hello:
            out = decode_fields<engine_hello>(f, "hello");
            break;
        case engine_kind::add_request:
            out = decode_fields<engine_add_request>(f, "add_request");
            break;
        case engine_kind::abort:
            out = decode_fields<engine_abort>(f, "abort");
            break;
        case engine_kind::metrics:
            out = decode_fields<engine_metrics>(f, "metrics");
            break;
        case engine_kind::heartbeat:
            out = decode_fields<engine_heartbeat>(f, "heartbeat");
            break;
        case engine_kind::shutdown:
            out = decode_fields<engine_shutdown>(f, "shutdown");
            break;
        default:
            r.fail("kind", "unknown frontend-to-engine kind " + std::to_string(kind));
    }
    close_message(r, f);
    return out;
}

engine_to_frontend decode_engine_to_frontend(std::string_view bytes) {
    msgpack_reader r(bytes, kWhat);
    auto [kind, f] = open_message(r, bytes, kEngineProtocolVersion, kWhat);
    engine_to_frontend out;
    switch (static_cast<engine_kind>(kind)) {
        case engine_kind::welcome:
            out = decode_fields<engine_welcome>(f, "welcome");
            break;
        case engine_kind::outputs:
            out = decode_fields<engine_outputs>(f, "outputs");
            break;
        case engine_kind::metrics_reply:
            out = decode_fields<engine_metrics_reply>(f, "metrics_reply");
            break;
        case engine_kind::heartbeat:
            out = decode_fields<engine_heartbeat>(f, "heartbeat");
            break;
        case engine_kind::error:
            out = decode_fields<engine_error>(f, "error");
            break;
        default:
            r.fail("kind", "unknown engine-to-frontend kind " + std::to_string(kind));
    }
    close_message(r, f);
    return out;
}

}  // namespace zmoe
