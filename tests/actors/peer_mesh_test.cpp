#include "actors/peer_mesh.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "base/error.hpp"

using namespace std::chrono_literals;

namespace {

std::string part(int round, int from, int to) {
    // Empty for some pairs: an empty share is a real message and must still complete the round.
    if ((round + from + to) % 3 == 0) return {};
    std::string s = "r";
    s.append(std::to_string(round)).append(":").append(std::to_string(from)).append("->");
    s.append(std::to_string(to)).append(static_cast<size_t>(round * 7 % 50), 'x');
    return s;
}

}  // namespace

TEST(PeerMesh, AllToAllDeliversEveryShareInRoundOrder) {
    constexpr int kWorld = 3;
    constexpr int kRounds = 40;
    std::vector<std::unique_ptr<zmoe::peer_mesh>> meshes;
    std::vector<std::string> endpoints;
    for (int r = 0; r < kWorld; ++r) {
        meshes.push_back(std::make_unique<zmoe::peer_mesh>(r, "tcp://127.0.0.1:*"));
        endpoints.push_back(meshes.back()->endpoint());
    }
    for (auto& m : meshes) m->connect(endpoints);
    std::vector<int> failures(kWorld, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
        threads.emplace_back([&, r] {
            for (int round = 0; round < kRounds; ++round) {
                // Rank 0 lags, so the others run a round ahead and their early shares must be kept.
                if (r == 0 && round % 5 == 0) std::this_thread::sleep_for(5ms);
                std::vector<std::string> send;
                for (int to = 0; to < kWorld; ++to) send.push_back(part(round, r, to));
                auto recv = meshes[r]->all_to_all(send, 5000ms);
                for (int from = 0; from < kWorld; ++from)
                    if (recv[from] != part(round, from, r)) ++failures[r];
            }
        });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ(failures[r], 0) << "rank " << r;
}

TEST(PeerMesh, SilentRankTimesOutWithPeerDead) {
    zmoe::peer_mesh a(0, "tcp://127.0.0.1:*");
    zmoe::peer_mesh b(1, "tcp://127.0.0.1:*");
    a.connect({a.endpoint(), b.endpoint()});
    try {
        a.all_to_all({"x", "y"}, 200ms);
        FAIL() << "expected a timeout";
    } catch (const zmoe::error& e) {
        EXPECT_EQ(e.code(), zmoe::errc::peer_dead);
    }
}

TEST(PeerMesh, CancelFlagAbortsWait) {
    zmoe::peer_mesh a(0, "tcp://127.0.0.1:*");
    zmoe::peer_mesh b(1, "tcp://127.0.0.1:*");
    a.connect({a.endpoint(), b.endpoint()});
    std::atomic<bool> cancel{true};
    try {
        a.all_to_all({"x", "y"}, 10000ms, &cancel);
        FAIL() << "expected cancellation";
    } catch (const zmoe::error& e) {
        EXPECT_EQ(e.code(), zmoe::errc::aborted);
    }
}
