// The flags `zmoe serve` and `zmoe generate` act on themselves or hand to the frontend process, through the real
// processes: --host binds that address only, --tokenizer reaches the frontend (text prompts are tokenized with
// it). The flags the frontend and the engine core act on have in-process tests (tests/frontend/frontend_flags_test.cpp,
// tests/engine_core/engine_flags_test.cpp); docs/flags.md lists every flag with its test.

#include <gtest/gtest.h>

#include "actors/zmoe_client.hpp"
#include "base/error.hpp"
#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;
using namespace std::chrono_literals;

namespace {

const std::string kModel = kFixtures + "/models/qwen3_moe";  // no tokenizer.json of its own

TEST(ServeFlags, HostAndTokenizer) {
    temp_dir dir;
    write_byte_level_tokenizer(dir / "tokenizer.json");
    // 127.0.0.2 is loopback too, but another address: serve listens there and not on 127.0.0.1.
    serve_process s({"--workers", "1", "--host", "127.0.0.2", "--tokenizer", dir / "tokenizer.json"}, kModel);
    ASSERT_EQ(s.endpoint().rfind("tcp://127.0.0.2:", 0), 0u);
    zmoe::zmoe_client c(s.endpoint());
    EXPECT_EQ(c.health(5s).status, "ok");
    zmoe::client_generate g;
    g.prompt = std::string("hello");
    g.max_tokens = 2;
    g.temperature = 0.f;
    g.ignore_eos = true;
    EXPECT_EQ(c.collect(c.generate(g), 60s).prompt_tokens, 5u);  // one id per byte: the given tokenizer
    zmoe::zmoe_client elsewhere("tcp://127.0.0.1:" + std::to_string(s.port));
    EXPECT_THROW(elsewhere.health(1s), zmoe::error) << "serve answered on an address it was not given";
}

TEST(GenerateFlags, Tokenizer) {
    temp_dir dir;
    write_byte_level_tokenizer(dir / "tokenizer.json");
    std::ofstream(dir / "in.jsonl") << R"({"prompt": "hello there", "max_tokens": 2, "temperature": 0})"
                                    << "\n";
    const std::vector<std::string> args = {"generate", "--model",         kModel,      "--input", dir / "in.jsonl",
                                           "--output", dir / "out.jsonl", "--threads", "1"};
    std::vector<std::string> with = args;
    with.insert(with.end(), {"--tokenizer", dir / "tokenizer.json"});
    ASSERT_EQ(run_zmoe(with), 0);
    const auto out = read_jsonl(dir / "out.jsonl");
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0]["usage"]["prompt_tokens"], 11);
    // Without it the model directory's tokenizer is used, and this one has none: the text prompt is refused.
    run_zmoe(args);
    const auto refused = read_jsonl(dir / "out.jsonl");
    ASSERT_EQ(refused.size(), 1u);
    EXPECT_EQ(refused[0]["finish_reason"], "error");
}

}  // namespace
