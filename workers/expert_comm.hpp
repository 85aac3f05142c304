#pragma once
// The collective the MoE layers use for expert parallelism. Every rank calls all_to_all the same number of
// times per step (twice per MoE layer: dispatch, combine), with an empty step included, because the exchange
// is a collective. Backends: local (world 1), in-process threads (tests), ZeroMQ between CPU workers, NCCL.

#include <vector>

namespace zmoe {

class expert_comm {
  public:
    virtual ~expert_comm() = default;
    virtual int rank() const = 0;
    virtual int world_size() const = 0;
    /// send[r] goes to rank r (send.size() == world_size()); result[r] is what rank r sent to this rank.
    /// Blocks until every rank has called it. The buffers are 32-bit words moved bit for bit, never as float values
    /// (no arithmetic, no NaN canonicalisation): bytes ride in them (the FP8 dispatch's e4m3 codes, EPLB's weights).
    virtual std::vector<std::vector<float>> all_to_all(std::vector<std::vector<float>> send) = 0;
};

/// World of one: all_to_all hands the buffer back.
class local_expert_comm final : public expert_comm {
  public:
    int rank() const override { return 0; }
    int world_size() const override { return 1; }
    std::vector<std::vector<float>> all_to_all(std::vector<std::vector<float>> send) override;
};

}  // namespace zmoe
