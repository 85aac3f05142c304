// Every flag the frontend acts on takes effect there: each test starts the real frontend, engine core and CPU
// workers of one run in this process (inproc_server.hpp), the frontend configured from a `zmoe frontend` command
// line parsed as that command parses it, and checks the behaviour the flag controls through the C++ client. The
// liveness flags run against a stand-in engine core that goes silent. `zmoe serve` forwards its frontend flags
// through the same registration (cli/frontend_flags.hpp): ServedFlagsReachTheFrontend checks that hand-over.
// docs/flags.md lists every flag of serve / generate / engine-core / frontend / worker and the test of each.

#include <gtest/gtest.h>

#include <boost/program_options.hpp>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>
#include <zmq.hpp>

#include "actors/actor.hpp"
#include "actors/zmq_context.hpp"
#include "frontend/work_pool.hpp"
#include "messages/engine_protocol.hpp"
#include "tests/frontend/byte_tokenizer.hpp"
#include "tests/frontend/inproc_server.hpp"
#include "tests/workers/synthetic_model.hpp"

namespace zmoe {
namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;
using namespace std::chrono_literals;
using test::inproc_server;

const std::string kModel = std::string(ZMOE_FIXTURES_DIR) + "/models/qwen3_moe";  // 512 ids, no tokenizer.json

engine_config engine(const std::string& model = kModel) {
    engine_config c;
    c.model = model;
    c.threads = 1;
    c.kv_cache_mb = 8;
    return c;
}

std::vector<int32_t> prompt(int n, int32_t first = 3) {
    std::vector<int32_t> p(n);
    std::iota(p.begin(), p.end(), first);
    return p;
}

client_generate request(std::variant<std::string, std::vector<int32_t>> p, uint32_t max_tokens, bool greedy = true) {
    client_generate g;
    g.prompt = std::move(p);
    g.max_tokens = max_tokens;
    if (greedy) g.temperature = 0.f;
    g.ignore_eos = true;
    return g;
}

/// The error code a request ends with (errc::ok when it finishes).
errc outcome(zmoe_client& c, client_generate g, std::string* message = nullptr) {
    try {
        c.collect(c.generate(std::move(g)), 60s);
        return errc::ok;
    } catch (const error& e) {
        if (message) *message = e.what();
        return e.code();
    }
}

/// The byte-level tokenizer (one id per byte, inside the fixture's 512-id vocabulary, no chat template) in dir.
std::string write_byte_tokenizer(const testing::temp_dir& dir) {
    test::write_byte_level_tokenizer(dir.file("tokenizer.json"));
    return dir.file("tokenizer.json");
}

/// Threads of this process carrying the work pool's name: the frontend's tokenizing threads.
int work_pool_threads() {
    int n = 0;
    for (const auto& t : fs::directory_iterator("/proc/self/task")) {
        std::string name;
        std::getline(std::ifstream(t.path() / "comm"), name);
        n += name == work_pool::kThreadName;
    }
    return n;
}

/// Stands in for an engine core: a ROUTER at `endpoint` that answers the first message of each peer (the
/// frontend's hello) with a welcome when `welcome` is set, and then says nothing, heartbeats included.
class silent_engine : public actor {
  public:
    silent_engine(std::string endpoint, bool welcome)
        : actor("silent_engine", actor_options{.stop_on_signal = false}),
          endpoint_(std::move(endpoint)),
          welcome_(welcome) {}
    ~silent_engine() override {
        request_stop();
        join();
    }
    bool heard_from_frontend() const { return heard_.load(); }

  protected:
    void on_start() override {
        sock_ = add_socket(socket_kind::router, [this](const inbound_message& m) {
            if (heard_.exchange(true) || !welcome_) return;
            send_to(sock_, m.peer,
                    encode(engine_welcome{.num_workers = 1,
                                          .max_num_seqs = 4,
                                          .max_model_len = 64,
                                          .block_size = 16,
                                          .num_kv_blocks = 16,
                                          .heartbeat_interval_ms = 1000}));
        });
        bind(sock_, endpoint_);
    }

  private:
    std::string endpoint_;
    bool welcome_;
    socket_id sock_ = -1;
    std::atomic<bool> heard_{false};
};

/// A frontend (alone, no engine core of ours) on `engine_endpoint`, from a `zmoe frontend` command line.
std::unique_ptr<frontend_actor> lone_frontend(const std::string& engine_endpoint, const std::string& clients,
                                              std::vector<std::string> args) {
    args.insert(args.end(),
                {"--engine", engine_endpoint, "--model", kModel, "--bind", clients, "--skip-tokenizer-init"});
    auto f = std::make_unique<frontend_actor>(cli::parse_frontend_args(args));
    f->start();
    return f;
}

std::string unique_endpoint(const std::string& what) {
    static std::atomic<int> n{0};
    return "inproc://frontend-flags-" + what + "-" + std::to_string(++n);
}

TEST(FrontendFlags, EngineAndWorkers) {
    // --engine: the frontend says hello where it is told; --workers: health reports it until the welcome.
    const std::string engine_ep = unique_endpoint("engine"), clients = unique_endpoint("clients");
    silent_engine mute(engine_ep, /*welcome=*/false);
    mute.start();
    auto fe = lone_frontend(engine_ep, clients, {"--workers", "3"});
    zmoe_client c(clients);
    ASSERT_TRUE(test::wait_until([&] { return mute.heard_from_frontend(); }));
    const auto h = c.health(5s);
    EXPECT_EQ(h.status, "starting");
    EXPECT_EQ(h.num_workers, 3u);
    std::string why;
    EXPECT_EQ(outcome(c, request(prompt(4), 2), &why), errc::unsupported) << why;
    // With the real engine core behind it, health reports the run's workers.
    inproc_server s(engine());
    ASSERT_TRUE(s.wait_serving());
    EXPECT_EQ(s.connect()->health(5s).num_workers, 1u);
}

TEST(FrontendFlags, Bind) {
    inproc_server s(engine(), {"--bind", "tcp://127.0.0.1:*"});
    ASSERT_EQ(s.client_endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << s.client_endpoint();
    EXPECT_EQ(s.client_endpoint().find('*'), std::string::npos) << "the port was resolved";
    ASSERT_TRUE(s.wait_serving());  // a loopback client reaches it there
    auto c = s.connect();
    EXPECT_EQ(c->collect(c->generate(request(prompt(4), 3)), 60s).token_ids.size(), 3u);
}

TEST(FrontendFlags, Model) {
    // The name in health and the vocabulary the prompt ids are checked against come from --model's config.json.
    inproc_server s(engine());
    ASSERT_TRUE(s.wait_serving());
    auto c = s.connect();
    EXPECT_EQ(c->health(5s).model, "qwen3_moe");
    std::string why;
    EXPECT_EQ(outcome(*c, request(std::vector<int32_t>{3, 511}, 2)), errc::ok);
    EXPECT_EQ(outcome(*c, request(std::vector<int32_t>{3, 512}, 2), &why), errc::invalid_argument);
    EXPECT_NE(why.find("[0, 512)"), std::string::npos) << why;
}

TEST(FrontendFlags, Tokenizer) {
    testing::temp_dir dir;
    const std::string tok = write_byte_tokenizer(dir);
    {
        inproc_server s(engine());  // the fixture has no tokenizer.json: ids only
        ASSERT_TRUE(s.wait_serving());
        std::string why;
        EXPECT_EQ(outcome(*s.connect(), request(std::string("hello"), 2), &why), errc::unsupported) << why;
    }
    inproc_server s(engine(), {"--tokenizer", tok});
    ASSERT_TRUE(s.wait_serving());
    auto c = s.connect();
    const auto done = c->collect(c->generate(request(std::string("hello"), 3)), 60s);
    EXPECT_EQ(done.prompt_tokens, 5u);  // one id per byte
    EXPECT_EQ(done.token_ids.size(), 3u);
}

TEST(FrontendFlags, SkipTokenizerInit) {
    // A model without tokenizer.json: the frontend refuses to start unless told to serve token ids only.
    auto fe = std::make_unique<frontend_actor>(cli::parse_frontend_args(
        {"--engine", unique_endpoint("engine"), "--model", kModel, "--bind", unique_endpoint("clients")}));
    fe->start();
    ASSERT_TRUE(test::wait_until([&] { return fe->finished(); }, 10s));
    EXPECT_EQ(fe->exit_code(), 1);
    inproc_server s(engine(), {"--skip-tokenizer-init"});
    ASSERT_TRUE(s.wait_serving());
    auto c = s.connect();
    EXPECT_EQ(outcome(*c, request(prompt(4), 2)), errc::ok);
    std::string why;
    EXPECT_EQ(outcome(*c, request(std::string("hello"), 2), &why), errc::unsupported) << why;
}

TEST(FrontendFlags, ClientIdleTimeout) {
    // A client with no live request that says nothing for --client-idle-timeout is forgotten (checked every
    // heartbeat interval).
    auto reaped = [](const std::string& timeout) {
        engine_config fast = engine();
        fast.heartbeat_ms = 100;  // the frontend's too (inproc_server's default)
        inproc_server s(fast, {"--client-idle-timeout", timeout});
        EXPECT_TRUE(s.wait_serving());
        {
            auto once = s.connect();
            EXPECT_EQ(once->health(5s).status, "ok");
        }
        auto observer = s.connect();
        test::wait_until([&] { return test::frontend_counter(*observer, "clients_reaped") > 0; }, 3s);
        return test::frontend_counter(*observer, "clients_reaped");
    };
    EXPECT_GT(reaped("0.2"), 0);
    EXPECT_EQ(reaped("3600"), 0);
}

TEST(FrontendFlags, ChatTemplate) {
    testing::temp_dir dir;
    const std::string tok = write_byte_tokenizer(dir);
    std::ofstream(dir.file("chat.jinja")) << "{% for m in messages %}[{{ m['content'] }}]{% endfor %}";
    client_generate chat = request(std::string(), 2);
    chat.chat = R"({"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "you"}]})";
    {
        inproc_server s(engine(), {"--tokenizer", tok});  // the tokenizer has no chat template
        ASSERT_TRUE(s.wait_serving());
        EXPECT_EQ(outcome(*s.connect(), chat), errc::invalid_argument);
    }
    inproc_server s(engine(), {"--tokenizer", tok, "--chat-template", dir.file("chat.jinja")});
    ASSERT_TRUE(s.wait_serving());
    auto c = s.connect();
    EXPECT_EQ(c->collect(c->generate(chat), 60s).prompt_tokens, std::string("[hi][you]").size());
}

TEST(FrontendFlags, ChatTemplateContentFormat) {
    // A template printing content as it is: auto detects the string format (the text parts joined); openai hands
    // it the list of parts, which it prints as Python's repr.
    testing::temp_dir dir;
    const std::string tok = write_byte_tokenizer(dir);
    std::ofstream(dir.file("chat.jinja")) << "{% for m in messages %}[{{ m['content'] }}]{% endfor %}";
    client_generate chat = request(std::string(), 2);
    chat.chat = R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, "you"]}]})";
    auto prompt_tokens = [&](const std::string& format) {
        inproc_server s(engine(), {"--tokenizer", tok, "--chat-template", dir.file("chat.jinja"),
                                   "--chat-template-content-format", format});
        EXPECT_TRUE(s.wait_serving());
        auto c = s.connect();
        return c->collect(c->generate(chat), 60s).prompt_tokens;
    };
    EXPECT_EQ(prompt_tokens("auto"), std::string("[hi\nyou]").size());
    EXPECT_EQ(prompt_tokens("string"), std::string("[hi\nyou]").size());
    EXPECT_EQ(prompt_tokens("openai"),
              std::string("[[{'type': 'text', 'text': 'hi'}, {'type': 'text', 'text': 'you'}]]").size());
    try {
        cli::parse_frontend_args(
            {"--engine", "inproc://e", "--model", kModel, "--chat-template-content-format", "xml"});
        ADD_FAILURE() << "--chat-template-content-format xml was accepted";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("--chat-template-content-format"), std::string::npos) << e.what();
    }
}

TEST(FrontendFlags, HeartbeatMsAndHeartbeatMaxMissed) {
    // A welcomed engine core that then goes silent is declared dead after heartbeat-ms x heartbeat-max-missed.
    auto status_after = [](std::vector<std::string> args, std::chrono::milliseconds wait, const std::string& want) {
        const std::string engine_ep = unique_endpoint("engine"), clients = unique_endpoint("clients");
        silent_engine mute(engine_ep, /*welcome=*/true);
        mute.start();
        auto fe = lone_frontend(engine_ep, clients, std::move(args));
        zmoe_client c(clients);
        test::wait_until([&] { return c.health(5s).status != "starting"; }, 10s);
        std::string status;
        test::wait_until([&] { return (status = c.health(5s).status) == want; }, wait);
        return status;
    };
    EXPECT_EQ(status_after({"--heartbeat-ms", "50", "--heartbeat-max-missed", "2"}, 10s, "degraded"), "degraded");
    // The same silence, well inside the interval or the number of intervals allowed: still serving.
    EXPECT_EQ(status_after({"--heartbeat-ms", "60000", "--heartbeat-max-missed", "2"}, 1s, "degraded"), "ok");
    EXPECT_EQ(status_after({"--heartbeat-ms", "50", "--heartbeat-max-missed", "100000"}, 1s, "degraded"), "ok");
}

TEST(FrontendFlags, RunId) {
    inproc_server s(engine(), {"--run-id", "run-42"});
    ASSERT_TRUE(s.wait_serving());
    EXPECT_EQ(s.connect()->health(5s).run_id, "run-42");
}

TEST(FrontendFlags, ShutdownTimeout) {
    // On stop, running requests may finish for --shutdown-timeout seconds; what is left then ends with aborted.
    auto stopped_mid_request = [](const std::string& timeout) {
        inproc_server s(engine(), {"--shutdown-timeout", timeout});
        EXPECT_TRUE(s.wait_serving());
        auto c = s.connect();
        const std::string id = c->generate(request(prompt(4), 400));
        EXPECT_TRUE(c->next(id, 60s).has_value());  // its first tokens: it runs
        s.frontend().request_stop();
        try {
            EXPECT_EQ(c->collect(id, 120s).completion_tokens, 400u);
            return errc::ok;
        } catch (const error& e) {
            return e.code();
        }
    };
    EXPECT_EQ(stopped_mid_request("0"), errc::aborted);
    EXPECT_EQ(stopped_mid_request("120"), errc::ok);
}

TEST(FrontendFlags, ClientSendTimeout) {
    // A client that takes nothing while its pipe is full has its requests ended after --client-send-timeout.
    auto stuck_clients = [](const std::string& timeout) {
        // One sequence at a time and eight long requests: the client has live requests for hundreds of steps
        // after its pipe fills (one 400-token request alone can finish within the 50 ms bound on the fixture).
        engine_config one_at_a_time = engine();
        one_at_a_time.max_num_seqs = 1;
        inproc_server s(one_at_a_time, {"--client-send-timeout", timeout});
        EXPECT_TRUE(s.wait_serving());
        auto observer = s.connect();
        // A raw client socket that sends and never receives: health requests whose replies fill its pipe (ZeroMQ's
        // high-water marks: about a thousand messages), then a long request, live while the pipe stays full.
        zmq::socket_t never_reads(process_zmq_context(), zmq::socket_type::dealer);
        never_reads.set(zmq::sockopt::rcvhwm, 16);
        never_reads.set(zmq::sockopt::linger, 0);
        never_reads.connect(s.client_endpoint());
        for (int k = 0; k < 3000; ++k) never_reads.send(zmq::buffer(encode(client_health{"h"})));
        for (int k = 0; k < 8; ++k) {
            client_generate g = request(prompt(4), 500);
            g.client_request_id = "stuck" + std::to_string(k);
            never_reads.send(zmq::buffer(encode(g)));
        }
        test::wait_until([&] { return test::frontend_counter(*observer, "client_pipe_full") > 0; }, 10s);
        EXPECT_GT(test::frontend_counter(*observer, "client_pipe_full"), 0) << "the pipe never filled";
        test::wait_until([&] { return test::frontend_counter(*observer, "clients_stuck") > 0; }, 2s);
        return test::frontend_counter(*observer, "clients_stuck");
    };
    EXPECT_GT(stuck_clients("0.05"), 0);
    EXPECT_EQ(stuck_clients("3600"), 0);
}

TEST(FrontendFlags, MaxPromptBytes) {
    testing::temp_dir dir;
    inproc_server s(engine(), {"--tokenizer", write_byte_tokenizer(dir), "--max-prompt-bytes", "16"});
    ASSERT_TRUE(s.wait_serving());
    auto c = s.connect();
    EXPECT_EQ(outcome(*c, request(std::string(16, 'a'), 2)), errc::ok);
    std::string why;
    EXPECT_EQ(outcome(*c, request(std::string(17, 'a'), 2), &why), errc::invalid_argument);
    EXPECT_NE(why.find("--max-prompt-bytes"), std::string::npos) << why;
}

TEST(FrontendFlags, TokenizerThreads) {
    testing::temp_dir dir;
    const std::string tok = write_byte_tokenizer(dir);
    ASSERT_EQ(work_pool_threads(), 0);
    for (const int n : {1, 3}) {
        inproc_server s(engine(), {"--tokenizer", tok, "--tokenizer-threads", std::to_string(n)});
        ASSERT_TRUE(s.wait_serving());
        EXPECT_EQ(work_pool_threads(), n);
        auto c = s.connect();
        EXPECT_EQ(outcome(*c, request(std::string("tokenized on the pool"), 2)), errc::ok);
    }
}

TEST(FrontendFlags, SamplingDefaultsFromGenerationConfig) {
    // The frontend fills the sampling fields a request leaves out from --model's generation_config.json.
    testing::temp_dir dir;
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(kModel + "/" + f, dir.file(f));
    auto seeded = [](inproc_server& s, uint64_t seed) {
        auto c = s.connect();
        client_generate g = request(prompt(5), 8, /*greedy=*/false);
        g.seed = seed;
        return c->collect(c->generate(g), 60s).token_ids;
    };
    std::vector<int32_t> greedy;
    int differ_from_greedy = 0;
    {
        inproc_server s(engine(dir.str()));  // no generation_config.json: vLLM's defaults (temperature 1)
        ASSERT_TRUE(s.wait_serving());
        auto c = s.connect();
        greedy = c->collect(c->generate(request(prompt(5), 8)), 60s).token_ids;
        for (uint64_t seed = 1; seed <= 4; ++seed) differ_from_greedy += seeded(s, seed) != greedy;
    }
    EXPECT_GT(differ_from_greedy, 0) << "temperature 1 always drew the greedy tokens: the check below proves nothing";
    std::ofstream(dir.file("generation_config.json")) << R"({"temperature": 1.0, "top_k": 1})";
    inproc_server s(engine(dir.str()));
    ASSERT_TRUE(s.wait_serving());
    for (uint64_t seed = 1; seed <= 4; ++seed) EXPECT_EQ(seeded(s, seed), greedy) << "seed " << seed;
}

TEST(FrontendFlags, ServedFlagsReachTheFrontend) {
    // `zmoe serve` registers the frontend's flags with add_served_frontend_options and hands them on with
    // served_frontend_args: what `zmoe frontend` then parses is what serve was given.
    cli::frontend_flags served;
    po::options_description d;
    cli::add_served_frontend_options(d, served);
    const std::vector<std::string> given = {"--tokenizer",
                                            "/t/tokenizer.json",
                                            "--chat-template",
                                            "/t/c.jinja",
                                            "--shutdown-timeout",
                                            "2.5",
                                            "--max-prompt-bytes",
                                            "123",
                                            "--client-send-timeout",
                                            "7",
                                            "--tokenizer-threads",
                                            "5",
                                            "--client-idle-timeout",
                                            "9",
                                            "--chat-template-content-format",
                                            "openai",
                                            "--skip-tokenizer-init"};
    po::variables_map vm;
    po::store(po::command_line_parser(given).options(d).run(), vm);
    po::notify(vm);
    std::vector<std::string> args = cli::served_frontend_args(served);
    args.insert(args.end(), {"--engine", "inproc://e", "--model", kModel});
    const frontend_options o = cli::parse_frontend_args(args);
    EXPECT_EQ(o.tokenizer_path, "/t/tokenizer.json");
    EXPECT_EQ(o.chat_template_path, "/t/c.jinja");
    EXPECT_EQ(o.chat_template_content_format, "openai");
    EXPECT_EQ(o.drain_timeout, 2500ms);
    EXPECT_EQ(o.client_send_timeout, 7000ms);
    EXPECT_EQ(o.max_prompt_bytes, 123u);
    EXPECT_EQ(o.tokenizer_threads, 5u);
    EXPECT_EQ(o.client_idle_timeout, 9000ms);
    EXPECT_TRUE(o.skip_tokenizer_init);
    // Left out, each takes the frontend's own default.
    const frontend_options defaults = cli::parse_frontend_args({"--engine", "inproc://e", "--model", kModel});
    const frontend_options plain;
    EXPECT_EQ(defaults.max_prompt_bytes, plain.max_prompt_bytes);
    EXPECT_EQ(defaults.tokenizer_threads, plain.tokenizer_threads);
    EXPECT_EQ(defaults.client_send_timeout, plain.client_send_timeout);
    EXPECT_EQ(defaults.drain_timeout, plain.drain_timeout);
    EXPECT_EQ(defaults.chat_template_content_format, "auto");
    EXPECT_EQ(defaults.client_idle_timeout, plain.client_idle_timeout);
    EXPECT_EQ(defaults.skip_tokenizer_init, plain.skip_tokenizer_init);
    EXPECT_THROW(cli::parse_frontend_args({"--model", kModel}), error);  // --engine is required
}

}  // namespace
}  // namespace zmoe
