#include "messages/worker_protocol.hpp"

#include "messages/envelope.hpp"
#include "messages/field_list.hpp"
#include "messages/sampling_codec.hpp"

namespace zmoe {

namespace {
constexpr const char* kWhat = "worker protocol";
constexpr uint32_t kMaxSeqsPerStep = uint32_t{1} << 16;
constexpr uint32_t kMaxBlocksPerSeq = uint32_t{1} << 22;
constexpr uint32_t kMaxExpertCounts = uint32_t{1} << 24;
constexpr uint32_t kMaxMoeLayers = 1024;
constexpr uint32_t kMaxPhysicalSlots = uint32_t{1} << 16;
constexpr uint32_t kMaxWorldSize = 4096;
constexpr uint32_t kMaxMoves = uint32_t{1} << 20;

const auto seq_fields = [](auto& io, auto& s) {
    io.field("seq.request_id", s.request_id, as_uint{});
    io.field("seq.token_ids", s.token_ids, as_int32_le{kMaxSeqTokens});
    io.field("seq.start_pos", s.start_pos, as_sint{});
    io.field("seq.block_table", s.block_table, as_int32_le{kMaxBlocksPerSeq});
    io.field("seq.do_sample", s.do_sample, as_bool{});
    io.field("seq.sample_index", s.sample_index, as_uint{});
    io.field("seq.sampling", s.sampling, as_sampling);
    io.field("seq.structured", s.structured, as_structured{});  // appended
    io.field("seq.output_token_ids", s.output_token_ids, as_int32_le{kMaxSeqTokens});
};

const auto token_fields = [](auto& io, auto& t) {
    io.field("token.request_id", t.request_id, as_uint{});
    io.field("token.token_id", t.token_id, as_sint{});
    io.field_if_set("token.logprobs", t.logprobs, as_logprobs);  // appended: only when asked for
};

const auto move_fields = [](auto& io, auto& mv) {
    io.field("move.layer", mv.layer, as_uint{});
    io.field("move.slot", mv.slot, as_uint{});
    io.field("move.logical_expert", mv.logical_expert, as_sint{});
    io.field("move.src_rank", mv.src_rank, as_sint{});
    io.field("move.src_slot", mv.src_slot, as_uint{});
};

/// The engine configuration, as engine_config.hpp encodes it (a record of the flags by name).
struct as_engine_config {
    void write(msgpack_writer& w, const engine_config& c) const { encode_engine_config(w, c); }
    void read(field_cursor& f, const char* name, engine_config& c) const { c = read_engine_config(f, name); }
    size_t hint(const engine_config&) const { return 1024; }
};

}  // namespace

void fields(auto& io, message_of<worker_hello> auto& m) {
    io.field("hello.rank", m.rank, as_sint{});
    io.field("hello.device", m.device, as_str{kMaxNameBytes});
    io.field("hello.free_memory", m.free_memory, as_uint{});
    io.field("hello.protocol_version", m.protocol_version, as_uint{});
    io.field("hello.pid", m.pid, as_sint{});
    io.field("hello.data_endpoint", m.data_endpoint, as_str{kMaxNameBytes});
    io.field("hello.collective_id", m.collective_id, as_bin{1024});
    io.field("hello.auth", m.auth, as_str{kMaxNameBytes});
}

void fields(auto& io, message_of<worker_welcome> auto& m) {
    io.field("welcome.rank", m.rank, as_sint{});
    io.field("welcome.config", m.config, as_engine_config{});
    io.field("welcome.expert_placement", m.expert_placement,
             as_array<as_int32_array>{kMaxMoeLayers, {kMaxPhysicalSlots}});
    io.field("welcome.nccl_unique_id", m.nccl_unique_id, as_bin{4096});
    io.field("welcome.peer_endpoints", m.peer_endpoints, as_string_array{kMaxWorldSize, kMaxNameBytes});
}

void fields(auto& io, message_of<worker_ready> auto& m) {
    io.field("ready.rank", m.rank, as_sint{});
    io.field("ready.num_kv_blocks", m.num_kv_blocks, as_uint{});
    io.field("ready.copy_bandwidth", m.copy_bandwidth, as_f64{});  // appended
}

void fields(auto& io, message_of<step_request> auto& m) {
    io.field("step.step_id", m.step_id, as_uint{});
    io.field("step.seqs", m.seqs, as_records(seq_fields, kMaxSeqsPerStep, "step.seq"));
    io.field("step.finished_ids", m.finished_ids, as_uint64_array{kMaxSeqsPerStep});
    io.field("step.dual_batch", m.dual_batch, as_bool{});
}

void fields(auto& io, message_of<step_result> auto& m) {
    io.field("step_result.step_id", m.step_id, as_uint{});
    io.field("step_result.rank", m.rank, as_sint{});
    io.field("step_result.tokens", m.tokens, as_records(token_fields, kMaxSeqsPerStep, "step_result.token"));
    io.field("step_result.expert_counts", m.expert_counts, as_uint32_le{kMaxExpertCounts});
    io.field("step_result.compute_ms", m.compute_ms, as_f64{});
    io.field("step_result.frames_dropped", m.frames_dropped, as_uint{});                // appended
    io.field("step_result.wait_ms", m.wait_ms, as_f64{});                               // appended
    io.field("step_result.exchange_steps_redone", m.exchange_steps_redone, as_uint{});  // appended
}

void fields(auto&, message_of<worker_heartbeat> auto&) {}
void fields(auto&, message_of<worker_shutdown> auto&) {}

void fields(auto& io, message_of<worker_expert_move> auto& m) {
    io.field("expert_move.move_id", m.move_id, as_uint{});
    io.field("expert_move.apply_at_step", m.apply_at_step, as_uint{});
    io.field("expert_move.moves", m.moves, as_records(move_fields, kMaxMoves, "expert_move.move"));
}

void fields(auto& io, message_of<worker_expert_move_done> auto& m) {
    io.field("expert_move_done.move_id", m.move_id, as_uint{});
    io.field("expert_move_done.rank", m.rank, as_sint{});
    io.field("expert_move_done.bytes_moved", m.bytes_moved, as_uint{});
    io.field("expert_move_done.switched_at_step", m.switched_at_step, as_uint{});
    io.field("expert_move_done.transfer_ms", m.transfer_ms, as_f64{});
    io.field("expert_move_done.transfer_done", m.transfer_done, as_bool{});
    io.field("expert_move_done.switch_ms", m.switch_ms, as_f64{});
    io.field("expert_move_done.install_ms", m.install_ms, as_f64{});
}

void fields(auto& io, message_of<worker_error> auto& m) {
    io.field("error.rank", m.rank, as_sint{});
    io.field("error.code", m.code, as_errc{});
    io.field("error.message", m.message, as_str{kMaxStringBytes});
}

namespace {

template <class M>
std::string encode_worker(worker_kind kind, const M& m) {
    return encode_message(kWorkerProtocolVersion, static_cast<uint8_t>(kind), m);
}

}  // namespace

std::string encode(const worker_hello& m) { return encode_worker(worker_kind::hello, m); }
std::string encode(const worker_welcome& m) { return encode_worker(worker_kind::welcome, m); }
std::string encode(const worker_ready& m) { return encode_worker(worker_kind::ready, m); }
std::string encode(const step_request& m) { return encode_worker(worker_kind::step, m); }
std::string encode(const step_result& m) { return encode_worker(worker_kind::step_result, m); }
std::string encode(const worker_heartbeat& m) { return encode_worker(worker_kind::heartbeat, m); }
std::string encode(const worker_shutdown& m) { return encode_worker(worker_kind::shutdown, m); }
std::string encode(const worker_expert_move& m) { return encode_worker(worker_kind::expert_move, m); }
std::string encode(const worker_expert_move_done& m) { return encode_worker(worker_kind::expert_move_done, m); }
std::string encode(const worker_error& m) { return encode_worker(worker_kind::error, m); }

engine_to_worker decode_engine_to_worker(std::string_view bytes) {
    msgpack_reader r(bytes, kWhat);
    auto [kind, f] = open_message(r, bytes, kWorkerProtocolVersion, kWhat);
    engine_to_worker out;
    switch (static_cast<worker_kind>(kind)) {
        case worker_kind::welcome:
            out = decode_fields<worker_welcome>(f, "welcome");
            break;
        case worker_kind::step:
            out = decode_fields<step_request>(f, "step");
            break;
        case worker_kind::heartbeat:
            out = decode_fields<worker_heartbeat>(f, "heartbeat");
            break;
        case worker_kind::shutdown:
            out = decode_fields<worker_shutdown>(f, "shutdown");
            break;
        case worker_kind::expert_move:
            out = decode_fields<worker_expert_move>(f, "expert_move");
            break;
        default:
            r.fail("kind", "unknown engine-to-worker kind " + std::to_string(kind));
    }
    close_message(r, f);
    return out;
}

worker_to_engine decode_worker_to_engine(std::string_view bytes) {
    msgpack_reader r(bytes, kWhat);
    auto [kind, f] = open_message(r, bytes, kWorkerProtocolVersion, kWhat);
    worker_to_engine out;
    switch (static_cast<worker_kind>(kind)) {
        case worker_kind::hello:
            out = decode_fields<worker_hello>(f, "hello");
            break;
        case worker_kind::ready:
            out = decode_fields<worker_ready>(f, "ready");
            break;
        case worker_kind::step_result:
            out = decode_fields<step_result>(f, "step_result");
            break;
        case worker_kind::heartbeat:
            out = decode_fields<worker_heartbeat>(f, "heartbeat");
            break;
        case worker_kind::expert_move_done:
            out = decode_fields<worker_expert_move_done>(f, "expert_move_done");
            break;
        case worker_kind::error:
            out = decode_fields<worker_error>(f, "error");
            break;
        default:
            r.fail("kind", "unknown worker-to-engine kind " + std::to_string(kind));
    }
    close_message(r, f);
    return out;
}

}  // namespace zmoe
