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
    lcp_.assign(sorted_.size(), 0);
    for (size_t i = 1; i < sorted_.size(); ++i) {
        const std::string& a = bytes_[static_cast<size_t>(sorted_[i - 1])];
        const std::string& b = bytes_[static_cast<size_t>(sorted_[i])];
        size_t n = 0;
        while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
        lcp_[i] = static_cast<int32_t>(n);
    }
    text_mask_.assign(bitmask_words(), 0);
    for (int32_t id : sorted_) text_mask_[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
}

}  // namespace zmoe::grammar
