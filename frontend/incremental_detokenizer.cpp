#include "frontend/incremental_detokenizer.hpp"

namespace zmoe {

incremental_detokenizer::incremental_detokenizer(const tokenizer& tok, bool skip_special)
    : tok_(&tok), skip_special_(skip_special), stream_(tok.token_decoder()) {}

std::string incremental_detokenizer::push(int32_t id) {
    tok_->token_bytes(id);  // throws before any state changes
    std::string out;
    if (skip_special_ && tok_->is_special(id)) return out;
    stream_.push(id, out);
    return out;
}

std::string incremental_detokenizer::flush() {
    std::string out;
    stream_.finish(out);
    return out;
}

}  // namespace zmoe
