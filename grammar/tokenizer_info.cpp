#include "grammar/tokenizer_info.hpp"

#include <algorithm>

#include "base/error.hpp"

namespace zmoe::grammar {

tokenizer_info::tokenizer_info(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids,
                               const std::vector<int32_t>& special_ids)
    : bytes_(std::move(token_bytes)), stop_ids_(std::move(stop_ids)) {
    kind_.assign(bytes_.size(), 0);
    for (size_t i = 0; i < bytes_.size(); ++i)
        if (bytes_[i].empty()) kind_[i] = 2;
    for (int32_t id : special_ids)
        if (id >= 0 && static_cast<size_t>(id) < bytes_.size()) kind_[static_cast<size_t>(id)] = 2;
    for (int32_t id : stop_ids_) {
        if (id < 0 || static_cast<size_t>(id) >= bytes_.size())
            throw zmoe::error(errc::invalid_argument,
                              "tokenizer_info: stop id " + std::to_string(id) + " outside the vocabulary");
        kind_[static_cast<size_t>(id)] = 1;
    }
    for (size_t i = 0; i < bytes_.size(); ++i)
        if (kind_[i] == 0) sorted_.push_back(static_cast<int32_t>(i));
    std::sort(sorted_.begin(), sorted_.end(),
              [&](int32_t a, int32_t b) { return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)]; });
    sorted_begin_.push_back(0);
    for (int32_t id : sorted_) {
        sorted_bytes_ += bytes_[static_cast<size_t>(id)];
        sorted_begin_.push_back(static_cast<uint32_t>(sorted_bytes_.size()));
    }
    lcp_.assign(sorted_.size(), 0);
    for (size_t i = 1; i < sorted_.size(); ++i) {
        const std::string& a = bytes_[static_cast<size_t>(sorted_[i - 1])];
        const std::string& b = bytes_[static_cast<size_t>(sorted_[i])];
        size_t n = 0;
        while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
        lcp_[i] = static_cast<int32_t>(n);
    }
    lcp_min_.push_back(lcp_);
    for (size_t k = 1; (size_t{1} << k) <= lcp_.size(); ++k) {
        const std::vector<int32_t>& prev = lcp_min_.back();
        std::vector<int32_t> cur(lcp_.size() - (size_t{1} << k) + 1);
        for (size_t i = 0; i < cur.size(); ++i) cur[i] = std::min(prev[i], prev[i + (size_t{1} << (k - 1))]);
        lcp_min_.push_back(std::move(cur));
    }
    for (size_t i = 0; i < sorted_.size(); ++i) {
        const std::string_view b = sorted_token(static_cast<int32_t>(i));
        max_bytes_ = std::max(max_bytes_, b.size());
        bool rare = false;
        for (char c : b) rare = rare || is_rare_byte(static_cast<uint8_t>(c));
        std::vector<int32_t>& list = rare ? rare_ : common_;
        std::vector<int32_t>& list_lcp = rare ? rare_lcp_ : common_lcp_;
        list_lcp.push_back(list.empty() ? 0 : min_lcp(list.back() + 1, static_cast<int32_t>(i) + 1));
        list.push_back(static_cast<int32_t>(i));
        (rare ? max_rare_bytes_ : max_common_bytes_) = std::max(rare ? max_rare_bytes_ : max_common_bytes_, b.size());
    }
    first_at_least_.assign(257, static_cast<int32_t>(sorted_.size()));
    for (size_t i = sorted_.size(); i-- > 0;)
        first_at_least_[static_cast<uint8_t>(sorted_token(static_cast<int32_t>(i))[0])] = static_cast<int32_t>(i);
    for (size_t b = 256; b-- > 0;) first_at_least_[b] = std::min(first_at_least_[b], first_at_least_[b + 1]);
    longer_.resize(max_common_bytes_ + 1);
    longer_lcp_.resize(max_common_bytes_ + 1);
    longer_[0] = common_;
    longer_lcp_[0] = common_lcp_;
    for (size_t d = 1; d <= max_common_bytes_; ++d) {
        for (int32_t i : longer_[d - 1]) {
            if (sorted_token_size(i) <= d) continue;
            longer_lcp_[d].push_back(longer_[d].empty() ? 0 : min_lcp(longer_[d].back() + 1, i + 1));
            longer_[d].push_back(i);
        }
    }
    text_mask_.assign(bitmask_words(), 0);
    for (int32_t id : sorted_) text_mask_[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
}

int32_t tokenizer_info::min_lcp(int32_t lo, int32_t hi) const {
    const int k = 31 - __builtin_clz(static_cast<uint32_t>(hi - lo));
    const std::vector<int32_t>& t = lcp_min_[static_cast<size_t>(k)];
    return std::min(t[static_cast<size_t>(lo)], t[static_cast<size_t>(hi - (1 << k))]);
}

int32_t tokenizer_info::subtree_end(int32_t i, int32_t depth) const {
    const int32_t n = static_cast<int32_t>(sorted_.size());
    int32_t lo = i + 1;
    for (int32_t len = 1; lo < n; len *= 2) {
        int32_t hi = std::min(n, lo + len);
        if (min_lcp(lo, hi) < depth) {
            while (hi - lo > 1) {  // the first index in [lo, hi) below depth
                int32_t mid = lo + (hi - lo) / 2;
                if (min_lcp(lo, mid) < depth)
                    hi = mid;
                else
                    lo = mid;
            }
            return lo;
        }
        lo = hi;
    }
    return n;
}

}  // namespace zmoe::grammar
