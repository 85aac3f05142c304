// ZMOE_DECODE_TUNING's parser (decode_tuning.hpp): empty (as unset) gives the defaults, `none` no variant, names
// exactly those, "all" every one; an unknown or empty name, a variant deleted after its measurement, or `none` beside
// other names is refused, and the message names the bad entry and the known names. Host only.

#include "kernels/decode_tuning.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace zmoe::kernels::test {
namespace {

decode_tuning parsed(const char* value) {
    decode_tuning t;
    std::string error;
    EXPECT_TRUE(parse_decode_tuning(value, &t, &error)) << error;
    return t;
}

TEST(DecodeTuning, TheDefaultsAreEveryVariant) {
    EXPECT_EQ(kDefaultDecodeTuning, (decode_tuning{.gemv_wave = true, .combine_early = true, .norm_early = true}));
}

TEST(DecodeTuning, EmptyIsTheDefaults) { EXPECT_EQ(parsed(""), kDefaultDecodeTuning); }

TEST(DecodeTuning, NoneIsTheOlderKernels) {
    EXPECT_EQ(parsed("none"), decode_tuning{});
    EXPECT_EQ(decode_tuning{}, (decode_tuning{.gemv_wave = false, .combine_early = false, .norm_early = false}));
}

TEST(DecodeTuning, NamesTurnOnTheirVariantOnly) {
    EXPECT_EQ(parsed("gemv_wave"), (decode_tuning{.gemv_wave = true}));
    EXPECT_EQ(parsed("combine_early"), (decode_tuning{.combine_early = true}));
    EXPECT_EQ(parsed("norm_early,gemv_wave,norm_early"), (decode_tuning{.gemv_wave = true, .norm_early = true}));
    EXPECT_EQ(parsed("gemv_wave,combine_early,norm_early"), kDefaultDecodeTuning);
}

TEST(DecodeTuning, AllTurnsOnEveryVariant) {
    EXPECT_EQ(parsed("all"), kDefaultDecodeTuning);
    EXPECT_EQ(parsed("gemv_wave,all"), kDefaultDecodeTuning);
}

TEST(DecodeTuning, UnknownDeletedOrEmptyNameIsRefused) {
    // skinny_smem, moe_down_stage and qkv_skinny were measured and deleted (docs/kernels.md): refused like any other.
    for (const char* bad : {"gemv", "gemv_wave,", ",gemv_wave", ",", "GEMV_WAVE", "NONE", "gemv_wave norm_early",
                            "skinny_smem", "moe_down_stage", "qkv_skinny", "norm_early,qkv_skinny"}) {
        decode_tuning t{.combine_early = true};
        std::string error;
        EXPECT_FALSE(parse_decode_tuning(bad, &t, &error)) << bad;
        EXPECT_NE(error.find("ZMOE_DECODE_TUNING"), std::string::npos) << error;
        EXPECT_NE(error.find("unknown variant"), std::string::npos) << error;
        EXPECT_NE(error.find("(known: all, none, gemv_wave, combine_early, norm_early)"), std::string::npos)
            << "the known names are listed: " << error;
        EXPECT_EQ(t, decode_tuning{.combine_early = true}) << "a refused value leaves the output alone";
    }
}

TEST(DecodeTuning, NoneBesideOtherNamesIsRefused) {
    for (const char* bad : {"none,gemv_wave", "gemv_wave,none", "none,", "none,none", "all,none"}) {
        decode_tuning t{.combine_early = true};
        std::string error;
        EXPECT_FALSE(parse_decode_tuning(bad, &t, &error)) << bad;
        EXPECT_NE(error.find("ZMOE_DECODE_TUNING"), std::string::npos) << error;
        EXPECT_NE(error.find(bad), std::string::npos) << "the value is named: " << error;
        EXPECT_EQ(t, decode_tuning{.combine_early = true}) << "a refused value leaves the output alone";
    }
}

TEST(DecodeTuning, TheEnvironmentIsReadAtTheFirstCall) {
    // Each case in a fresh process (threadsafe death tests re-run the binary), where nothing has read the variable yet.
    const std::string style = GTEST_FLAG_GET(death_test_style);
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            unsetenv("ZMOE_DECODE_TUNING");
            std::exit(current_decode_tuning() == kDefaultDecodeTuning ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "")
        << "unset: the defaults";
    EXPECT_EXIT(
        {
            setenv("ZMOE_DECODE_TUNING", "none", 1);
            std::exit(current_decode_tuning() == decode_tuning{} ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "")
        << "none: no variant";
    EXPECT_DEATH(
        {
            setenv("ZMOE_DECODE_TUNING", "gemv_wave,moe_down_stage", 1);
            current_decode_tuning();
        },
        "zmoe: ZMOE_DECODE_TUNING: unknown variant 'moe_down_stage'")
        << "a deleted variant stops the process";
    GTEST_FLAG_SET(death_test_style, style);
}

TEST(DecodeTuning, SetReplacesWhatTheLaunchersRead) {
    const decode_tuning before = current_decode_tuning();
    set_decode_tuning({.norm_early = true});
    EXPECT_EQ(current_decode_tuning(), (decode_tuning{.norm_early = true}));
    set_decode_tuning({});
    EXPECT_EQ(current_decode_tuning(), decode_tuning{});
    set_decode_tuning(before);
    EXPECT_EQ(current_decode_tuning(), before);
}

}  // namespace
}  // namespace zmoe::kernels::test
