#include "base/log.hpp"

#include <gtest/gtest.h>

#include <regex>

TEST(Log, LevelFiltersLinesAndLinesCarryAReadableTimestamp) {
    const auto saved = zmoe::log_get_level();
    zmoe::log_set_name("tester");
    zmoe::log_set_level(zmoe::log_level::warn);
    testing::internal::CaptureStderr();
    ZMOE_LOG(debug, "hidden debug");
    ZMOE_LOG(info, "hidden info");
    ZMOE_LOG(warn, "shown warn " << 42);
    ZMOE_LOG(error, "shown error");
    const std::string out = testing::internal::GetCapturedStderr();
    zmoe::log_set_level(saved);
    EXPECT_EQ(out.find("hidden"), std::string::npos) << out;
    // Two lines like "2026-11-22T19:37:20.123Z WARN  tester[1234] shown warn 42".
    const std::string line =
        R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z (WARN |ERROR) tester\[\d+\] shown (warn 42|error)\n)";
    EXPECT_TRUE(std::regex_match(out, std::regex("(" + line + "){2}"))) << out;
}

TEST(Log, LevelNamesRoundTrip) {
    for (auto l : {zmoe::log_level::debug, zmoe::log_level::info, zmoe::log_level::warn, zmoe::log_level::error})
        EXPECT_EQ(zmoe::log_level_from_name(zmoe::log_level_name(l)), l);
    EXPECT_EQ(zmoe::log_level_from_name("warning"), zmoe::log_level::warn);
    EXPECT_FALSE(zmoe::log_level_from_name("verbose"));
    EXPECT_FALSE(zmoe::log_level_from_name("INFO"));
}
