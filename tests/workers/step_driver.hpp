#pragma once
// A miniature engine core for tests: keeps sequences, hands out KV blocks, and builds step_requests with
// chunked prefill and placeholder decodes the way the real scheduler does.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <vector>

#include "messages/step_types.hpp"

namespace zmoe::testing {

struct driven_seq {
    uint64_t id = 0;
    std::vector<int32_t> prompt;
    int64_t max_new_tokens = 0;
    int64_t pos = 0;  // tokens already fed
    std::vector<int32_t> blocks;
    std::vector<int32_t> generated;
    std::vector<std::vector<float>> logits;  // per sample
    sampling_params sampling;
    bool done() const { return static_cast<int64_t>(generated.size()) >= max_new_tokens; }
};

class step_driver {
  public:
    /// chunk: prefill chunk size (0 = whole prompt in one step).
    step_driver(int64_t block_size, int64_t chunk) : block_size_(block_size), chunk_(chunk) {}

    driven_seq& add(uint64_t id, std::vector<int32_t> prompt, int64_t max_new_tokens) {
        driven_seq s;
        s.id = id;
        s.prompt = std::move(prompt);
        s.max_new_tokens = max_new_tokens;
        seqs_.push_back(std::move(s));
        return seqs_.back();
    }

    bool all_done() const {
        return std::all_of(seqs_.begin(), seqs_.end(), [](const driven_seq& s) { return s.done(); });
    }

    /// The next step for every unfinished sequence.
    step_request next() {
        step_request r;
        r.step_id = step_id_++;
        for (driven_seq& s : seqs_) {
            if (s.done()) continue;
            scheduled_seq q;
            q.request_id = s.id;
            q.start_pos = static_cast<int32_t>(s.pos);
            const auto plen = static_cast<int64_t>(s.prompt.size());
            if (s.pos < plen) {
                const int64_t n = chunk_ > 0 ? std::min(chunk_, plen - s.pos) : plen - s.pos;
                q.token_ids.assign(s.prompt.begin() + s.pos, s.prompt.begin() + s.pos + n);
                q.do_sample = s.pos + n == plen;
            } else {
                q.token_ids = {kPlaceholderToken};
                q.do_sample = true;
            }
            s.pos += static_cast<int64_t>(q.token_ids.size());
            while (static_cast<int64_t>(s.blocks.size()) * block_size_ < s.pos) s.blocks.push_back(next_block_++);
            q.block_table = s.blocks;
            q.sample_index = static_cast<uint32_t>(s.generated.size());
            q.sampling = s.sampling;
            r.seqs.push_back(std::move(q));
        }
        return r;
    }

    /// Records the tokens (and logits, one per sampled seq in step order) of a step built by next().
    void record(const step_request& r, const step_result& res, const std::vector<std::vector<float>>& logits) {
        size_t k = 0;
        for (const scheduled_seq& q : r.seqs) {
            if (!q.do_sample) continue;
            driven_seq& s = find(q.request_id);
            s.generated.push_back(res.tokens.at(k).token_id);
            s.logits.push_back(logits.at(k));
            ++k;
        }
    }

    driven_seq& find(uint64_t id) {
        for (driven_seq& s : seqs_)
            if (s.id == id) return s;
        return seqs_.front();
    }
    std::deque<driven_seq>& seqs() { return seqs_; }
    int32_t blocks_used() const { return next_block_; }

  private:
    int64_t block_size_;
    int64_t chunk_;
    uint64_t step_id_ = 0;
    int32_t next_block_ = 0;
    std::deque<driven_seq> seqs_;
};

}  // namespace zmoe::testing
