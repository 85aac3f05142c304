#include "cli/bench_workload.hpp"

#include <limits>

#include "base/check.hpp"
#include "base/error.hpp"

namespace zmoe::cli {

bench_workload::bench_workload(const serve_bench_params& p) {
    if (p.dataset == bench_dataset::multi_turn) {
        build_multi_turn(p);
    } else {
        for (auto& prompt : make_bench_prompts(p)) requests_.push_back({.prompt = std::move(prompt)});
        fresh_.resize(requests_.size());
        for (size_t i = 0; i < fresh_.size(); ++i) fresh_[i] = i;
    }
    arrival_ = bench_arrival_times(p, fresh_.size());
    num_unsent_ = requests_.size();
}

void bench_workload::build_multi_turn(const serve_bench_params& p) {
    const auto& m = p.multi_turn;
    if (m.num_conversations == 0 || m.num_turns == 0)
        throw error(errc::invalid_argument, "bench: a multi-turn run needs conversations and turns");
    num_turns_ = m.num_turns;
    // The system prompt first, then every turn's user tokens conversation by conversation: the same seed gives the
    // same tokens whatever the answers.
    bench_token_source ids(p, p.seed);
    const std::vector<int32_t> system = ids.draw(m.system_prompt_len);
    user_tokens_.reserve(static_cast<size_t>(m.num_conversations) * m.num_turns);
    for (size_t k = 0; k < static_cast<size_t>(m.num_conversations) * m.num_turns; ++k)
        user_tokens_.push_back(ids.draw(m.user_len));
    requests_.resize(static_cast<size_t>(m.num_conversations) * m.num_turns);
    for (uint32_t c = 0; c < m.num_conversations; ++c) {
        for (uint32_t t = 0; t < m.num_turns; ++t) {
            auto& r = requests_[static_cast<size_t>(c) * m.num_turns + t];
            r.conversation = static_cast<int32_t>(c);
            r.turn = static_cast<int32_t>(t);
            r.prompt.output_len = m.output_len;
        }
        auto& first = requests_[static_cast<size_t>(c) * m.num_turns].prompt.token_ids;
        const auto& user = user_tokens_[static_cast<size_t>(c) * m.num_turns];
        first = system;
        first.insert(first.end(), user.begin(), user.end());
        fresh_.push_back(static_cast<size_t>(c) * m.num_turns);
    }
}

std::optional<size_t> bench_workload::pop_ready(double elapsed_s) {
    while (!follow_up_.empty()) {
        const size_t i = follow_up_.front();
        follow_up_.pop_front();
        if (requests_[i].st != state::unsent) continue;
        requests_[i].st = state::sent;
        --num_unsent_;
        return i;
    }
    while (fresh_next_ < fresh_.size() && arrival_[fresh_next_] <= elapsed_s) {
        const size_t i = fresh_[fresh_next_++];
        if (requests_[i].st != state::unsent) continue;  // given up
        requests_[i].st = state::sent;
        --num_unsent_;
        return i;
    }
    return std::nullopt;
}

double bench_workload::next_arrival_s() const {
    return fresh_next_ < fresh_.size() ? arrival_[fresh_next_] : std::numeric_limits<double>::infinity();
}

std::vector<size_t> bench_workload::finish(size_t i, bool success, const std::vector<int32_t>& answer) {
    ZMOE_CHECK(requests_[i].st == state::sent, "bench: a request ended that was not sent");
    requests_[i].st = state::ended;
    std::vector<size_t> given_up;
    if (requests_[i].turn < 0 || static_cast<uint32_t>(requests_[i].turn) + 1 >= num_turns_) return given_up;
    if (!success) {
        for (size_t j = i + 1; j < i + num_turns_ - requests_[i].turn; ++j) {
            if (requests_[j].st != state::unsent) continue;
            requests_[j].st = state::ended;
            --num_unsent_;
            given_up.push_back(j);
        }
        return given_up;
    }
    // The next turn resends the whole history: this turn's prompt, the model's answer, new user tokens.
    auto& next = requests_[i + 1].prompt.token_ids;
    const auto& prompt = requests_[i].prompt.token_ids;
    const auto& user = user_tokens_[i + 1];
    next.clear();
    next.reserve(prompt.size() + answer.size() + user.size());
    next.insert(next.end(), prompt.begin(), prompt.end());
    next.insert(next.end(), answer.begin(), answer.end());
    next.insert(next.end(), user.begin(), user.end());
    follow_up_.push_back(i + 1);
    return given_up;
}

std::vector<size_t> bench_workload::give_up_unsent() {
    std::vector<size_t> out;
    for (size_t i = 0; i < requests_.size(); ++i) {
        if (requests_[i].st != state::unsent) continue;
        requests_[i].st = state::ended;
        out.push_back(i);
    }
    num_unsent_ = 0;
    follow_up_.clear();
    fresh_next_ = fresh_.size();
    return out;
}

}  // namespace zmoe::cli
