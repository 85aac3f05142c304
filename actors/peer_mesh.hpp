#pragma once
// A blocking all-to-all between the CPU workers of one run, over ZeroMQ: the transport behind the CPU expert
// communicator. Each rank binds one PULL socket and connects one PUSH socket to every other rank. A round is
// [round number][sender rank][run secret][payload]; a rank may run ahead into the next round, so early messages
// are kept until their round is asked for. Used by one thread at a time (the worker's compute thread), not by an
// actor loop.
//
// Hostile input: anyone who can reach the PULL socket can send to it. A frame that is too short, names an
// impossible sender, lacks the run's secret, or belongs to a round more than kMaxRoundsAhead ahead is dropped and
// counted (num_dropped); nothing a peer sends can abort the worker or grow its memory without bound.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zmoe {

class peer_mesh {
  public:
    /// Binds this rank's PULL socket (e.g. "tcp://127.0.0.1:*"); endpoint() returns the resolved address. The
    /// world size is known once connect() names every rank's endpoint.
    peer_mesh(int rank, const std::string& bind_endpoint, std::string secret = {});
    ~peer_mesh();
    peer_mesh(const peer_mesh&) = delete;
    peer_mesh& operator=(const peer_mesh&) = delete;

    int rank() const { return rank_; }
    int world_size() const { return world_size_; }
    const std::string& endpoint() const { return endpoint_; }

    /// Connects to every rank's endpoint, by rank; their number is the world size (rank() must be below it).
    void connect(const std::vector<std::string>& endpoints);

    /// send[r] goes to rank r; returns what each rank sent to this one (result[rank()] is send[rank()]).
    /// Throws zmoe::error(errc::peer_dead) when a rank's part has not arrived within timeout, or
    /// zmoe::error(errc::aborted) once *cancel becomes true (checked every 50 ms).
    std::vector<std::string> all_to_all(std::vector<std::string> send, std::chrono::milliseconds timeout,
                                        const std::atomic<bool>* cancel = nullptr);

    /// Frames dropped as not ours (see above).
    uint64_t num_dropped() const { return num_dropped_; }
    static constexpr uint64_t kMaxRoundsAhead = 4;

  private:
    struct sockets;
    int rank_;
    int world_size_ = 0;
    std::string endpoint_;
    std::unique_ptr<sockets> sockets_;
    std::string secret_;
    uint64_t num_dropped_ = 0;
    uint64_t round_ = 0;
    std::map<std::pair<uint64_t, int>, std::string> early_;  // (round, sender) -> payload that came ahead
};

}  // namespace zmoe
