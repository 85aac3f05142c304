#include "base/error.hpp"

#include <gtest/gtest.h>

#include "base/check.hpp"

TEST(Error, CarriesCodeAndMessage) {
    try {
        throw zmoe::error(zmoe::errc::invalid_checkpoint, "model.safetensors: tensor 'x' missing");
    } catch (const zmoe::error& e) {
        EXPECT_EQ(e.code(), zmoe::errc::invalid_checkpoint);
        EXPECT_STREQ(zmoe::errc_name(e.code()), "invalid_checkpoint");
        EXPECT_NE(std::string(e.what()).find("tensor 'x'"), std::string::npos);
    }
}

TEST(Check, AbortsWithFileAndLine) {
    EXPECT_DEATH(ZMOE_CHECK(1 + 1 == 3, "arithmetic is "
                                            << "broken"),
                 "error_test.cpp:[0-9]+.*arithmetic is broken");
}
