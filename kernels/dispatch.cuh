#pragma once
// Runtime sizes to compile-time constants. Each DISPATCH_* binds the constant `kName` inside the body, for one of
// a fixed list of supported values, and aborts (file:line) on any other: the launcher states what it supports.

#include "kernels/cuda_check.hpp"

#define ZMOE_DISPATCH_CASE(kName, value, ...) \
    case value: {                             \
        constexpr int kName = value;          \
        __VA_ARGS__;                          \
        break;                                \
    }

/// Head dimensions of the supported attention layouts.
#define DISPATCH_HEAD_DIM(head_dim, kName, ...)                                         \
    switch (head_dim) {                                                                 \
        ZMOE_DISPATCH_CASE(kName, 16, __VA_ARGS__)                                      \
        ZMOE_DISPATCH_CASE(kName, 32, __VA_ARGS__)                                      \
        ZMOE_DISPATCH_CASE(kName, 64, __VA_ARGS__)                                      \
        ZMOE_DISPATCH_CASE(kName, 128, __VA_ARGS__)                                     \
        ZMOE_DISPATCH_CASE(kName, 256, __VA_ARGS__)                                     \
        default:                                                                        \
            ZMOE_KERNEL_REQUIRE(false, "head_dim must be one of 16, 32, 64, 128, 256"); \
    }

/// Experts held per warp lane in the router: the number of experts rounded up to 32 * kName.
#define DISPATCH_EXPERTS_PER_LANE(num_experts, kName, ...)        \
    if ((num_experts) <= 32) {                                    \
        constexpr int kName = 1;                                  \
        __VA_ARGS__;                                              \
    } else if ((num_experts) <= 64) {                             \
        constexpr int kName = 2;                                  \
        __VA_ARGS__;                                              \
    } else if ((num_experts) <= 128) {                            \
        constexpr int kName = 4;                                  \
        __VA_ARGS__;                                              \
    } else if ((num_experts) <= 256) {                            \
        constexpr int kName = 8;                                  \
        __VA_ARGS__;                                              \
    } else if ((num_experts) <= 512) {                            \
        constexpr int kName = 16;                                 \
        __VA_ARGS__;                                              \
    } else {                                                      \
        ZMOE_KERNEL_REQUIRE(false, "num_experts must be <= 512"); \
    }

/// Boolean to a compile-time constant.
#define DISPATCH_BOOL(value, kName, ...) \
    if (value) {                         \
        constexpr bool kName = true;     \
        __VA_ARGS__;                     \
    } else {                             \
        constexpr bool kName = false;    \
        __VA_ARGS__;                     \
    }
