// Multi-process tests: this binary also runs as the child. With --echo-server ENDPOINT it becomes an echo server
// actor process (the way `zmoe serve` runs each actor as `zmoe <role> ...`) that stops on SIGTERM and exits 0.

#include "actors/child_process.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "actors/stop_signals.hpp"
#include "base/error.hpp"
#include "tests/actors/fake_frontend.hpp"
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

// Interoperability: the Python client (clients/python) against a C++ frontend stand-in, each decoding what the
// other encodes.
#ifdef ZMOE_PYTHON3
TEST(ChildProcess, PythonClientTalksToACppFrontend) {
    test::fake_frontend server;
    server.start();
    const char* script = R"(
import sys
sys.path.insert(0, sys.argv[1])
import zmoe_client
c = zmoe_client.Client(sys.argv[2], timeout=10)
out = c.generate(prompt_token_ids=[41, 42], max_tokens=3, temperature=0.0, seed=5, stop=["x"]).collect()
assert out.token_ids == [43, 44, 45], out
assert out.text == "<0><1><2>", out
assert out.finish_reason == "length" and out.prompt_tokens == 2 and out.completion_tokens == 3, out
one = list(c.generate("text prompt", max_tokens=2, stream=False))
assert len(one) == 1 and one[0].token_ids == [1, 2], one
try:
    list(c.generate("fail"))
    sys.exit("no error raised")
except zmoe_client.ZmoeError as e:
    assert e.code == "invalid_argument" and e.message == "bad prompt", e
assert c.health()["model"] == "fake-moe"
assert c.metrics() == {"requests": 1}
)";
    auto py = child_process::spawn({ZMOE_PYTHON3, "-c", script, ZMOE_SOURCE_DIR "/clients/python", server.endpoint()});
    auto status = py.wait_for(std::chrono::milliseconds(30000));
    ASSERT_TRUE(status.has_value()) << "python client hung";
    EXPECT_EQ(*status, 0) << "python client failed (its stderr is above)";
}
#endif

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
