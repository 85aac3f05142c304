#pragma once
// The paged KV cache's bookkeeping for one data-parallel rank: which of its fixed number of blocks are free, which
// are shared by running sequences (reference counts), and which hold a cached prefix (prefix caching: a full block
// published under its block_hash stays findable after its last user frees it, until the pool needs it back). The
// blocks themselves live on the worker's device; the engine core only hands out their ids.

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine_core/block_hash.hpp"

namespace zmoe {

/// A fixed pool of `num_blocks` KV blocks of `block_size` token slots each, ids 0 .. num_blocks-1.
///
/// A block is in use (reference count >= 1: held by that many sequences) or free. Free blocks form one queue that
/// allocation takes from the head:
///   - a freed block with no hash (its content is of no use to anyone) goes to the head: reuse is last in, first
///     out, as the most recently freed block's cache lines are the likeliest to still be warm;
///   - a freed block with a hash (a cached prefix block) goes to the tail, a sequence's blocks in reverse order, so
///     that the least recently used cached blocks, and of one sequence its last blocks, are evicted first (vLLM's
///     order). It stays findable by its hash until allocation takes it (eviction: the hash is dropped then).
/// Allocation is all or nothing. Freeing a block that is not in use is a bug in the caller and aborts (ZMOE_CHECK).
class kv_block_pool {
  public:
    /// num_blocks >= 0, block_size >= 1; anything else throws zmoe::error(invalid_argument).
    kv_block_pool(int32_t num_blocks, int32_t block_size);

    /// Takes `n` blocks (n >= 0), reference count 1 each. Returns their ids, or std::nullopt (and takes nothing)
    /// when fewer than n are free.
    std::optional<std::vector<int32_t>> block_alloc(int32_t n);
    /// Appends `n` freshly taken block ids to `out`; returns false (and leaves `out` unchanged) when fewer are free.
    bool block_alloc_into(int32_t n, std::vector<int32_t>& out);
    /// Drops one reference to each block, in the order of a sequence's block table; a block left with none becomes
    /// free (see the class comment for where it goes). Each id must be in use.
    void block_free(std::span<const int32_t> ids);
    /// Adds one reference to each block (cached blocks a sequence reuses); a free one leaves the free queue.
    void block_share(std::span<const int32_t> ids);

    /// Publishes block `id` (in use, full, its KV computed) under `hash`. Returns false, changing nothing, when the
    /// block already has a hash or another block holds this hash (two sequences computed the same prefix: the
    /// first stays the cached one).
    bool block_publish(int32_t id, const block_hash& hash);
    /// The block cached under `hash`, or -1.
    int32_t block_find(const block_hash& hash) const;
    /// How many of `hashes`, from the first, are cached (the length of the cached prefix, in blocks).
    int32_t num_cached_prefix(std::span<const block_hash> hashes) const;

    int32_t num_blocks() const { return static_cast<int32_t>(ref_count_.size()); }
    int32_t block_size() const { return block_size_; }
    /// Free blocks, cached ones included (allocation may evict them).
    int32_t num_free() const { return num_free_; }
    int32_t num_used() const { return num_blocks() - num_free(); }
    /// Blocks that hold a hash (in use or free).
    int32_t num_cached() const { return static_cast<int32_t>(cached_.size()); }
    /// Cached blocks whose hash allocation dropped, since construction.
    uint64_t num_evicted() const { return num_evicted_; }
    int32_t ref_count(int32_t id) const { return ref_count_.at(static_cast<size_t>(id)); }
    /// Of `ids` (distinct), how many are free: what sharing them takes out of num_free().
    int32_t num_free_among(std::span<const int32_t> ids) const;
    /// Blocks needed to hold `num_tokens` token slots: ceil(num_tokens / block_size).
    int32_t blocks_for_tokens(int64_t num_tokens) const {
        return static_cast<int32_t>((num_tokens + block_size_ - 1) / block_size_);
    }

  private:
    static constexpr int32_t kNone = -1;
    void queue_unlink(int32_t id);
    void queue_push_front(int32_t id);
    void queue_push_back(int32_t id);

    int32_t block_size_;
    std::vector<int32_t> ref_count_;  // [num_blocks]
    std::vector<int32_t> prev_;       // [num_blocks] free-queue links (kNone at the ends and for blocks in use)
    std::vector<int32_t> next_;
    std::vector<uint8_t> hashed_;  // [num_blocks] 1 when hash_[id] is published in cached_
    std::vector<block_hash> hash_;
    int32_t head_ = kNone;
    int32_t tail_ = kNone;
    int32_t num_free_ = 0;
    uint64_t num_evicted_ = 0;
    std::unordered_map<block_hash, int32_t, block_hash_hasher> cached_;
};

}  // namespace zmoe
