// The operator-facing options every zmoe command takes: --version, --config FILE, --log-level (docs/operations.md).

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "tests/cli/e2e_util.hpp"

using namespace zmoe::test;

namespace {

/// Runs a shell command line (bounded), returning its exit status (-1 on timeout).
int run_shell(const std::string& cmd, std::chrono::seconds timeout = std::chrono::seconds(120)) {
    return run_bounded({"/bin/sh", "-c", cmd}, timeout);
}

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST(Operations, VersionPrintsTheVersionLine) {
    temp_dir dir;
    ASSERT_EQ(run_shell("'" + kZmoe + "' --version > '" + (dir / "out") + "'"), 0);
    const auto out = slurp(dir / "out");
    EXPECT_TRUE(std::regex_match(out, std::regex(R"(zmoe \d+\.\d+\.\d+ \(commit \S+; backends: cpu(, cuda)?\)\n)")))
        << out;
    ASSERT_EQ(run_shell("'" + kZmoe + "' version > '" + (dir / "out2") + "'"), 0);
    EXPECT_EQ(slurp(dir / "out2"), out);
}

TEST(Operations, ConfigFileSetsOptionsAndTheCommandLineWins) {
    temp_dir dir;
    const std::string tokenizer = std::string(ZMOE_SOURCE_DIR) + "/third_party/tokenizers/qwen3";
    {
        std::ofstream cfg(dir / "demo.cfg");
        cfg << "# a make-demo configuration\nlayers = 3\nexperts = 4\n\ntokenizer = " << tokenizer << "\n";
    }
    ASSERT_EQ(run_zmoe({"make-demo", "--out", dir / "a", "--config", dir / "demo.cfg"}), 0);
    const auto a = read_json(dir / "a/config.json");
    EXPECT_EQ(a["num_hidden_layers"].get<int>(), 3);
    EXPECT_EQ(a["num_experts"].get<int>(), 4);
    ASSERT_EQ(run_zmoe({"make-demo", "--out", dir / "b", "--config", dir / "demo.cfg", "--layers", "1"}), 0);
    const auto b = read_json(dir / "b/config.json");
    EXPECT_EQ(b["num_hidden_layers"].get<int>(), 1);  // the command line wins
    EXPECT_EQ(b["num_experts"].get<int>(), 4);        // the rest still comes from the file
    {
        std::ofstream bad(dir / "bad.cfg");
        bad << "layerz = 3\n";
    }
    EXPECT_EQ(run_zmoe({"make-demo", "--out", dir / "c", "--config", dir / "bad.cfg"}), 1);  // unknown option
    EXPECT_EQ(run_zmoe({"make-demo", "--out", dir / "c", "--config", dir / "missing.cfg"}), 1);
    EXPECT_FALSE(std::filesystem::exists(dir / "c/config.json"));
}

TEST(Operations, LogLevelFiltersEveryActorsLines) {
    temp_dir dir;
    {
        std::ofstream in(dir / "in.jsonl");
        in << R"({"prompt_token_ids": [1, 2, 3], "max_tokens": 2})"
           << "\n";
    }
    const std::string gen = "'" + kZmoe + "' generate --model '" + kFixtures + "/models/qwen3_moe' --input '" +
                            (dir / "in.jsonl") + "' --output '" + (dir / "out.jsonl") + "' --threads 1";
    ASSERT_EQ(run_shell(gen + " 2> '" + (dir / "info.log") + "'"), 0);
    ASSERT_EQ(run_shell(gen + " --log-level warn 2> '" + (dir / "warn.log") + "'"), 0);
    const auto info = slurp(dir / "info.log"), warn = slurp(dir / "warn.log");
    // At info, every actor process logs, each line with a readable UTC timestamp.
    const std::regex stamp(R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z (DEBUG|INFO |WARN |ERROR) \S+\[\d+\] )");
    std::istringstream lines(info);
    std::string line;
    int info_lines = 0;
    while (std::getline(lines, line)) {
        EXPECT_TRUE(std::regex_search(line, stamp)) << line;
        info_lines += line.find(" INFO  ") != std::string::npos;
    }
    EXPECT_GT(info_lines, 0);
    for (const char* actor : {" engine_core[", " worker_0[", " frontend["})
        EXPECT_NE(info.find(actor), std::string::npos) << actor << " did not log:\n" << info;
    // At warn, none of them logs an info line.
    EXPECT_EQ(warn.find(" INFO  "), std::string::npos) << warn;
    EXPECT_EQ(read_jsonl(dir / "out.jsonl").size(), 1u);
    EXPECT_EQ(run_zmoe({"make-demo", "--out", dir / "x", "--log-level", "loud"}), 1);
}
