#include "messages/engine_protocol.hpp"

#include "messages/envelope.hpp"
#include "messages/sampling_codec.hpp"

namespace zmoe {

namespace {
constexpr const char* kWhat = "engine protocol";
constexpr uint32_t kMaxOutputsPerStep = uint32_t{1} << 16;

msgpack_writer start(engine_kind kind, uint32_t num_fields, size_t reserve = 64) {
    msgpack_writer w(reserve);
    begin_message(w, kEngineProtocolVersion, static_cast<uint8_t>(kind), num_fields);
    return w;
}

finish_reason read_finish_reason(field_cursor& f, const char* field) {
    msgpack_reader& r = f.next(field);
    auto v = r.read_uint(field, 255);
    if (v > static_cast<uint64_t>(finish_reason::error)) r.fail(field, "unknown finish reason " + std::to_string(v));
    return static_cast<finish_reason>(v);
}
}  // namespace

std::string encode(const engine_hello& m) {
    auto w = start(engine_kind::hello, 3);
    w.str(m.name);
    w.sint(m.pid);
    w.str(m.auth);
    return w.take();
}

std::string encode(const engine_welcome& m) {
    auto w = start(engine_kind::welcome, 6);
    w.uint(m.num_workers);
    w.uint(m.max_num_seqs);
    w.uint(m.max_model_len);
    w.uint(m.block_size);
    w.uint(m.num_kv_blocks);
    w.uint(m.heartbeat_interval_ms);
    return w.take();
}

std::string encode(const engine_add_request& m) {
    auto w = start(engine_kind::add_request, 6, 64 + 5 * (m.prompt_token_ids.size() + m.stop_token_ids.size()));
    w.uint(m.request_id);
    w.int32_array(m.prompt_token_ids);
    write_sampling(w, m.sampling);
    w.uint(m.max_tokens);
    w.int32_array(m.stop_token_ids);
    w.boolean(m.ignore_eos);
    return w.take();
}

std::string encode(const engine_abort& m) {
    auto w = start(engine_kind::abort, 1);
    w.uint(m.request_id);
    return w.take();
}

std::string encode(const engine_outputs& m) {
    auto w = start(engine_kind::outputs, 2, 32 + 24 * m.outputs.size());
    w.uint(m.step_id);
    w.array_header(static_cast<uint32_t>(m.outputs.size()));
    for (const auto& o : m.outputs) {
        w.array_header(8);
        w.uint(o.request_id);
        w.int32_array(o.new_token_ids);
        w.boolean(o.finished);
        w.uint(static_cast<uint8_t>(o.reason));
        w.uint(static_cast<uint8_t>(o.error_code));
        w.str(o.error_message);
        w.uint(o.num_prompt_tokens);
        w.array_header(static_cast<uint32_t>(o.new_logprobs.size()));
        for (const auto& l : o.new_logprobs) write_logprobs(w, l);
    }
    return w.take();
}

std::string encode(const engine_metrics& m) {
    auto w = start(engine_kind::metrics, 1);
    w.str(m.tag);
    return w.take();
}

std::string encode(const engine_metrics_reply& m) {
    auto w = start(engine_kind::metrics_reply, 2, 16 + m.json.size());
    w.str(m.tag);
    w.str(m.json);
    return w.take();
}

std::string encode(const engine_heartbeat&) { return start(engine_kind::heartbeat, 0).take(); }
std::string encode(const engine_shutdown&) { return start(engine_kind::shutdown, 0).take(); }

std::string encode(const engine_error& m) {
    auto w = start(engine_kind::error, 2);
    w.uint(static_cast<uint8_t>(m.code));
    w.str(m.message);
    return w.take();
}

frontend_to_engine decode_frontend_to_engine(std::string_view bytes) {
    msgpack_reader r(bytes, kWhat);
    auto [kind, f] = open_message(r, bytes, kEngineProtocolVersion, kWhat);
    frontend_to_engine out;
    switch (static_cast<engine_kind>(kind)) {
        case engine_kind::hello: {
            engine_hello m;
            m.name = f.read_string("hello.name", kMaxNameBytes);
            m.pid = f.read_int("hello.pid");
            m.auth = f.read_string("hello.auth", kMaxNameBytes);
            out = std::move(m);
            break;
        }
        case engine_kind::add_request: {
            engine_add_request m;
            m.request_id = f.read_uint("add_request.request_id");
            m.prompt_token_ids = f.read_int32_array("add_request.prompt_token_ids", kMaxSeqTokens);
            m.sampling = read_sampling(f, "add_request.sampling");
            m.max_tokens = f.read_uint32("add_request.max_tokens");
            m.stop_token_ids = f.read_int32_array("add_request.stop_token_ids", 4096);
            m.ignore_eos = f.read_bool("add_request.ignore_eos");
            out = std::move(m);
            break;
        }
        case engine_kind::abort:
            out = engine_abort{f.read_uint("abort.request_id")};
            break;
        case engine_kind::metrics:
            out = engine_metrics{f.read_string("metrics.tag", kMaxNameBytes)};
            break;
        case engine_kind::heartbeat:
            out = engine_heartbeat{};
            break;
        case engine_kind::shutdown:
            out = engine_shutdown{};
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
        case engine_kind::welcome: {
            engine_welcome m;
            m.num_workers = f.read_uint32("welcome.num_workers");
            m.max_num_seqs = f.read_uint32("welcome.max_num_seqs");
            m.max_model_len = f.read_uint32("welcome.max_model_len");
            m.block_size = f.read_uint32("welcome.block_size");
            m.num_kv_blocks = f.read_uint("welcome.num_kv_blocks");
            m.heartbeat_interval_ms = f.read_uint32("welcome.heartbeat_interval_ms");
            out = std::move(m);
            break;
        }
        case engine_kind::outputs: {
            engine_outputs m;
            m.step_id = f.read_uint("outputs.step_id");
            uint32_t n = f.next("outputs.outputs").read_array_header(kMaxOutputsPerStep, "outputs.outputs");
            m.outputs.resize(n);
            for (auto& o : m.outputs) {
                field_cursor g(r, r.read_array_header(kMaxMessageFields, "outputs.output"));
                o.request_id = g.read_uint("output.request_id");
                o.new_token_ids = g.read_int32_array("output.new_token_ids", kMaxSeqTokens);
                o.finished = g.read_bool("output.finished");
                o.reason = read_finish_reason(g, "output.finish_reason");
                o.error_code = static_cast<errc>(g.read_uint("output.error_code", 255));
                o.error_message = g.read_string("output.error_message", kMaxStringBytes);
                o.num_prompt_tokens = g.read_uint32("output.num_prompt_tokens");
                if (g.left() > 0) {  // appended
                    o.new_logprobs.resize(
                        g.next("output.new_logprobs").read_array_header(kMaxSeqTokens, "output.new_logprobs"));
                    for (auto& l : o.new_logprobs) {
                        field_cursor one(r, 1);
                        l = read_logprobs(one, "output.new_logprobs");
                    }
                }
                g.finish();
            }
            out = std::move(m);
            break;
        }
        case engine_kind::metrics_reply: {
            engine_metrics_reply m;
            m.tag = f.read_string("metrics_reply.tag", kMaxNameBytes);
            m.json = f.read_string("metrics_reply.json", kMaxStringBytes);
            out = std::move(m);
            break;
        }
        case engine_kind::heartbeat:
            out = engine_heartbeat{};
            break;
        case engine_kind::error: {
            engine_error m;
            m.code = static_cast<errc>(f.read_uint("error.code", 255));
            m.message = f.read_string("error.message", kMaxStringBytes);
            out = std::move(m);
            break;
        }
        default:
            r.fail("kind", "unknown engine-to-frontend kind " + std::to_string(kind));
    }
    close_message(r, f);
    return out;
}

}  // namespace zmoe
