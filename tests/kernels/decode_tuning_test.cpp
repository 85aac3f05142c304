// ZMOE_DECODE_TUNING's parser (decode_tuning.hpp): names, "all", empty; an unknown or empty name is refused and the
// message names it and the known variants. Host only.

#include "kernels/decode_tuning.hpp"

#include <gtest/gtest.h>

#include <string>

namespace zmoe::kernels::test {
namespace {

decode_tuning parsed(const char* value) {
    decode_tuning t;
    std::string error;
    EXPECT_TRUE(parse_decode_tuning(value, &t, &error)) << error;
    return t;
}

TEST(DecodeTuning, EmptyIsTheMeasuredKernels) { EXPECT_EQ(parsed(""), decode_tuning{}); }

TEST(DecodeTuning, NamesTurnOnTheirVariantOnly) {
    EXPECT_EQ(parsed("gemv_wave"), (decode_tuning{.gemv_wave = true}));
    EXPECT_EQ(parsed("combine_early,moe_down_stage"), (decode_tuning{.combine_early = true, .moe_down_stage = true}));
    EXPECT_EQ(parsed("norm_early,skinny_smem,norm_early"), (decode_tuning{.skinny_smem = true, .norm_early = true}));
    EXPECT_EQ(parsed("qkv_skinny"), (decode_tuning{.qkv_skinny = true}));
}

TEST(DecodeTuning, AllTurnsOnEveryVariant) {
    const decode_tuning every{.gemv_wave = true,
                              .skinny_smem = true,
                              .combine_early = true,
                              .moe_down_stage = true,
                              .norm_early = true,
                              .qkv_skinny = true};
    EXPECT_EQ(parsed("all"), every);
    EXPECT_EQ(parsed("gemv_wave,all"), every);
}

TEST(DecodeTuning, UnknownOrEmptyNameIsRefused) {
    for (const char* bad : {"gemv", "gemv_wave,", ",gemv_wave", "GEMV_WAVE", "gemv_wave norm_early"}) {
        decode_tuning t{.gemv_wave = true};
        std::string error;
        EXPECT_FALSE(parse_decode_tuning(bad, &t, &error)) << bad;
        EXPECT_NE(error.find("ZMOE_DECODE_TUNING"), std::string::npos) << error;
        EXPECT_NE(error.find("moe_down_stage"), std::string::npos) << "the known names are listed: " << error;
        EXPECT_EQ(t, decode_tuning{.gemv_wave = true}) << "a refused value leaves the output alone";
    }
}

TEST(DecodeTuning, SetReplacesWhatTheLaunchersRead) {
    const decode_tuning before = current_decode_tuning();
    set_decode_tuning({.skinny_smem = true});
    EXPECT_EQ(current_decode_tuning(), (decode_tuning{.skinny_smem = true}));
    set_decode_tuning(before);
    EXPECT_EQ(current_decode_tuning(), before);
}

}  // namespace
}  // namespace zmoe::kernels::test
