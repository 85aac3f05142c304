#include "actors/peer_mesh.hpp"

#include <cstring>
#include <zmq.hpp>

#include "actors/run_secret.hpp"
#include "actors/zmq_context.hpp"
#include "actors/zmq_poll.hpp"
#include "base/check.hpp"
#include "base/error.hpp"
#include "messages/envelope.hpp"

namespace zmoe {

namespace {
// Frame layout: [u64 round][i32 sender][payload bytes], little-endian (all our hosts are).
constexpr size_t kHeaderBytes = 12;
}  // namespace

struct peer_mesh::sockets {
    zmq::socket_t pull;
    std::vector<zmq::socket_t> push;  // by rank; empty socket for this rank
};

peer_mesh::peer_mesh(int rank, const std::string& bind_endpoint, std::string secret)
    : rank_(rank), sockets_(std::make_unique<sockets>()), secret_(std::move(secret)) {
    ZMOE_CHECK(rank >= 0, "rank " << rank);
    sockets_->pull = zmq::socket_t(process_zmq_context(), zmq::socket_type::pull);
    sockets_->pull.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxFrameBytes));
    sockets_->pull.set(zmq::sockopt::linger, 0);
    sockets_->pull.bind(bind_endpoint);
    endpoint_ = sockets_->pull.get(zmq::sockopt::last_endpoint);
}

peer_mesh::~peer_mesh() = default;

void peer_mesh::connect(const std::vector<std::string>& endpoints) {
    if (static_cast<int>(endpoints.size()) <= rank_)
        throw error(errc::invalid_argument, "peer_mesh: " + std::to_string(endpoints.size()) +
                                                " endpoints do not include rank " + std::to_string(rank_));
    world_size_ = static_cast<int>(endpoints.size());
    sockets_->push.clear();
    for (int r = 0; r < world_size_; ++r) {
        sockets_->push.emplace_back();
        if (r == rank_) continue;
        auto& s = sockets_->push.back();
        s = zmq::socket_t(process_zmq_context(), zmq::socket_type::push);
        s.set(zmq::sockopt::linger, 0);
        s.set(zmq::sockopt::sndhwm, 0);  // a round must never be dropped or block on a high-water mark
        s.connect(endpoints[r]);
    }
}

std::vector<std::string> peer_mesh::all_to_all(std::vector<std::string> send, std::chrono::milliseconds timeout,
                                               const std::atomic<bool>* cancel) {
    ZMOE_CHECK(static_cast<int>(send.size()) == world_size_, "all_to_all: " << send.size() << " parts");
    const uint64_t round = round_++;
    std::vector<std::string> recv(world_size_);
    recv[rank_] = std::move(send[rank_]);
    for (int r = 0; r < world_size_; ++r) {
        if (r == rank_) continue;
        ZMOE_CHECK(r < static_cast<int>(sockets_->push.size()), "peer_mesh used before connect");
        zmq::message_t msg(kHeaderBytes + secret_.size() + send[r].size());
        auto* p = static_cast<char*>(msg.data());
        std::memcpy(p, &round, 8);
        const int32_t me = rank_;
        std::memcpy(p + 8, &me, 4);
        std::memcpy(p + kHeaderBytes, secret_.data(), secret_.size());
        std::memcpy(p + kHeaderBytes + secret_.size(), send[r].data(), send[r].size());
        sockets_->push[r].send(msg, zmq::send_flags::none);
    }
    int missing = world_size_ - 1;
    std::vector<bool> got(world_size_, false);
    for (auto it = early_.begin(); it != early_.end();) {
        if (it->first.first == round) {
            recv[it->first.second] = std::move(it->second);
            got[it->first.second] = true;
            --missing;
            it = early_.erase(it);
        } else {
            ++it;
        }
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (missing > 0) {
        if (cancel && cancel->load()) throw error(errc::aborted, "all_to_all cancelled");
        if (std::chrono::steady_clock::now() > deadline)
            throw error(errc::peer_dead, "all_to_all: " + std::to_string(missing) + " rank(s) silent for " +
                                             std::to_string(timeout.count()) + " ms in round " + std::to_string(round));
        zmq::pollitem_t item{sockets_->pull.handle(), 0, ZMQ_POLLIN, 0};
        poll_interruptible(&item, 1, std::chrono::milliseconds(50));
        zmq::message_t msg;
        while (sockets_->pull.recv(msg, zmq::recv_flags::dontwait)) {
            const size_t head = kHeaderBytes + secret_.size();
            if (msg.size() < head) {  // not one of ours
                ++num_dropped_;
                continue;
            }
            uint64_t r_round;
            int32_t sender;
            std::memcpy(&r_round, msg.data(), 8);
            std::memcpy(&sender, static_cast<const char*>(msg.data()) + 8, 4);
            const std::string_view stamp(static_cast<const char*>(msg.data()) + kHeaderBytes, secret_.size());
            if (!secrets_equal(stamp, secret_) || sender < 0 || sender >= world_size_ || sender == rank_ ||
                r_round < round || r_round > round + kMaxRoundsAhead || (r_round == round && got[sender]) ||
                early_.count({r_round, sender})) {
                ++num_dropped_;
                continue;
            }
            std::string payload(static_cast<const char*>(msg.data()) + head, msg.size() - head);
            if (r_round == round && !got[sender]) {
                recv[sender] = std::move(payload);
                got[sender] = true;
                --missing;
            } else {
                early_[{r_round, sender}] = std::move(payload);
            }
        }
    }
    return recv;
}

}  // namespace zmoe
