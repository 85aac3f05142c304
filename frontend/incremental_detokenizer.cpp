#include "frontend/incremental_detokenizer.hpp"

#include "frontend/utf8.hpp"

namespace zmoe {

incremental_detokenizer::incremental_detokenizer(const tokenizer& tok, bool skip_special)
    : tok_(&tok), skip_special_(skip_special) {}

std::string incremental_detokenizer::push(int32_t id) {
    const std::string_view bytes = tok_->token_bytes(id);  // throws before any state changes
    if (skip_special_ && tok_->is_special(id)) return {};
    if (!first_) pending_.append(tok_->token_separator());
    first_ = false;
    pending_.append(bytes);
    // Everything before an incomplete trailing sequence decodes the same whatever comes next.
    const size_t ready = pending_.size() - utf8::incomplete_tail(pending_);
    std::string out;
    if (ready == 0) return out;
    utf8::append_lossy(out, std::string_view(pending_).substr(0, ready));
    pending_.erase(0, ready);
    return out;
}

std::string incremental_detokenizer::flush() {
    std::string out;
    utf8::append_lossy(out, pending_);
    pending_.clear();
    first_ = true;
    return out;
}

}  // namespace zmoe
