// The workspace's ZMOE_DECODE_ATTENTION_SPLITS parser: a split count in range or nothing; anything else refused with
// errc::invalid_argument naming the value. Host only.

#include "workers/cuda/cuda_workspace.hpp"

#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"
#include "kernels/api.hpp"

namespace zmoe::cuda {
namespace {

TEST(CudaWorkspaceAttentionSplits, UnsetOrEmptyIsTheShapesChoice) {
    EXPECT_EQ(parse_attention_splits(nullptr), 0);
    EXPECT_EQ(parse_attention_splits(""), 0);
}

TEST(CudaWorkspaceAttentionSplits, ACountInRange) {
    EXPECT_EQ(parse_attention_splits("1"), 1);
    EXPECT_EQ(parse_attention_splits("9"), 9);
    EXPECT_EQ(parse_attention_splits(std::to_string(kernels::kDecodeAttentionMaxSplits).c_str()),
              kernels::kDecodeAttentionMaxSplits);
}

TEST(CudaWorkspaceAttentionSplits, AnythingElseIsRefused) {
    for (const std::string bad : {"0", "-8", "257", "8x", "x", "8 ", "99999999999999999999"}) {
        try {
            parse_attention_splits(bad.c_str());
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const error& e) {
            EXPECT_EQ(e.code(), errc::invalid_argument) << bad;
            EXPECT_NE(std::string(e.what()).find("'" + bad + "'"), std::string::npos) << e.what();
        }
    }
}

}  // namespace
}  // namespace zmoe::cuda
