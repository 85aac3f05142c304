#include "workers/grammar_masks.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/check.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "frontend/tokenizer.hpp"
#include "grammar/structured_kind.hpp"

namespace zmoe {
namespace {

constexpr size_t kMaxTimes = size_t{1} << 20;  // mask times kept for the distribution (the latest ones)

}  // namespace

std::shared_ptr<const grammar::tokenizer_info> load_grammar_vocabulary(const std::string& tokenizer_path,
                                                                       const std::vector<int32_t>& stop_ids,
                                                                       int32_t vocab_size) {
    const tokenizer tok = tokenizer::from_file(tokenizer_path);
    // Ids past the logits' width can never be sampled; ids past the tokenizer's are padding and never allowed.
    std::vector<std::string> bytes(static_cast<size_t>(vocab_size));
    std::vector<int32_t> special, stops;
    for (int32_t id = 0; id < std::min(vocab_size, tok.vocab_size()); ++id) {
        if (!tok.is_valid_id(id)) continue;
        if (tok.is_special(id))
            special.push_back(id);
        else
            bytes[static_cast<size_t>(id)] = std::string(tok.token_bytes(id));
    }
    for (const int32_t id : stop_ids)
        if (id >= 0 && id < vocab_size) stops.push_back(id);
    return std::make_shared<const grammar::tokenizer_info>(std::move(bytes), std::move(stops), special);
}

grammar_masks::grammar_masks(std::string tokenizer_path, std::vector<int32_t> stop_ids, int32_t vocab_size,
                             int num_threads)
    : tokenizer_path_(std::move(tokenizer_path)),
      stop_ids_(std::move(stop_ids)),
      vocab_size_(vocab_size),
      mask_words_((vocab_size + 31) / 32),
      pool_(std::max(num_threads, 1)) {}

grammar_masks::grammar_masks(std::shared_ptr<const grammar::tokenizer_info> vocab, int num_threads)
    : mask_words_(static_cast<int32_t>(vocab->bitmask_words())), pool_(std::max(num_threads, 1)) {
    std::promise<std::shared_ptr<const grammar::tokenizer_info>> ready;
    ready.set_value(std::move(vocab));
    vocab_ = ready.get_future().share();
}

grammar_masks::~grammar_masks() {
    if (running_.valid()) running_.wait();
    const mask_time_stats s = stats();
    if (s.num_masks > 0)
        ZMOE_LOG(info, "structured outputs: " << s.num_masks << " token masks, per mask p50 " << s.p50_us << " us, p90 "
                                              << s.p90_us << " us, p99 " << s.p99_us << " us, max " << s.max_us
                                              << " us; " << s.num_refused << " sampled tokens refused, "
                                              << s.num_past_end
                                              << " stop tokens sampled after the grammar ended (ignore_eos)");
}

const grammar::tokenizer_info& grammar_masks::vocab() { return *vocab_.get(); }

grammar::grammar_compiler& grammar_masks::compiler() {
    std::call_once(compiler_once_, [&] {
        ZMOE_CHECK(static_cast<int32_t>(vocab().bitmask_words()) == mask_words_,
                   "grammar vocabulary of " << vocab().vocab_size() << " ids for masks of " << mask_words_ << " words");
        compiler_ = std::make_unique<grammar::grammar_compiler>(vocab_.get());
    });
    return *compiler_;
}

void grammar_masks::begin_step(const step_request& request, sample_batch& batch) {
    if (running_.valid()) {
        // A step that failed between begin_step and finish_masks: its masks are dropped.
        running_.wait();
        running_ = {};
    }
    for (const uint64_t id : request.finished_ids) seqs_.erase(id);
    jobs_.clear();
    size_t row = 0;
    for (const scheduled_seq& s : request.seqs) {
        if (!s.do_sample) continue;
        ZMOE_CHECK(row < batch.seqs.size(), "grammar_masks: more sampled sequences than rows");
        seq_state* st = nullptr;
        if (s.structured.active()) {
            st = &seqs_[s.request_id];
            st->matcher.reset();  // rebuilt from the constraint and the replayed tokens on the mask thread
            st->pending.clear();
            st->refused = false;
            st->past_end = 0;
        } else if (auto it = seqs_.find(s.request_id); it != seqs_.end()) {
            st = &it->second;
        }
        if (st != nullptr) {
            batch.seqs[row].mask_row = static_cast<int32_t>(jobs_.size());
            jobs_.push_back({.seq = st, .sched = &s, .mask_row = static_cast<int32_t>(jobs_.size())});
        }
        ++row;
    }
    if (jobs_.empty()) return;
    if (!vocab_.valid()) {
        vocab_ = std::async(std::launch::async, [this] {
                     const auto t0 = std::chrono::steady_clock::now();
                     auto v = load_grammar_vocabulary(tokenizer_path_, stop_ids_, vocab_size_);
                     ZMOE_LOG(info, "structured outputs: vocabulary of "
                                        << tokenizer_path_ << " loaded in "
                                        << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                                        << " s");
                     return v;
                 }).share();
    }
    masks_.resize(jobs_.size() * static_cast<size_t>(mask_words_));
    running_ = std::async(std::launch::async, [this] {
        pool_.parallel_for(static_cast<int64_t>(jobs_.size()), [this](int64_t b, int64_t e) {
            for (int64_t j = b; j < e; ++j) compute_row(jobs_[static_cast<size_t>(j)]);
        });
    });
}

void grammar_masks::stop_only(uint32_t* mask) {
    std::memset(mask, 0, static_cast<size_t>(mask_words_) * sizeof(uint32_t));
    try {
        for (const int32_t id : vocab().stop_ids()) mask[id / 32] |= 1u << (id % 32);
    } catch (const std::exception&) {
        // No vocabulary: the error was logged where the matcher failed; nothing is allowed.
    }
}

void grammar_masks::take(seq_state& st, int32_t t, bool& refused) {
    if (refused) return;
    if (st.past_end == 0 && st.matcher->accept_token(t)) return;
    const auto& stops = vocab().stop_ids();
    if (st.matcher->is_terminated() && std::find(stops.begin(), stops.end(), t) != stops.end()) {
        ++st.past_end;
        return;
    }
    refused = true;
}

void grammar_masks::advance(seq_state& st, const scheduled_seq& s, bool& refused) {
    if (s.structured.active()) {
        st.matcher = std::make_unique<grammar::grammar_matcher>(
            compiler().compile(grammar::grammar_kind_of(s.structured.kind), s.structured.text));
        st.past_end = 0;
        for (const int32_t t : s.output_token_ids) take(st, t, refused);
    }
    if (st.matcher == nullptr) throw error(errc::internal, "no matcher (its constraint failed to build)");
    const int32_t past_end_before = st.past_end;
    for (const int32_t t : st.pending) take(st, t, refused);
    st.pending.clear();
    {
        std::lock_guard<std::mutex> lock(stats_mu_);
        num_past_end_ += static_cast<uint64_t>(std::max(st.past_end - past_end_before, 0));
    }
    // The sequence has sampled sample_index tokens: the matcher's plus the stop tokens past its end.
    const int32_t want = static_cast<int32_t>(s.sample_index);
    if (st.matcher->num_accepted() + st.past_end > want) {
        const int32_t drop_past = std::min(st.past_end, st.matcher->num_accepted() + st.past_end - want);
        st.past_end -= drop_past;
        const int32_t surplus = st.matcher->num_accepted() + st.past_end - want;
        if (surplus > 0) st.matcher->rollback(surplus);
    }
    const int32_t have = st.matcher->num_accepted() + st.past_end;
    if (have < want && !refused) {
        ZMOE_LOG(error, "structured outputs: request " << s.request_id << " at sample " << want << " has a matcher at "
                                                       << have << " tokens");
        refused = true;
    }
}

void grammar_masks::compute_row(const row_job& job) {
    const auto t0 = std::chrono::steady_clock::now();
    uint32_t* mask = masks_.data() + static_cast<size_t>(job.mask_row) * mask_words_;
    seq_state& st = *job.seq;
    const scheduled_seq& s = *job.sched;
    bool refused = false;
    // A sequence already left with its stop tokens only (it ends at its next sample) is not advanced again.
    const bool ended = st.refused && !s.structured.active();
    if (ended) st.pending.clear();
    try {
        if (!ended) advance(st, s, refused);
    } catch (const std::exception& e) {
        ZMOE_LOG(error, "structured outputs: request " << s.request_id << ": " << e.what());
        refused = true;
    }
    st.refused = st.refused || refused;
    if (st.refused || st.matcher == nullptr || st.matcher->is_terminated()) {
        stop_only(mask);
    } else {
        st.matcher->fill_next_token_bitmask(mask);
    }
    const float us = std::chrono::duration<float, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(stats_mu_);
    if (times_us_.size() >= kMaxTimes) times_us_.erase(times_us_.begin(), times_us_.begin() + kMaxTimes / 2);
    times_us_.push_back(us);
    num_refused_ += refused ? 1 : 0;
}

void grammar_masks::finish_masks(sample_batch& batch) {
    if (!running_.valid()) return;
    running_.get();
    batch.masks = masks_.data();
    batch.mask_words = mask_words_;
}

void grammar_masks::end_step(std::span<const sampled_token> tokens) {
    for (const sampled_token& t : tokens) {
        auto it = seqs_.find(t.request_id);
        if (it != seqs_.end()) it->second.pending.push_back(t.token_id);
    }
}

mask_time_stats grammar_masks::stats() const {
    std::vector<float> t;
    mask_time_stats s;
    {
        std::lock_guard<std::mutex> lock(stats_mu_);
        t = times_us_;
        s.num_refused = num_refused_;
        s.num_past_end = num_past_end_;
    }
    if (t.empty()) return s;
    std::sort(t.begin(), t.end());
    const auto at = [&](double q) { return double(t[std::min(t.size() - 1, static_cast<size_t>(q * t.size()))]); };
    double sum = 0;
    for (const float x : t) sum += x;
    s.num_masks = t.size();
    s.mean_us = sum / static_cast<double>(t.size());
    s.p50_us = at(0.5);
    s.p90_us = at(0.9);
    s.p99_us = at(0.99);
    s.max_us = t.back();
    return s;
}

}  // namespace zmoe
