#include "workers/inproc_expert_comm.hpp"

#include "base/check.hpp"
#include "base/error.hpp"

namespace zmoe {

inproc_expert_hub::inproc_expert_hub(int world_size)
    : world_size_(world_size),
      mailbox_(static_cast<size_t>(world_size), std::vector<std::vector<float>>(static_cast<size_t>(world_size))) {
    ZMOE_CHECK(world_size > 0, "world size " << world_size);
}

void inproc_expert_hub::abort() {
    {
        std::lock_guard lock(mutex_);
        aborted_ = true;
    }
    cv_.notify_all();
}

void inproc_expert_hub::arrive_and_wait() {
    std::unique_lock lock(mutex_);
    if (aborted_) throw error(errc::peer_dead, "expert all_to_all: another rank of the world failed");
    const uint64_t phase = phase_;
    if (++arrived_ == world_size_) {
        arrived_ = 0;
        ++phase_;
        cv_.notify_all();
        return;
    }
    cv_.wait(lock, [&] { return phase_ != phase || aborted_; });
    if (phase_ == phase) throw error(errc::peer_dead, "expert all_to_all: another rank of the world failed");
}

inproc_expert_comm::inproc_expert_comm(inproc_expert_hub& hub, int rank) : hub_(hub), rank_(rank) {
    ZMOE_CHECK(rank >= 0 && rank < hub.world_size(), "rank " << rank << " of " << hub.world_size());
}

std::vector<std::vector<float>> inproc_expert_comm::all_to_all(std::vector<std::vector<float>> send) {
    const int n = hub_.world_size();
    ZMOE_CHECK(static_cast<int>(send.size()) == n, "all_to_all: " << send.size() << " buffers for a world of " << n);
    // Each mailbox slot [dst][src] has one writer (src) and one reader (dst); the first barrier publishes the
    // writes, the second keeps the next round's writes from landing before every rank has taken this round's.
    for (int r = 0; r < n; ++r) hub_.mailbox_[r][rank_] = std::move(send[r]);
    hub_.arrive_and_wait();
    std::vector<std::vector<float>> received(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) received[r] = std::move(hub_.mailbox_[rank_][r]);
    hub_.arrive_and_wait();
    return received;
}

}  // namespace zmoe
