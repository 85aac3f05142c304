#include "engine_core/kv_block_pool.hpp"

#include <string>

#include "base/check.hpp"
#include "base/error.hpp"

namespace zmoe {

kv_block_pool::kv_block_pool(int32_t num_blocks, int32_t block_size) : block_size_(block_size) {
    if (num_blocks < 0) {
        throw error(errc::invalid_argument,
                    "kv_block_pool: num_blocks must be >= 0, got " + std::to_string(num_blocks));
    }
    if (block_size < 1) {
        throw error(errc::invalid_argument,
                    "kv_block_pool: block_size must be >= 1, got " + std::to_string(block_size));
    }
    allocated_.assign(static_cast<size_t>(num_blocks), 0);
    free_.reserve(static_cast<size_t>(num_blocks));
    // Pushed in reverse so that a fresh pool hands out 0, 1, 2, ... (easier to read in logs and tests).
    for (int32_t id = num_blocks - 1; id >= 0; --id) free_.push_back(id);
}

std::optional<std::vector<int32_t>> kv_block_pool::block_alloc(int32_t n) {
    std::vector<int32_t> ids;
    if (!block_alloc_into(n, ids)) return std::nullopt;
    return ids;
}

bool kv_block_pool::block_alloc_into(int32_t n, std::vector<int32_t>& out) {
    ZMOE_CHECK(n >= 0, "kv_block_pool::block_alloc: negative count " << n);
    if (n > num_free()) return false;
    out.reserve(out.size() + static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
        const int32_t id = free_.back();
        free_.pop_back();
        allocated_[static_cast<size_t>(id)] = 1;
        out.push_back(id);
    }
    return true;
}

void kv_block_pool::block_free(std::span<const int32_t> ids) {
    for (const int32_t id : ids) {
        ZMOE_CHECK(id >= 0 && id < num_blocks(), "kv_block_pool::block_free: block id " << id << " out of range");
        ZMOE_CHECK(allocated_[static_cast<size_t>(id)] == 1,
                   "kv_block_pool::block_free: block " << id << " is not allocated");
        allocated_[static_cast<size_t>(id)] = 0;
        free_.push_back(id);
    }
}

}  // namespace zmoe
