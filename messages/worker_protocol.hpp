#pragma once
// Engine core <-> worker protocol. Each worker connects a DEALER to the engine core's ROUTER and sends hello;
// the engine core answers welcome with the run's configuration; the worker loads its weights, sizes its KV cache
// and sends ready. Then the engine core sends every worker one step per engine step (empty ones included: the
// MoE all-to-all is a collective) and each worker answers one step_result per step, in step order.
//
//   engine core -> worker: welcome, step, heartbeat, shutdown, expert_move
//   worker -> engine core: hello, ready, step_result, heartbeat, expert_move_done, error
//
// step and step_result are on the hot path: their int vectors travel as packed little-endian bins.

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/error.hpp"
#include "messages/engine_config.hpp"
#include "messages/step_types.hpp"

namespace zmoe {

constexpr uint32_t kWorkerProtocolVersion = 2;

enum class worker_kind : uint8_t {
    hello = 1,
    welcome = 2,
    ready = 3,
    step = 4,
    step_result = 5,
    heartbeat = 6,  ///< both directions
    shutdown = 7,
    expert_move = 8,
    expert_move_done = 9,
    error = 10,
};

struct worker_hello {
    int32_t rank = 0;
    std::string device;        ///< "cpu" or "cuda:<ordinal>"
    uint64_t free_memory = 0;  ///< bytes free on the device (host memory for cpu)
    uint32_t protocol_version = kWorkerProtocolVersion;
    int64_t pid = 0;
    /// Where this worker accepts traffic from its peers (the CPU all-to-all); empty when it needs none.
    std::string data_endpoint;
    /// Rank 0 of a CUDA run: the NCCL unique id (raw bytes) the engine core hands every rank; empty otherwise.
    std::string collective_id;
    /// Appended: the run's secret (ZMOE_RUN_SECRET); the engine core refuses a hello without it.
    std::string auth;
    bool operator==(const worker_hello&) const = default;
};

/// The run's configuration for one rank: every engine flag as the engine core parsed it, the expert placement
/// the engine core decided, and how to reach the other ranks.
struct worker_welcome {
    int32_t rank = 0;
    engine_config config;  ///< config.workers is the world size
    /// [num_moe_layers][num_physical_slots]: logical expert held by each physical slot. Slots are split evenly
    /// and contiguously across ranks (rank r holds slots [r*n/world_size, (r+1)*n/world_size)). Empty only for a
    /// model without MoE layers.
    std::vector<std::vector<int32_t>> expert_placement;
    std::string nccl_unique_id;               ///< raw bytes of ncclUniqueId; empty when not using NCCL
    std::vector<std::string> peer_endpoints;  ///< every rank's data_endpoint, by rank
    bool operator==(const worker_welcome&) const = default;
};

struct worker_ready {
    int32_t rank = 0;
    uint64_t num_kv_blocks = 0;  ///< KV blocks this worker allocated
    /// Appended: bytes per second one copy within this worker's device moves (read + write), measured at start-up;
    /// the engine core computes the steps' memory floor against it. 0 = not measured.
    double copy_bandwidth = 0.0;
    bool operator==(const worker_ready&) const = default;
};

struct worker_heartbeat {
    bool operator==(const worker_heartbeat&) const = default;
};
struct worker_shutdown {
    bool operator==(const worker_shutdown&) const = default;
};

/// One physical slot's new content: copy logical expert `logical_expert`'s weights from (src_rank, src_slot).
struct expert_slot_move {
    uint32_t layer = 0;
    uint32_t slot = 0;  ///< global physical slot index
    int32_t logical_expert = 0;
    int32_t src_rank = 0;
    uint32_t src_slot = 0;
    bool operator==(const expert_slot_move&) const = default;
};

/// An EPLB rebalance: every rank takes part (as source and/or destination). A worker stages it when the message
/// arrives (between the same two steps on every rank: the engine core sends it in step order), and switches to the
/// new placement before running the first step whose id is at least apply_at_step.
struct worker_expert_move {
    uint64_t move_id = 0;
    uint64_t apply_at_step = 0;
    std::vector<expert_slot_move> moves;
    bool operator==(const worker_expert_move&) const = default;
};

struct worker_expert_move_done {
    uint64_t move_id = 0;
    int32_t rank = 0;
    uint64_t bytes_moved = 0;       ///< expert weight bytes this rank received
    uint64_t switched_at_step = 0;  ///< the step the new placement first served
    double transfer_ms = 0;         ///< expert_move_stats: the transfer's own time
    bool transfer_done = true;      ///< the transfer had finished at the switch
    double switch_ms = 0;           ///< host time of the switch
    double install_ms = 0;          ///< CUDA: device time of the staging -> slot copies
    bool operator==(const worker_expert_move_done&) const = default;
};

/// A fatal worker failure (weights could not be loaded, device lost).
struct worker_error {
    int32_t rank = 0;
    errc code = errc::internal;
    std::string message;
    bool operator==(const worker_error&) const = default;
};

using engine_to_worker =
    std::variant<worker_welcome, step_request, worker_heartbeat, worker_shutdown, worker_expert_move>;
using worker_to_engine =
    std::variant<worker_hello, worker_ready, step_result, worker_heartbeat, worker_expert_move_done, worker_error>;

std::string encode(const worker_hello& m);
std::string encode(const worker_welcome& m);
std::string encode(const worker_ready& m);
std::string encode(const step_request& m);
std::string encode(const step_result& m);
std::string encode(const worker_heartbeat& m);
std::string encode(const worker_shutdown& m);
std::string encode(const worker_expert_move& m);
std::string encode(const worker_expert_move_done& m);
std::string encode(const worker_error& m);

/// Throw zmoe::error(errc::protocol) on anything malformed.
engine_to_worker decode_engine_to_worker(std::string_view bytes);
worker_to_engine decode_worker_to_engine(std::string_view bytes);

}  // namespace zmoe
