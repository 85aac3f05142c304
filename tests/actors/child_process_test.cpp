// Multi-process tests: this binary also runs as the child. With --echo-server ENDPOINT it becomes an echo server
// actor process (the way `zmoe serve` runs each actor as `zmoe <role> ...`) that stops on SIGTERM and exits 0.

#include "actors/child_process.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "actors/stop_signals.hpp"
#include "base/error.hpp"
#include "tests/actors/test_actors.hpp"

namespace zmoe {
namespace {

using namespace std::chrono_literals;

TEST(ChildProcess, ReportsExitStatus) {
    auto c = child_process::spawn({"/bin/sh", "-c", "exit 3"});
    EXPECT_GT(c.pid(), 0);
    EXPECT_EQ(c.wait(), 3);
    EXPECT_FALSE(c.running());
}

TEST(ChildProcess, SearchesPathAndPassesEnvironment) {
    auto c = child_process::spawn({"sh", "-c", "exit $ZMOE_TEST_CODE"}, {"ZMOE_TEST_CODE=7"});
    EXPECT_EQ(c.wait(), 7);
}

TEST(ChildProcess, KillAndTimeout) {
    auto c = child_process::spawn({"sleep", "30"});
    EXPECT_TRUE(c.running());
    EXPECT_EQ(c.wait_for(50ms), std::nullopt);
    c.kill(SIGTERM);
    auto status = c.wait_for(5000ms);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(*status, 128 + SIGTERM);
}

TEST(ChildProcess, MissingProgramThrows) {
    EXPECT_THROW(child_process::spawn({"/nonexistent/zmoe-no-such-binary"}), error);
    EXPECT_THROW(child_process::spawn({}), error);
}

TEST(ChildProcess, DestructorReapsARunningChild) {
    pid_t pid;
    {
        auto c = child_process::spawn({"sleep", "30"});
        pid = c.pid();
    }
    // Reaped: the pid no longer names our child.
    EXPECT_EQ(::kill(pid, 0), -1);
}

TEST(ChildProcess, ActorProcessPingPongAndGracefulStop) {
    std::string endpoint = std::string("ipc:///tmp/zmoe-actors-test-").append(std::to_string(getpid())).append(".sock");
    auto server = child_process::spawn({self_executable_path(), "--echo-server", endpoint});
    test::pinger client(endpoint, 50);
    client.start();
    ASSERT_TRUE(test::eventually([&] { return client.finished(); }, 10000ms));
    EXPECT_EQ(client.num_round_trips.load(), 50);
    server.kill(SIGTERM);
    auto status = server.wait_for(5000ms);
    ASSERT_TRUE(status.has_value()) << "the actor process did not stop on SIGTERM";
    EXPECT_EQ(*status, 0);
}

}  // namespace
}  // namespace zmoe

int main(int argc, char** argv) {
    if (argc == 3 && !std::strcmp(argv[1], "--echo-server")) {
        zmoe::install_stop_signal_handlers();
        zmoe::test::echo_server server(argv[2]);
        server.run();
        return 0;
    }
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
