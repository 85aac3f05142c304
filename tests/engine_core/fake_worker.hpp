#pragma once
// A stand-in for one data-parallel rank's worker, for scheduler tests. It keeps a fake paged KV cache (one token id
// per slot), writes each scheduled chunk through the block table, and "samples" a token that depends on the whole
// sequence read back through the block table. So any scheduler bug that feeds a wrong token, a wrong position, a
// block table not covering the sequence, or a block shared by two live sequences changes the generated tokens.
// It honours placeholders the way a real worker does: the token it sampled last for that request.

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "messages/step_types.hpp"

namespace zmoe::testing {

class fake_worker {
  public:
    fake_worker(int32_t rank, int32_t num_blocks, int32_t block_size, int32_t vocab_size,
                const std::unordered_map<uint64_t, int32_t>* prompt_lens)
        : rank_(rank),
          block_size_(block_size),
          vocab_size_(vocab_size),
          prompt_lens_(prompt_lens),
          kv_(static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size), -7) {}

    step_result run(const step_request& step) {
        step_result res;
        res.step_id = step.step_id;
        res.rank = rank_;
        // Blocks may be shared between sequences (prefix caching) only for reading: a block one sequence writes in
        // a step appears in no other sequence's table of that step, and is written by that sequence alone.
        std::map<int32_t, int32_t> readers;  // block -> sequences whose table holds it
        std::set<int32_t> written;
        for (const scheduled_seq& seq : step.seqs) {
            const int32_t n = static_cast<int32_t>(seq.token_ids.size());
            std::set<int32_t> in_table;
            for (const int32_t b : seq.block_table) {
                EXPECT_TRUE(in_table.insert(b).second) << "block " << b << " twice in one table";
                ++readers[b];
            }
            for (int32_t p = seq.start_pos; p < seq.start_pos + n; ++p) {
                const auto i = static_cast<size_t>(p / block_size_);
                if (i < seq.block_table.size()) written.insert(seq.block_table[i]);
            }
        }
        for (const int32_t b : written) {
            EXPECT_EQ(readers[b], 1) << "block " << b << " written in step " << step.step_id
                                     << " while another sequence holds it";
        }
        for (const scheduled_seq& seq : step.seqs) {
            const int32_t n = static_cast<int32_t>(seq.token_ids.size());
            EXPECT_GE(n, 1) << "request " << seq.request_id;
            const int32_t end = seq.start_pos + n;
            EXPECT_EQ(static_cast<int32_t>(seq.block_table.size()), (end + block_size_ - 1) / block_size_)
                << "block table of request " << seq.request_id << " does not cover exactly [0, " << end << ")";
            for (const int32_t b : seq.block_table) {
                EXPECT_GE(b, 0);
                EXPECT_LT(static_cast<size_t>(b) * block_size_, kv_.size());
            }
            for (int32_t i = 0; i < n; ++i) {
                int32_t token = seq.token_ids[static_cast<size_t>(i)];
                if (token == kPlaceholderToken) {
                    ++num_placeholders;
                    EXPECT_EQ(n, 1) << "placeholder inside a chunk of request " << seq.request_id;
                    auto it = kept_.find(seq.request_id);
                    EXPECT_NE(it, kept_.end()) << "placeholder without a kept token for request " << seq.request_id;
                    if (it == kept_.end()) continue;
                    token = it->second;
                }
                slot(seq.block_table, seq.start_pos + i) = token;
            }
            if (seq.do_sample) {
                if (prompt_lens_ != nullptr && prompt_lens_->contains(seq.request_id)) {
                    EXPECT_EQ(static_cast<int32_t>(seq.sample_index), end - prompt_lens_->at(seq.request_id))
                        << "sample_index of request " << seq.request_id;
                }
                const int32_t token = sample(seq.request_id, seq.block_table, end);
                kept_[seq.request_id] = token;
                res.tokens.push_back({seq.request_id, token});
            }
        }
        for (const uint64_t id : step.finished_ids) kept_.erase(id);
        return res;
    }

    /// What the sampled token after `sequence` would be; the same function run() applies to the cached sequence.
    static int32_t expected_token(uint64_t id, const std::vector<int32_t>& sequence, int32_t vocab_size) {
        uint64_t h = id * 31;
        for (const int32_t t : sequence) h = mix(h ^ static_cast<uint64_t>(t));
        return static_cast<int32_t>(mix(h + sequence.size()) % static_cast<uint64_t>(vocab_size));
    }

    /// splitmix64's finaliser: every output bit depends on every input bit, so tokens look random mod any V.
    static uint64_t mix(uint64_t x) {
        x += 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        return x ^ (x >> 31);
    }

    size_t num_kept() const { return kept_.size(); }
    int64_t num_placeholders = 0;

  private:
    int32_t& slot(const std::vector<int32_t>& table, int32_t pos) {
        const int32_t b = table[static_cast<size_t>(pos / block_size_)];
        return kv_[static_cast<size_t>(b) * block_size_ + static_cast<size_t>(pos % block_size_)];
    }

    int32_t sample(uint64_t id, const std::vector<int32_t>& table, int32_t end) {
        std::vector<int32_t> seq(static_cast<size_t>(end));
        for (int32_t p = 0; p < end; ++p) seq[static_cast<size_t>(p)] = slot(table, p);
        return expected_token(id, seq, vocab_size_);
    }

    int32_t rank_;
    int32_t block_size_;
    int32_t vocab_size_;
    const std::unordered_map<uint64_t, int32_t>* prompt_lens_;
    std::vector<int32_t> kv_;
    std::unordered_map<uint64_t, int32_t> kept_;
};

}  // namespace zmoe::testing
