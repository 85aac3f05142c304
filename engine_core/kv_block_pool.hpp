#pragma once
// The paged KV cache's bookkeeping for one data-parallel rank: which of its fixed number of blocks are free.
// The blocks themselves live on the worker's device; the engine core only hands out their ids.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace zmoe {

/// A fixed pool of `num_blocks` KV blocks of `block_size` token slots each, ids 0 .. num_blocks-1.
///
/// Reuse order is LIFO: the most recently freed block is handed out first (its cache lines are the likeliest to
/// still be warm, and it keeps the set of touched blocks small when the pool is mostly idle). Allocation is all
/// or nothing. Freeing a block that is not allocated is a bug in the caller and aborts (ZMOE_CHECK).
class kv_block_pool {
  public:
    /// num_blocks >= 0, block_size >= 1; anything else throws zmoe::error(invalid_argument).
    kv_block_pool(int32_t num_blocks, int32_t block_size);

    /// Takes `n` blocks (n >= 0). Returns their ids, or std::nullopt (and takes nothing) when fewer than n are free.
    std::optional<std::vector<int32_t>> block_alloc(int32_t n);
    /// Appends `n` freshly taken block ids to `out`; returns false (and leaves `out` unchanged) when fewer are free.
    bool block_alloc_into(int32_t n, std::vector<int32_t>& out);
    /// Returns blocks to the pool. Each id must be currently allocated.
    void block_free(std::span<const int32_t> ids);

    int32_t num_blocks() const { return static_cast<int32_t>(allocated_.size()); }
    int32_t block_size() const { return block_size_; }
    int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
    int32_t num_used() const { return num_blocks() - num_free(); }
    /// Blocks needed to hold `num_tokens` token slots: ceil(num_tokens / block_size).
    int32_t blocks_for_tokens(int64_t num_tokens) const {
        return static_cast<int32_t>((num_tokens + block_size_ - 1) / block_size_);
    }

  private:
    int32_t block_size_;
    std::vector<int32_t> free_;       // stack: back() is handed out next
    std::vector<uint8_t> allocated_;  // [num_blocks], 1 while handed out
};

}  // namespace zmoe
