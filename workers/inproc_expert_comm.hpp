#pragma once
// Expert-parallel ranks as threads of one process: a shared hub of mailboxes and a barrier. For tests (and any
// single-process multi-rank CPU run); each rank's thread holds its own inproc_expert_comm.

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "workers/expert_comm.hpp"

namespace zmoe {

/// State shared by the ranks of one in-process world.
class inproc_expert_hub {
  public:
    explicit inproc_expert_hub(int world_size);
    int world_size() const { return world_size_; }
    /// Marks the world dead (a rank failed): every pending and later all_to_all throws zmoe::error(peer_dead)
    /// instead of waiting forever for the failed rank.
    void abort();

  private:
    friend class inproc_expert_comm;
    void arrive_and_wait();

    int world_size_;
    std::mutex mutex_;
    std::condition_variable cv_;
    int arrived_ = 0;
    uint64_t phase_ = 0;
    bool aborted_ = false;
    std::vector<std::vector<std::vector<float>>> mailbox_;  // [dst][src]
};

class inproc_expert_comm final : public expert_comm {
  public:
    /// Rank `rank` of `hub`'s world; `hub` must outlive this.
    inproc_expert_comm(inproc_expert_hub& hub, int rank);
    int rank() const override { return rank_; }
    int world_size() const override { return hub_.world_size(); }
    std::vector<std::vector<float>> all_to_all(std::vector<std::vector<float>> send) override;

  private:
    inproc_expert_hub& hub_;
    int rank_;
};

}  // namespace zmoe
