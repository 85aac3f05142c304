#include "workers/step_validation.hpp"

#include <string>
#include <unordered_set>

#include "base/error.hpp"

namespace zmoe {

namespace {

[[noreturn]] void bad_request(const step_request& r, const std::string& what) {
    throw error(errc::invalid_argument, "step " + std::to_string(r.step_id) + ": " + what);
}

}  // namespace

std::vector<std::vector<int32_t>> validate_step(const step_request& request, int64_t block_size, int64_t num_kv_blocks,
                                                int64_t vocab_size,
                                                const std::unordered_map<uint64_t, int32_t>& last_sampled) {
    std::vector<std::vector<int32_t>> tokens;
    tokens.reserve(request.seqs.size());
    std::unordered_set<uint64_t> seen;
    for (const scheduled_seq& s : request.seqs) {
        const std::string who = "request " + std::to_string(s.request_id);
        if (!seen.insert(s.request_id).second) bad_request(request, who + " scheduled twice");
        if (s.token_ids.empty()) bad_request(request, who + " has no tokens");
        if (s.start_pos < 0) bad_request(request, who + " has negative start_pos");
        const int64_t end = s.start_pos + static_cast<int64_t>(s.token_ids.size());
        if (static_cast<int64_t>(s.block_table.size()) * block_size < end)
            bad_request(request, who + ": block table of " + std::to_string(s.block_table.size()) + " blocks of " +
                                     std::to_string(block_size) + " does not cover position " +
                                     std::to_string(end - 1));
        for (int32_t blk : s.block_table)
            if (blk < 0 || blk >= num_kv_blocks)
                bad_request(request, who + ": KV block " + std::to_string(blk) + " outside [0, " +
                                         std::to_string(num_kv_blocks) + ")");
        if (s.do_sample && (!(s.sampling.temperature >= 0.f) || !(s.sampling.top_p > 0.f && s.sampling.top_p <= 1.f) ||
                            s.sampling.top_k < 0))
            bad_request(request, who + ": sampling needs temperature >= 0, top_p in (0, 1], top_k >= 0");
        auto& resolved = tokens.emplace_back();
        resolved.reserve(s.token_ids.size());
        for (int32_t tok : s.token_ids) {
            if (tok == kPlaceholderToken) {
                auto it = last_sampled.find(s.request_id);
                if (it == last_sampled.end())
                    bad_request(request, who + ": placeholder token but no token was sampled for it before");
                tok = it->second;
            }
            if (tok < 0 || tok >= vocab_size)
                bad_request(request, who + ": token " + std::to_string(tok) + " outside the vocabulary of " +
                                         std::to_string(vocab_size));
            resolved.push_back(tok);
        }
    }
    return tokens;
}

}  // namespace zmoe
