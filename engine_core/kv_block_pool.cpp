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
    const auto n = static_cast<size_t>(num_blocks);
    ref_count_.assign(n, 0);
    prev_.assign(n, kNone);
    next_.assign(n, kNone);
    hashed_.assign(n, 0);
    hash_.assign(n, block_hash{});
    cached_.reserve(n);
    // A fresh pool hands out 0, 1, 2, ... (easier to read in logs and tests).
    for (int32_t id = 0; id < num_blocks; ++id) queue_push_back(id);
}

void kv_block_pool::queue_unlink(int32_t id) {
    const auto i = static_cast<size_t>(id);
    if (prev_[i] != kNone) {
        next_[static_cast<size_t>(prev_[i])] = next_[i];
    } else {
        head_ = next_[i];
    }
    if (next_[i] != kNone) {
        prev_[static_cast<size_t>(next_[i])] = prev_[i];
    } else {
        tail_ = prev_[i];
    }
    prev_[i] = next_[i] = kNone;
    --num_free_;
}

void kv_block_pool::queue_push_front(int32_t id) {
    const auto i = static_cast<size_t>(id);
    prev_[i] = kNone;
    next_[i] = head_;
    if (head_ != kNone) {
        prev_[static_cast<size_t>(head_)] = id;
    } else {
        tail_ = id;
    }
    head_ = id;
    ++num_free_;
}

void kv_block_pool::queue_push_back(int32_t id) {
    const auto i = static_cast<size_t>(id);
    next_[i] = kNone;
    prev_[i] = tail_;
    if (tail_ != kNone) {
        next_[static_cast<size_t>(tail_)] = id;
    } else {
        head_ = id;
    }
    tail_ = id;
    ++num_free_;
}

std::optional<std::vector<int32_t>> kv_block_pool::block_alloc(int32_t n) {
    std::vector<int32_t> ids;
    if (!block_alloc_into(n, ids)) return std::nullopt;
    return ids;
}

bool kv_block_pool::block_alloc_into(int32_t n, std::vector<int32_t>& out) {
    ZMOE_CHECK(n >= 0, "kv_block_pool::block_alloc: negative count " << n);
    if (n > num_free_) return false;
    out.reserve(out.size() + static_cast<size_t>(n));
    for (int32_t k = 0; k < n; ++k) {
        const int32_t id = head_;
        const auto i = static_cast<size_t>(id);
        queue_unlink(id);
        if (hashed_[i]) {  // eviction: its prefix is no longer findable
            cached_.erase(hash_[i]);
            hashed_[i] = 0;
            ++num_evicted_;
        }
        ref_count_[i] = 1;
        out.push_back(id);
    }
    return true;
}

void kv_block_pool::block_free(std::span<const int32_t> ids) {
    for (const int32_t id : ids) {
        ZMOE_CHECK(id >= 0 && id < num_blocks(), "kv_block_pool::block_free: block id " << id << " out of range");
        ZMOE_CHECK(ref_count_[static_cast<size_t>(id)] >= 1,
                   "kv_block_pool::block_free: block " << id << " is not allocated");
    }
    // Uncached blocks to the head in table order (the last one freed is handed out first), cached ones to the tail
    // in reverse table order (a sequence's deepest block is evicted before its first).
    for (const int32_t id : ids) {
        const auto i = static_cast<size_t>(id);
        if (--ref_count_[i] == 0 && !hashed_[i]) queue_push_front(id);
    }
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
        const auto i = static_cast<size_t>(*it);
        if (ref_count_[i] == 0 && hashed_[i] && prev_[i] == kNone && next_[i] == kNone && head_ != *it) {
            queue_push_back(*it);
        }
    }
}

void kv_block_pool::block_share(std::span<const int32_t> ids) {
    for (const int32_t id : ids) {
        ZMOE_CHECK(id >= 0 && id < num_blocks(), "kv_block_pool::block_share: block id " << id << " out of range");
        const auto i = static_cast<size_t>(id);
        if (ref_count_[i] == 0) queue_unlink(id);
        ++ref_count_[i];
    }
}

bool kv_block_pool::block_publish(int32_t id, const block_hash& hash) {
    ZMOE_CHECK(id >= 0 && id < num_blocks() && ref_count_[static_cast<size_t>(id)] >= 1,
               "kv_block_pool::block_publish: block " << id << " is not in use");
    const auto i = static_cast<size_t>(id);
    if (hashed_[i]) return false;
    if (!cached_.emplace(hash, id).second) return false;
    hashed_[i] = 1;
    hash_[i] = hash;
    return true;
}

int32_t kv_block_pool::block_find(const block_hash& hash) const {
    auto it = cached_.find(hash);
    return it == cached_.end() ? -1 : it->second;
}

int32_t kv_block_pool::num_cached_prefix(std::span<const block_hash> hashes) const {
    int32_t n = 0;
    for (const block_hash& h : hashes) {
        if (!cached_.contains(h)) break;
        ++n;
    }
    return n;
}

int32_t kv_block_pool::num_free_among(std::span<const int32_t> ids) const {
    int32_t n = 0;
    for (const int32_t id : ids) n += ref_count_.at(static_cast<size_t>(id)) == 0 ? 1 : 0;
    return n;
}

}  // namespace zmoe
