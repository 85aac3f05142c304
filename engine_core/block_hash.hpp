#pragma once
// The identity of a full KV block for prefix caching: a 128-bit hash chained over the block's parent hash, its token
// ids and the request's extra keys (its cache salt), so two blocks share a hash only when they hold the same tokens
// after the same prefix under the same salt. Keyed SipHash-2-4 with 128-bit output (Aumasson and Bernstein): a
// pseudo-random function of its input under a 128-bit key drawn once per engine run, so a client cannot construct
// two prefixes that collide (which would let one request read another's KV), and an accidental collision among
// 100 000 cached blocks has probability about 2^-95. docs/scheduler.md, "Prefix caching".

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace zmoe {

struct block_hash {
    uint64_t lo = 0;
    uint64_t hi = 0;
    bool operator==(const block_hash&) const = default;
};

/// For unordered containers: lo is already uniformly distributed.
struct block_hash_hasher {
    size_t operator()(const block_hash& h) const noexcept { return static_cast<size_t>(h.lo); }
};

/// SipHash-2-4 of `bytes` under key (k0, k1): the 64-bit variant.
uint64_t siphash24_64(uint64_t k0, uint64_t k1, std::span<const uint8_t> bytes);
/// SipHash-2-4 of `bytes` under key (k0, k1): the 128-bit variant.
block_hash siphash24_128(uint64_t k0, uint64_t k1, std::span<const uint8_t> bytes);

/// Hashes the full blocks of token sequences under one key (one per engine run; tests pass a fixed one).
class block_hasher {
  public:
    block_hasher(uint64_t k0, uint64_t k1) : k0_(k0), k1_(k1) {}
    /// A key from std::random_device.
    static block_hasher random();

    /// The parent of a sequence's first block: all zeros without a salt, else the hash of the salt's bytes (so a
    /// salt changes every block of the chain).
    block_hash root(std::string_view cache_salt) const;
    /// The hash of one block: H(parent, token ids), token ids as little-endian int32.
    block_hash next(const block_hash& parent, std::span<const int32_t> block_tokens) const;
    /// Extends `hashes` (the chain of `tokens`' first hashes.size() full blocks, under `root`) to every full block of
    /// `tokens`, or to `max_blocks` when fewer.
    void extend(std::vector<block_hash>& hashes, const block_hash& root, std::span<const int32_t> tokens,
                int32_t block_size, size_t max_blocks = SIZE_MAX) const;

  private:
    uint64_t k0_;
    uint64_t k1_;
};

}  // namespace zmoe
