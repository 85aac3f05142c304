#include "messages/worker_protocol.hpp"

#include "messages/envelope.hpp"
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

msgpack_writer start(worker_kind kind, uint32_t num_fields, size_t reserve = 64) {
    msgpack_writer w(reserve);
    begin_message(w, kWorkerProtocolVersion, static_cast<uint8_t>(kind), num_fields);
    return w;
}

step_request read_step(field_cursor& f, msgpack_reader& r) {
    step_request m;
    m.step_id = f.read_uint("step.step_id");
    uint32_t n = f.next("step.seqs").read_array_header(kMaxSeqsPerStep, "step.seqs");
    m.seqs.resize(n);
    for (auto& s : m.seqs) {
        uint32_t num_fields = r.read_array_header(kMaxMessageFields, "step.seq");
        field_cursor g(r, num_fields);
        s.request_id = g.read_uint("seq.request_id");
        s.token_ids = g.read_int32_le("seq.token_ids", kMaxSeqTokens);
        s.start_pos = g.read_int32("seq.start_pos");
        s.block_table = g.read_int32_le("seq.block_table", kMaxBlocksPerSeq);
        s.do_sample = g.read_bool("seq.do_sample");
        s.sample_index = g.read_uint32("seq.sample_index");
        s.sampling = read_sampling(g, "seq.sampling");
        g.finish();
    }
    auto ids = f.read_uint64_array("step.finished_ids", kMaxSeqsPerStep);
    m.finished_ids.assign(ids.begin(), ids.end());
    m.dual_batch = f.read_bool("step.dual_batch");
    return m;
}

step_result read_step_result(field_cursor& f, msgpack_reader& r) {
    step_result m;
    m.step_id = f.read_uint("step_result.step_id");
    m.rank = f.read_int32("step_result.rank");
    uint32_t n = f.next("step_result.tokens").read_array_header(kMaxSeqsPerStep, "step_result.tokens");
    m.tokens.resize(n);
    for (auto& t : m.tokens) {
        field_cursor g(r, r.read_array_header(kMaxMessageFields, "step_result.token"));
        t.request_id = g.read_uint("token.request_id");
        t.token_id = g.read_int32("token.token_id");
        if (g.left() > 0) t.logprobs = read_logprobs(g, "token.logprobs");  // appended: only when asked for
        g.finish();
    }
    m.expert_counts = f.read_uint32_le("step_result.expert_counts", kMaxExpertCounts);
    m.compute_ms = f.read_double("step_result.compute_ms");
    m.frames_dropped = f.read_uint("step_result.frames_dropped");                // appended
    m.wait_ms = f.read_double("step_result.wait_ms");                            // appended
    m.exchange_steps_redone = f.read_uint("step_result.exchange_steps_redone");  // appended
    return m;
}
}  // namespace

std::string encode(const worker_hello& m) {
    auto w = start(worker_kind::hello, 8);
    w.sint(m.rank);
    w.str(m.device);
    w.uint(m.free_memory);
    w.uint(m.protocol_version);
    w.sint(m.pid);
    w.str(m.data_endpoint);
    w.bin(m.collective_id);
    w.str(m.auth);
    return w.take();
}

std::string encode(const worker_welcome& m) {
    size_t reserve = 1024 + m.nccl_unique_id.size();
    for (const auto& layer : m.expert_placement) reserve += 8 + 5 * layer.size();
    auto w = start(worker_kind::welcome, 5, reserve);
    w.sint(m.rank);
    encode_engine_config(w, m.config);
    w.array_header(static_cast<uint32_t>(m.expert_placement.size()));
    for (const auto& layer : m.expert_placement) w.int32_array(layer);
    w.bin(m.nccl_unique_id);
    w.string_array(m.peer_endpoints);
    return w.take();
}

std::string encode(const worker_ready& m) {
    auto w = start(worker_kind::ready, 3);
    w.sint(m.rank);
    w.uint(m.num_kv_blocks);
    w.f64(m.copy_bandwidth);
    return w.take();
}

std::string encode(const step_request& m) {
    size_t reserve = 32 + 9 * m.finished_ids.size();
    for (const auto& s : m.seqs) reserve += 48 + 4 * (s.token_ids.size() + s.block_table.size());
    auto w = start(worker_kind::step, 4, reserve);
    w.uint(m.step_id);
    w.array_header(static_cast<uint32_t>(m.seqs.size()));
    for (const auto& s : m.seqs) {
        w.array_header(7);
        w.uint(s.request_id);
        w.int32_le(s.token_ids);
        w.sint(s.start_pos);
        w.int32_le(s.block_table);
        w.boolean(s.do_sample);
        w.uint(s.sample_index);
        write_sampling(w, s.sampling);
    }
    w.uint64_array(m.finished_ids);
    w.boolean(m.dual_batch);
    return w.take();
}

std::string encode(const step_result& m) {
    auto w = start(worker_kind::step_result, 8, 64 + 16 * m.tokens.size() + 4 * m.expert_counts.size());
    w.uint(m.step_id);
    w.sint(m.rank);
    w.array_header(static_cast<uint32_t>(m.tokens.size()));
    for (const auto& t : m.tokens) {
        w.array_header(t.logprobs ? 3 : 2);
        w.uint(t.request_id);
        w.sint(t.token_id);
        if (t.logprobs) write_logprobs(w, *t.logprobs);
    }
    w.uint32_le(m.expert_counts);
    w.f64(m.compute_ms);
    w.uint(m.frames_dropped);
    w.f64(m.wait_ms);
    w.uint(m.exchange_steps_redone);
    return w.take();
}

std::string encode(const worker_heartbeat&) { return start(worker_kind::heartbeat, 0).take(); }
std::string encode(const worker_shutdown&) { return start(worker_kind::shutdown, 0).take(); }

std::string encode(const worker_expert_move& m) {
    auto w = start(worker_kind::expert_move, 3, 32 + 16 * m.moves.size());
    w.uint(m.move_id);
    w.uint(m.apply_at_step);
    w.array_header(static_cast<uint32_t>(m.moves.size()));
    for (const auto& mv : m.moves) {
        w.array_header(5);
        w.uint(mv.layer);
        w.uint(mv.slot);
        w.sint(mv.logical_expert);
        w.sint(mv.src_rank);
        w.uint(mv.src_slot);
    }
    return w.take();
}

std::string encode(const worker_expert_move_done& m) {
    auto w = start(worker_kind::expert_move_done, 8);
    w.uint(m.move_id);
    w.sint(m.rank);
    w.uint(m.bytes_moved);
    w.uint(m.switched_at_step);
    w.f64(m.transfer_ms);
    w.boolean(m.transfer_done);
    w.f64(m.switch_ms);
    w.f64(m.install_ms);
    return w.take();
}

std::string encode(const worker_error& m) {
    auto w = start(worker_kind::error, 3);
    w.sint(m.rank);
    w.uint(static_cast<uint8_t>(m.code));
    w.str(m.message);
    return w.take();
}

engine_to_worker decode_engine_to_worker(std::string_view bytes) {
    msgpack_reader r(bytes, kWhat);
    auto [kind, f] = open_message(r, bytes, kWorkerProtocolVersion, kWhat);
    engine_to_worker out;
    switch (static_cast<worker_kind>(kind)) {
        case worker_kind::welcome: {
            worker_welcome m;
            m.rank = f.read_int32("welcome.rank");
            m.config = read_engine_config(f, "welcome.config");
            uint32_t num_layers =
                f.next("welcome.expert_placement").read_array_header(kMaxMoeLayers, "welcome.expert_placement");
            m.expert_placement.resize(num_layers);
            for (auto& layer : m.expert_placement) {
                field_cursor one(r, 1);  // each layer is one array value
                layer = one.read_int32_array("welcome.expert_placement", kMaxPhysicalSlots);
            }
            m.nccl_unique_id = f.read_bin_string("welcome.nccl_unique_id", 4096);
            m.peer_endpoints = f.read_string_array("welcome.peer_endpoints", kMaxWorldSize, kMaxNameBytes);
            out = std::move(m);
            break;
        }
        case worker_kind::step:
            out = read_step(f, r);
            break;
        case worker_kind::heartbeat:
            out = worker_heartbeat{};
            break;
        case worker_kind::shutdown:
            out = worker_shutdown{};
            break;
        case worker_kind::expert_move: {
            worker_expert_move m;
            m.move_id = f.read_uint("expert_move.move_id");
            m.apply_at_step = f.read_uint("expert_move.apply_at_step");
            uint32_t n = f.next("expert_move.moves").read_array_header(kMaxMoves, "expert_move.moves");
            m.moves.resize(n);
            for (auto& mv : m.moves) {
                field_cursor g(r, r.read_array_header(kMaxMessageFields, "expert_move.move"));
                mv.layer = g.read_uint32("move.layer");
                mv.slot = g.read_uint32("move.slot");
                mv.logical_expert = g.read_int32("move.logical_expert");
                mv.src_rank = g.read_int32("move.src_rank");
                mv.src_slot = g.read_uint32("move.src_slot");
                g.finish();
            }
            out = std::move(m);
            break;
        }
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
        case worker_kind::hello: {
            worker_hello m;
            m.rank = f.read_int32("hello.rank");
            m.device = f.read_string("hello.device", kMaxNameBytes);
            m.free_memory = f.read_uint("hello.free_memory");
            m.protocol_version = f.read_uint32("hello.protocol_version");
            m.pid = f.read_int("hello.pid");
            m.data_endpoint = f.read_string("hello.data_endpoint", kMaxNameBytes);
            m.collective_id = f.read_bin_string("hello.collective_id", 1024);
            m.auth = f.read_string("hello.auth", kMaxNameBytes);
            out = std::move(m);
            break;
        }
        case worker_kind::ready: {
            worker_ready m;
            m.rank = f.read_int32("ready.rank");
            m.num_kv_blocks = f.read_uint("ready.num_kv_blocks");
            m.copy_bandwidth = f.read_double("ready.copy_bandwidth");  // appended
            out = std::move(m);
            break;
        }
        case worker_kind::step_result:
            out = read_step_result(f, r);
            break;
        case worker_kind::heartbeat:
            out = worker_heartbeat{};
            break;
        case worker_kind::expert_move_done: {
            worker_expert_move_done m;
            m.move_id = f.read_uint("expert_move_done.move_id");
            m.rank = f.read_int32("expert_move_done.rank");
            m.bytes_moved = f.read_uint("expert_move_done.bytes_moved");
            m.switched_at_step = f.read_uint("expert_move_done.switched_at_step");
            m.transfer_ms = f.read_double("expert_move_done.transfer_ms");
            m.transfer_done = f.read_bool("expert_move_done.transfer_done");
            m.switch_ms = f.read_double("expert_move_done.switch_ms");
            m.install_ms = f.read_double("expert_move_done.install_ms");
            out = m;
            break;
        }
        case worker_kind::error: {
            worker_error m;
            m.rank = f.read_int32("error.rank");
            m.code = static_cast<errc>(f.read_uint("error.code", 255));
            m.message = f.read_string("error.message", kMaxStringBytes);
            out = std::move(m);
            break;
        }
        default:
            r.fail("kind", "unknown worker-to-engine kind " + std::to_string(kind));
    }
    close_message(r, f);
    return out;
}

}  // namespace zmoe
