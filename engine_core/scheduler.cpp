#include "engine_core/scheduler.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "base/check.hpp"
#include "base/error.hpp"

namespace zmoe {

// Token accounting of one request. `tokens` holds the prompt followed by every generated token the engine core
// knows. Sent-but-unanswered samples (num_pending, 0..2) extend the sequence by tokens only the worker knows.
// num_computed counts positions whose KV a sent step writes; it runs ahead of the results, so a request in decode
// has num_computed == tokens.size() + num_pending - 1: the one token left to feed is the last sampled one, known
// (tokens.back()) when num_pending == 0, a placeholder otherwise.
struct scheduler::request_state {
    uint64_t id = 0;
    uint64_t serial = 0;  // distinguishes this request from a later one reusing its id
    int32_t rank = 0;
    std::vector<int32_t> tokens;
    int32_t num_prompt = 0;
    sampling_params sampling;
    int32_t max_tokens = 0;
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false;
    // Prefix caching: the hash chain of the full blocks of `tokens` computed so far (extended as needed), from
    // `root` (the salt's), and how many of the request's leading blocks are published.
    block_hash root;
    std::vector<block_hash> hashes;
    int32_t num_published = 0;
    uint32_t epoch = 0;  // preemptions so far: a chunk sent before one is not published after it
    int32_t num_cached_tokens = 0;
    structured_output structured;
    bool structured_sent = false;  // the worker holds this request's matcher (reset by preemption: it is rebuilt)

    int32_t num_computed = 0;
    int32_t num_pending = 0;
    std::vector<int32_t> blocks;
    bool running = false;
    bool ever_scheduled = false;
    uint64_t last_step = UINT64_MAX;  // step that last scheduled it; marks "already in this step"

    int32_t num_known() const { return static_cast<int32_t>(tokens.size()); }
    int32_t num_output() const { return num_known() - num_prompt; }
    /// Tokens still to feed to reach the end of the sequence as the workers know it.
    int32_t num_remaining() const { return num_known() + num_pending - num_computed; }
    /// Every token it may generate is generated or in flight: nothing to schedule, only results to wait for.
    bool all_samples_sent() const { return num_output() + num_pending >= max_tokens; }
    bool in_decode() const { return num_remaining() == 1 && num_output() + num_pending > 0; }
};

struct scheduler::rank_state {
    explicit rank_state(int32_t num_blocks, int32_t block_size) : pool(num_blocks, block_size) {}
    kv_block_pool pool;
    std::deque<request_state*> waiting;   // FCFS; preempted requests go back to the front
    std::vector<request_state*> running;  // in order of (re)admission: back() is the newest
    std::vector<uint64_t> finished_ids;   // for the next step_request
    uint64_t num_known_tokens = 0;        // over running + waiting requests, for placement
    int32_t num_tokens_last = 0;
    uint64_t num_tokens_total = 0;
    // Hashes of full blocks that steps in flight compute (not yet published), with their multiplicity.
    std::unordered_map<block_hash, int32_t, block_hash_hasher> pending;
    uint64_t prefix_cache_queries = 0;
    uint64_t prefix_cache_hits = 0;
    uint64_t num_placed = 0;
};

namespace {

[[noreturn]] void bad_config(const std::string& what) {
    throw error(errc::invalid_argument, "scheduler_config: " + what);
}

}  // namespace

std::string_view dp_placement_name(dp_placement p) {
    switch (p) {
        case dp_placement::cache_aware:
            return "cache-aware";
        case dp_placement::least_loaded:
            return "least-loaded";
        case dp_placement::round_robin:
            return "round-robin";
    }
    return "?";
}

dp_placement dp_placement_from_name(std::string_view name) {
    for (const dp_placement p : {dp_placement::cache_aware, dp_placement::least_loaded, dp_placement::round_robin}) {
        if (name == dp_placement_name(p)) return p;
    }
    throw error(errc::invalid_argument,
                "--dp-placement must be cache-aware, least-loaded or round-robin, got '" + std::string(name) + "'");
}

scheduler::scheduler(scheduler_config config) : config_(std::move(config)), hasher_(block_hasher::random()) {
    if (config_.max_num_batched_tokens < 1) bad_config("max_num_batched_tokens must be >= 1");
    if (config_.max_num_seqs < 1) bad_config("max_num_seqs must be >= 1");
    if (config_.block_size < 1) bad_config("block_size must be >= 1");
    if (config_.max_model_len < 1) bad_config("max_model_len must be >= 1");
    if (config_.placement_max_imbalance < 0) bad_config("placement_max_imbalance must be >= 0");
    if (config_.num_blocks_per_rank.empty()) bad_config("num_blocks_per_rank is empty (no data-parallel rank)");
    ranks_.reserve(config_.num_blocks_per_rank.size());
    for (size_t r = 0; r < config_.num_blocks_per_rank.size(); ++r) {
        const int32_t n = config_.num_blocks_per_rank[r];
        if (n < 0) bad_config("num_blocks_per_rank[" + std::to_string(r) + "] is negative");
        ranks_.emplace_back(n, config_.block_size);
    }
}

scheduler::~scheduler() = default;

int32_t scheduler::add_request(new_request req) {
    const std::string who = "request " + std::to_string(req.id);
    if (req.prompt.empty()) throw error(errc::invalid_argument, who + ": empty prompt");
    for (const int32_t t : req.prompt) {
        if (t < 0) throw error(errc::invalid_argument, who + ": negative token id " + std::to_string(t) + " in prompt");
    }
    if (req.max_tokens < 1) {
        throw error(errc::invalid_argument, who + ": max_tokens must be >= 1, got " + std::to_string(req.max_tokens));
    }
    const int64_t total = static_cast<int64_t>(req.prompt.size()) + req.max_tokens;
    if (total > config_.max_model_len) {
        throw error(errc::invalid_argument, who + ": prompt (" + std::to_string(req.prompt.size()) +
                                                " tokens) + max_tokens (" + std::to_string(req.max_tokens) +
                                                ") exceeds max_model_len " + std::to_string(config_.max_model_len));
    }
    if (requests_.contains(req.id)) throw error(errc::invalid_argument, who + ": id already in use");
    for (const rank_state& rank : ranks_) {
        if (std::find(rank.finished_ids.begin(), rank.finished_ids.end(), req.id) != rank.finished_ids.end()) {
            throw error(errc::invalid_argument, who + ": id reused before the previous holder was retired");
        }
    }
    // The last generated token is never fed back, so its KV slot is never needed.
    const int64_t kv_tokens = total - 1;

    auto state = std::make_unique<request_state>();
    state->id = req.id;
    state->num_prompt = static_cast<int32_t>(req.prompt.size());
    state->tokens = std::move(req.prompt);
    state->tokens.reserve(static_cast<size_t>(total));
    state->sampling = req.sampling;
    state->max_tokens = req.max_tokens;
    state->stop_token_ids = std::move(req.stop_token_ids);
    state->ignore_eos = req.ignore_eos;
    if (config_.enable_prefix_caching) state->root = hasher_.root(req.cache_salt);
    const int32_t best = place(*state, kv_tokens);
    if (best < 0) {
        throw error(errc::out_of_memory, who + ": prompt + max_tokens (" + std::to_string(total) +
                                             " tokens) can never fit in any rank's KV cache");
    }
    state->serial = next_serial_++;
    state->rank = best;
    ++ranks_[static_cast<size_t>(best)].num_placed;
    state->structured = std::move(req.structured);
    ranks_[static_cast<size_t>(best)].waiting.push_back(state.get());
    ranks_[static_cast<size_t>(best)].num_known_tokens += state->tokens.size();
    requests_.emplace(state->id, std::move(state));
    return best;
}

int32_t scheduler::max_hit_blocks(request_state& req) {
    if (!config_.enable_prefix_caching || req.sampling.reads_token_history()) return 0;
    const int32_t limit = (req.num_known() - 1) / config_.block_size;
    hasher_.extend(req.hashes, req.root, req.tokens, config_.block_size, static_cast<size_t>(limit));
    return limit;
}

int32_t scheduler::prefix_on_rank(const rank_state& rank, const request_state& req, int32_t limit, bool pending) const {
    int32_t n = 0;
    while (n < limit) {
        const block_hash& h = req.hashes[static_cast<size_t>(n)];
        if (rank.pool.block_find(h) < 0 && !(pending && rank.pending.contains(h))) break;
        ++n;
    }
    return n;
}

int32_t scheduler::place(request_state& req, int64_t kv_tokens) {
    const int32_t n = num_ranks();
    auto fits = [&](int32_t r) {
        const kv_block_pool& pool = ranks_[static_cast<size_t>(r)].pool;
        return pool.blocks_for_tokens(kv_tokens) <= pool.num_blocks();
    };
    auto load_of = [&](int32_t r) {
        const rank_state& rank = ranks_[static_cast<size_t>(r)];
        return std::pair<size_t, uint64_t>{rank.running.size() + rank.waiting.size(), rank.num_known_tokens};
    };
    if (config_.placement == dp_placement::round_robin) {
        for (int32_t k = 0; k < n; ++k) {
            const auto r =
                static_cast<int32_t>((next_round_robin_ + static_cast<uint64_t>(k)) % static_cast<uint64_t>(n));
            if (!fits(r)) continue;
            next_round_robin_ = static_cast<uint64_t>(r) + 1;
            ++num_placed_round_robin_;
            return r;
        }
        return -1;
    }
    int32_t least = -1;
    for (int32_t r = 0; r < n; ++r) {
        if (fits(r) && (least < 0 || load_of(r) < load_of(least))) least = r;
    }
    if (least < 0) return -1;
    if (config_.placement == dp_placement::cache_aware && n > 1) {
        const int32_t limit = max_hit_blocks(req);
        int32_t best = -1;
        int32_t best_hit = 0;
        for (int32_t r = 0; r < n; ++r) {
            if (!fits(r)) continue;
            const int32_t hit = prefix_on_rank(ranks_[static_cast<size_t>(r)], req, limit, true);
            if (hit > best_hit || (hit == best_hit && hit > 0 && load_of(r) < load_of(best))) {
                best = r;
                best_hit = hit;
            }
        }
        if (best >= 0) {
            if (load_of(best).first <= load_of(least).first + static_cast<size_t>(config_.placement_max_imbalance)) {
                ++num_placed_cache_hit_;
                return best;
            }
            ++num_placed_overloaded_;
            return least;
        }
    }
    ++num_placed_least_loaded_;
    return least;
}

std::optional<request_output> scheduler::abort_request(uint64_t id, finish_reason reason) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return std::nullopt;
    request_output out{.id = id,
                       .new_tokens = {},
                       .finished = true,
                       .reason = reason,
                       .new_logprobs = {},
                       .num_cached_tokens = it->second->num_cached_tokens};
    finish(*it->second);
    return out;
}

int32_t scheduler::num_in_flight() const { return static_cast<int32_t>(in_flight_.size()); }

std::optional<uint64_t> scheduler::oldest_in_flight() const {
    if (in_flight_.empty()) return std::nullopt;
    return in_flight_.front().step_id;
}

bool scheduler::is_in_flight(uint64_t step_id) const {
    return std::any_of(in_flight_.begin(), in_flight_.end(),
                       [step_id](const in_flight_step& f) { return f.step_id == step_id; });
}

int32_t scheduler::num_ranks() const { return static_cast<int32_t>(ranks_.size()); }

bool scheduler::can_schedule() const { return in_flight_.size() < (config_.async_scheduling ? 2u : 1u); }

bool scheduler::has_pending_work() const {
    for (const rank_state& rank : ranks_) {
        for (const request_state* q : rank.waiting) {
            if (q->num_pending == 0) return true;
        }
        for (const request_state* q : rank.running) {
            if (!q->all_samples_sent()) return true;
        }
    }
    return false;
}

std::vector<step_request> scheduler::schedule() {
    ZMOE_CHECK(can_schedule(), "scheduler::schedule called with " << in_flight_.size() << " steps in flight");
    const uint64_t step_id = next_step_id_++;
    std::vector<step_request> steps(ranks_.size());
    in_flight_step flight{.step_id = step_id, .samples = {}, .computed = {}};
    flight.samples.resize(ranks_.size());
    for (size_t r = 0; r < ranks_.size(); ++r) {
        steps[r].step_id = step_id;
        steps[r].finished_ids = std::move(ranks_[r].finished_ids);
        ranks_[r].finished_ids.clear();
        schedule_rank(ranks_[r], steps[r], flight);
        int32_t num_tokens = 0;
        for (const scheduled_seq& seq : steps[r].seqs) num_tokens += static_cast<int32_t>(seq.token_ids.size());
        ranks_[r].num_tokens_last = num_tokens;
        ranks_[r].num_tokens_total += static_cast<uint64_t>(num_tokens);
    }
    in_flight_.push_back(std::move(flight));
    ++num_steps_;
    return steps;
}

void scheduler::schedule_rank(rank_state& rank, step_request& out, in_flight_step& flight) {
    const uint64_t step_id = out.step_id;
    const auto max_seqs = static_cast<size_t>(config_.max_num_seqs);
    int32_t budget = config_.max_num_batched_tokens;
    bool preempted = false;

    // Running requests: decodes first (one token each, latency-bound), then the continuation chunks of partially
    // prefilled ones. A snapshot, because growing one request may preempt (remove) others; a preempted request
    // is never one already placed in this step, since victims are taken among the unplaced ones.
    const std::vector<request_state*> snapshot = rank.running;
    for (const bool decode_pass : {true, false}) {
        for (request_state* req : snapshot) {
            if (!req->running || req->last_step == step_id) continue;
            if (req->in_decode() != decode_pass || req->all_samples_sent()) continue;
            if (budget == 0 || out.seqs.size() >= max_seqs) break;
            // A partial prefill has no sample in flight, so all of its remaining tokens are known.
            const int32_t n = decode_pass ? 1 : std::min(req->num_remaining(), budget);
            if (!grow_blocks(rank, *req, n, step_id, preempted)) continue;
            emit(*req, n, step_id, out, flight);
            budget -= n;
        }
    }

    // Waiting requests, in order. After a preemption the pool is known to be short: admitting new work would only
    // evict it again, so the step goes to the running requests alone.
    if (preempted) return;
    for (auto it = rank.waiting.begin(); it != rank.waiting.end();) {
        request_state* req = *it;
        if (budget == 0 || out.seqs.size() >= max_seqs || rank.running.size() >= max_seqs) break;
        // Preempted with a sample in flight: its token must arrive before its sequence can be recomputed.
        if (req->num_pending > 0) {
            ++it;
            continue;
        }
        // A waiting request holds no blocks (preemption frees them all). Its cached prefix is shared, not computed.
        ZMOE_CHECK(req->blocks.empty() && req->num_computed == 0,
                   "scheduler: waiting request " << req->id << " holds blocks");
        const int32_t limit = max_hit_blocks(*req);
        const int32_t hit = prefix_on_rank(rank, *req, limit, false);
        // Its next block is being computed by a step in flight (another request with the same prefix, such as
        // the other sequences of an n > 1 request): wait one step for it rather than compute it twice.
        if (hit < limit && rank.pending.contains(req->hashes[static_cast<size_t>(hit)])) {
            ++it;
            continue;
        }
        std::vector<int32_t> shared;
        shared.reserve(static_cast<size_t>(hit));
        for (int32_t b = 0; b < hit; ++b) shared.push_back(rank.pool.block_find(req->hashes[static_cast<size_t>(b)]));
        const int32_t hit_tokens = hit * config_.block_size;
        const int32_t n = std::min(req->num_known() - hit_tokens, budget);
        const int32_t need = rank.pool.blocks_for_tokens(hit_tokens + n) - hit;
        // First come, first served: a request that does not fit holds back those behind it.
        if (need > rank.pool.num_free() - rank.pool.num_free_among(shared)) break;
        rank.pool.block_share(shared);
        req->blocks = std::move(shared);
        ZMOE_CHECK(rank.pool.block_alloc_into(need, req->blocks), "scheduler: block allocation failed after check");
        req->num_computed = hit_tokens;
        req->num_published = hit;
        if (!req->ever_scheduled) {
            req->num_cached_tokens = hit_tokens;
            if (config_.enable_prefix_caching) {
                rank.prefix_cache_queries += static_cast<uint64_t>(req->num_prompt);
                rank.prefix_cache_hits += static_cast<uint64_t>(hit_tokens);
            }
        }
        it = rank.waiting.erase(it);
        req->running = true;
        rank.running.push_back(req);
        emit(*req, n, step_id, out, flight);
        budget -= n;
    }
}

bool scheduler::grow_blocks(rank_state& rank, request_state& req, int32_t num_new_tokens, uint64_t step_id,
                            bool& preempted) {
    const int32_t need =
        rank.pool.blocks_for_tokens(req.num_computed + num_new_tokens) - static_cast<int32_t>(req.blocks.size());
    while (!rank.pool.block_alloc_into(std::max(need, 0), req.blocks)) {
        // Newest running request not yet placed in this step; `req` itself is unplaced, so one is always found.
        auto victim = std::find_if(rank.running.rbegin(), rank.running.rend(),
                                   [&](const request_state* q) { return q->last_step != step_id; });
        ZMOE_CHECK(victim != rank.running.rend(), "scheduler: no preemption victim on rank " << req.rank);
        request_state* v = *victim;
        preempt(rank, *v);
        preempted = true;
        if (v == &req) return false;
    }
    return true;
}

void scheduler::preempt(rank_state& rank, request_state& req) {
    // The freed blocks may still be written by a step in flight; that is harmless because a worker runs steps in
    // order, so their next owner's writes (in a later step) land after it.
    rank.pool.block_free(req.blocks);
    req.blocks.clear();
    req.num_computed = 0;
    req.num_published = 0;
    ++req.epoch;
    req.running = false;
    req.structured_sent = false;
    std::erase(rank.running, &req);
    rank.waiting.push_front(&req);
    ++num_preemptions_;
}

void scheduler::emit(request_state& req, int32_t n, uint64_t step_id, step_request& out, in_flight_step& flight) {
    ZMOE_CHECK(n >= 1 && n <= req.num_remaining(), "scheduler: bad chunk " << n << " for request " << req.id);
    scheduled_seq seq;
    seq.request_id = req.id;
    seq.start_pos = req.num_computed;
    const int32_t end = req.num_computed + n;
    if (end > req.num_known()) {
        // Only the last token can be unknown: the one sampled by the previous (still running) step.
        ZMOE_CHECK(n == 1 && req.num_pending == 1, "scheduler: request " << req.id << " feeds unknown tokens");
        seq.token_ids.push_back(kPlaceholderToken);
    } else {
        seq.token_ids.assign(req.tokens.begin() + req.num_computed, req.tokens.begin() + end);
    }
    seq.block_table = req.blocks;
    seq.do_sample = end == req.num_known() + req.num_pending;
    seq.sample_index = static_cast<uint32_t>(req.num_output() + req.num_pending);
    seq.sampling = req.sampling;
    if (seq.do_sample && req.structured.active() && !req.structured_sent) {
        // The request's first sample, or the first after a recompute: the worker builds the sequence's matcher from
        // the constraint and replays the tokens generated so far (all known: a recompute waits for its pending token).
        seq.structured = req.structured;
        seq.output_token_ids.assign(req.tokens.begin() + req.num_prompt, req.tokens.end());
        req.structured_sent = true;
    }
    out.seqs.push_back(std::move(seq));

    if (config_.enable_prefix_caching) {
        // The full blocks this chunk completes whose tokens are known now (a decode's placeholder is not).
        computed_chunk chunk{
            .id = req.id, .serial = req.serial, .epoch = req.epoch, .rank = req.rank, .end = end, .pending = {}};
        const int32_t first = std::max(req.num_computed / config_.block_size, req.num_published);
        const int32_t last = std::min(end, req.num_known()) / config_.block_size;
        if (last > first) {
            hasher_.extend(req.hashes, req.root, req.tokens, config_.block_size, static_cast<size_t>(last));
            rank_state& rank = ranks_[static_cast<size_t>(req.rank)];
            for (int32_t b = first; b < last; ++b) {
                chunk.pending.push_back(req.hashes[static_cast<size_t>(b)]);
                ++rank.pending[chunk.pending.back()];
            }
        }
        flight.computed.push_back(std::move(chunk));
    }

    req.num_computed = end;
    req.last_step = step_id;
    req.ever_scheduled = true;
    if (out.seqs.back().do_sample) {
        ++req.num_pending;
        flight.samples[static_cast<size_t>(req.rank)].emplace_back(req.id, req.serial);
    }
}

void scheduler::finish(request_state& req) {
    rank_state& rank = ranks_[static_cast<size_t>(req.rank)];
    rank.pool.block_free(req.blocks);
    req.blocks.clear();
    if (req.running) {
        std::erase(rank.running, &req);
    } else {
        std::erase(rank.waiting, &req);
    }
    if (req.ever_scheduled) rank.finished_ids.push_back(req.id);
    rank.num_known_tokens -= req.tokens.size();
    requests_.erase(req.id);  // destroys req
}

std::vector<request_output> scheduler::update(const std::vector<step_result>& results) {
    if (in_flight_.empty()) throw error(errc::protocol, "scheduler::update: results arrived with no step in flight");
    const in_flight_step& flight = in_flight_.front();
    const std::string where = "step " + std::to_string(flight.step_id);
    if (results.size() != ranks_.size()) {
        throw error(errc::protocol, where + ": expected results of " + std::to_string(ranks_.size()) + " ranks, got " +
                                        std::to_string(results.size()));
    }
    std::vector<const step_result*> by_rank(ranks_.size(), nullptr);
    for (const step_result& res : results) {
        const std::string rank_where = where + " rank " + std::to_string(res.rank);
        if (res.step_id != flight.step_id) {
            throw error(errc::protocol, where + ": got results of step " + std::to_string(res.step_id));
        }
        if (res.rank < 0 || res.rank >= num_ranks()) throw error(errc::protocol, rank_where + ": no such rank");
        if (by_rank[static_cast<size_t>(res.rank)] != nullptr) throw error(errc::protocol, rank_where + ": duplicate");
        by_rank[static_cast<size_t>(res.rank)] = &res;
        const auto& expected = flight.samples[static_cast<size_t>(res.rank)];
        if (res.tokens.size() != expected.size()) {
            throw error(errc::protocol, rank_where + ": " + std::to_string(res.tokens.size()) + " tokens for " +
                                            std::to_string(expected.size()) + " sampled sequences");
        }
        for (size_t i = 0; i < expected.size(); ++i) {
            if (res.tokens[i].request_id != expected[i].first || res.tokens[i].token_id < 0) {
                throw error(errc::protocol, rank_where + ": token " + std::to_string(i) + " (request " +
                                                std::to_string(res.tokens[i].request_id) + ", id " +
                                                std::to_string(res.tokens[i].token_id) + ") does not match the step");
            }
        }
    }

    // The KV of every chunk of this step is computed: publish the full blocks, before a request that ends here
    // frees them (they stay findable in the free queue).
    publish_computed(flight);

    std::vector<request_output> outputs;
    for (size_t r = 0; r < ranks_.size(); ++r) {
        const auto& expected = flight.samples[r];
        for (size_t i = 0; i < expected.size(); ++i) {
            auto it = requests_.find(expected[i].first);
            if (it == requests_.end() || it->second->serial != expected[i].second) {
                // Computed for a request that ended after this step was sent: past a stop, or aborted.
                ++num_discarded_tokens_;
                continue;
            }
            request_state& req = *it->second;
            ZMOE_CHECK(req.num_pending > 0, "scheduler: token for request " << req.id << " with no sample pending");
            --req.num_pending;
            const int32_t token = by_rank[r]->tokens[i].token_id;
            req.tokens.push_back(token);
            ++ranks_[r].num_known_tokens;
            request_output out{.id = req.id,
                               .new_tokens = {token},
                               .finished = false,
                               .reason = finish_reason::none,
                               .new_logprobs = {},
                               .num_cached_tokens = req.num_cached_tokens};
            if (by_rank[r]->tokens[i].logprobs) out.new_logprobs.push_back(*by_rank[r]->tokens[i].logprobs);
            // Stop ids end a request only once it has min_tokens (the workers also keep them from being sampled).
            const bool is_stop =
                !req.ignore_eos && req.num_output() >= static_cast<int64_t>(req.sampling.min_tokens) &&
                std::find(req.stop_token_ids.begin(), req.stop_token_ids.end(), token) != req.stop_token_ids.end();
            if (is_stop) {
                out.reason = finish_reason::stop;
            } else if (req.num_output() >= req.max_tokens) {
                out.reason = finish_reason::length;
            }
            if (out.reason != finish_reason::none) {
                out.finished = true;
                finish(req);
            }
            outputs.push_back(std::move(out));
        }
    }
    in_flight_.pop_front();
    return outputs;
}

void scheduler::publish_computed(const in_flight_step& flight) {
    for (const computed_chunk& c : flight.computed) {
        rank_state& rank = ranks_[static_cast<size_t>(c.rank)];
        for (const block_hash& h : c.pending) {
            auto p = rank.pending.find(h);
            ZMOE_CHECK(p != rank.pending.end(), "scheduler: pending block hash lost");
            if (--p->second == 0) rank.pending.erase(p);
        }
        auto it = requests_.find(c.id);
        if (it == requests_.end()) continue;
        request_state& req = *it->second;
        if (req.serial != c.serial || req.epoch != c.epoch) continue;  // ended or preempted since: blocks freed
        const int32_t last = std::min(c.end, req.num_known()) / config_.block_size;
        if (last <= req.num_published) continue;
        hasher_.extend(req.hashes, req.root, req.tokens, config_.block_size, static_cast<size_t>(last));
        for (int32_t b = req.num_published; b < last; ++b) {
            rank.pool.block_publish(req.blocks[static_cast<size_t>(b)], req.hashes[static_cast<size_t>(b)]);
        }
        req.num_published = last;
    }
}

scheduler_stats scheduler::stats() const {
    scheduler_stats s;
    for (const rank_state& rank : ranks_) {
        s.num_running.push_back(static_cast<int32_t>(rank.running.size()));
        s.num_waiting.push_back(static_cast<int32_t>(rank.waiting.size()));
        s.num_blocks_used.push_back(rank.pool.num_used());
        s.num_blocks_total.push_back(rank.pool.num_blocks());
        s.num_tokens_scheduled.push_back(rank.num_tokens_last);
        s.num_tokens_scheduled_total.push_back(rank.num_tokens_total);
        s.prefix_cache_queries.push_back(rank.prefix_cache_queries);
        s.prefix_cache_hits.push_back(rank.prefix_cache_hits);
        s.num_blocks_cached.push_back(rank.pool.num_cached());
        s.num_blocks_evicted.push_back(rank.pool.num_evicted());
        s.num_placed.push_back(rank.num_placed);
    }
    s.num_placed_cache_hit = num_placed_cache_hit_;
    s.num_placed_overloaded = num_placed_overloaded_;
    s.num_placed_least_loaded = num_placed_least_loaded_;
    s.num_placed_round_robin = num_placed_round_robin_;
    s.num_steps = num_steps_;
    s.num_preemptions = num_preemptions_;
    s.num_discarded_tokens = num_discarded_tokens_;
    return s;
}

int32_t scheduler::rank_of(uint64_t id) const {
    auto it = requests_.find(id);
    return it == requests_.end() ? -1 : it->second->rank;
}

const kv_block_pool& scheduler::pool(int32_t rank) const {
    ZMOE_CHECK(rank >= 0 && rank < num_ranks(), "scheduler::pool: no rank " << rank);
    return ranks_[static_cast<size_t>(rank)].pool;
}

}  // namespace zmoe
