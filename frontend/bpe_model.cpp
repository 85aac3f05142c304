#include "frontend/bpe_model.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "base/error.hpp"
#include "frontend/byte_level.hpp"
#include "frontend/utf8.hpp"

namespace zmoe {

// Open-addressing hash table from a pair of ids to its merge: the inner loop of encoding probes it once per
// candidate pair, so it avoids std::unordered_map's node chasing.
class bpe_model::merge_table {
  public:
    explicit merge_table(size_t expected) {
        size_t cap = 16;
        unsigned bits = 4;
        while (cap < expected * 2) {
            cap <<= 1;
            ++bits;
        }
        shift_ = 64 - bits;
        mask_ = cap - 1;
        keys_.assign(cap, kEmpty);
        values_.resize(cap);
    }

    void insert_or_assign(int32_t left, int32_t right, merge_value v) {
        const uint64_t k = key(left, right);
        for (size_t i = slot(k);; i = (i + 1) & mask_) {
            if (keys_[i] == kEmpty || keys_[i] == k) {
                keys_[i] = k;
                values_[i] = v;
                return;
            }
        }
    }

    const merge_value* find(int32_t left, int32_t right) const {
        const uint64_t k = key(left, right);
        for (size_t i = slot(k);; i = (i + 1) & mask_) {
            if (keys_[i] == k) return &values_[i];
            if (keys_[i] == kEmpty) return nullptr;
        }
    }

  private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    static uint64_t key(int32_t left, int32_t right) {
        return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
    }
    size_t slot(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_); }

    std::vector<uint64_t> keys_;
    std::vector<merge_value> values_;
    unsigned shift_ = 60;
    size_t mask_ = 15;
};

// Results for pieces up to kMaxKeyBytes, sharded so that concurrent encodes rarely contend. A full shard is
// simply cleared: real text has a small working set of words, and clearing keeps memory bounded.
struct bpe_model::cache {
    static constexpr size_t kShards = 16;
    static constexpr size_t kMaxEntriesPerShard = 8192;
    static constexpr size_t kMaxKeyBytes = 256;
    struct shard {
        std::mutex mu;
        std::unordered_map<std::string, std::vector<int32_t>, string_hash, std::equal_to<>> map;
    };
    std::array<shard, kShards> shards;
};

bpe_model::bpe_model() : cache_(std::make_unique<cache>()) {}
bpe_model::bpe_model(bpe_model&&) noexcept = default;
bpe_model& bpe_model::operator=(bpe_model&&) noexcept = default;
bpe_model::~bpe_model() = default;

namespace {

std::string str_or_empty(const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || j[key].is_null()) return {};
    if (!j[key].is_string())
        throw error(errc::invalid_checkpoint, std::string("tokenizer.json: model.") + key + " is not a string");
    return j[key].get<std::string>();
}

}  // namespace

bpe_model bpe_model::from_json(const nlohmann::json& model, bool byte_level) {
    if (!model.is_object()) throw error(errc::invalid_checkpoint, "tokenizer.json: \"model\" is missing");
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE") throw error(errc::unsupported, "tokenizer.json: model type '" + type + "' is not supported");
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0)
        throw error(errc::unsupported, "tokenizer.json: BPE dropout is not supported");
    if (!str_or_empty(model, "continuing_subword_prefix").empty())
        throw error(errc::unsupported, "tokenizer.json: BPE continuing_subword_prefix is not supported");
    if (!str_or_empty(model, "end_of_word_suffix").empty())
        throw error(errc::unsupported, "tokenizer.json: BPE end_of_word_suffix is not supported");
    if (!model.contains("vocab") || !model["vocab"].is_object())
        throw error(errc::invalid_checkpoint, "tokenizer.json: model.vocab is missing or not an object");
    if (!model.contains("merges") || !model["merges"].is_array())
        throw error(errc::invalid_checkpoint, "tokenizer.json: model.merges is missing or not an array");

    bpe_model m;
    m.byte_level_ = byte_level;
    m.ignore_merges_ = model.value("ignore_merges", false);
    m.byte_fallback_ = model.value("byte_fallback", false);
    m.fuse_unk_ = model.value("fuse_unk", false);

    const auto& vocab = model["vocab"];
    int64_t max_id = -1;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        if (!it.value().is_number_integer())
            throw error(errc::invalid_checkpoint, "tokenizer.json: model.vocab['" + it.key() + "'] is not an integer");
        const int64_t id = it.value().get<int64_t>();
        if (id < 0 || id >= (int64_t{1} << 30))
            throw error(errc::invalid_checkpoint, "tokenizer.json: model.vocab['" + it.key() + "'] is out of range");
        max_id = std::max(max_id, id);
    }
    m.spellings_.resize(static_cast<size_t>(max_id + 1));
    m.has_id_.assign(static_cast<size_t>(max_id + 1), false);
    m.by_spelling_.reserve(vocab.size());
    if (byte_level) m.by_bytes_.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        const auto id = static_cast<int32_t>(it.value().get<int64_t>());
        m.spellings_[id] = it.key();
        m.has_id_[id] = true;
        m.by_spelling_.emplace(it.key(), id);
        if (byte_level) {
            // Entries outside the byte alphabet can never be produced by byte-level BPE; they stay decodable.
            if (auto bytes = byte_level::to_bytes(it.key())) m.by_bytes_.emplace(std::move(*bytes), id);
        }
    }
    m.byte_ids_.fill(-1);
    m.fallback_ids_.fill(-1);
    for (int b = 0; b < 256; ++b) {
        if (byte_level) {
            const std::string key(1, static_cast<char>(b));
            if (auto it = m.by_bytes_.find(key); it != m.by_bytes_.end()) m.byte_ids_[b] = it->second;
        }
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        if (auto it = m.by_spelling_.find(std::string_view(name)); it != m.by_spelling_.end())
            m.fallback_ids_[b] = it->second;
    }
    if (const std::string unk = str_or_empty(model, "unk_token"); !unk.empty()) {
        auto it = m.by_spelling_.find(unk);
        if (it == m.by_spelling_.end())
            throw error(errc::invalid_checkpoint, "tokenizer.json: unk_token '" + unk + "' is not in the vocabulary");
        m.unk_id_ = it->second;
    }

    const auto& merges = model["merges"];
    m.merges_ = std::make_unique<merge_table>(merges.size());
    m.num_merges_ = merges.size();
    std::string left, right;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& entry = merges[rank];
        if (entry.is_string()) {  // "left right"
            const auto& s = entry.get_ref<const std::string&>();
            const size_t space = s.find(' ');
            if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
                throw error(errc::invalid_checkpoint,
                            "tokenizer.json: merge " + std::to_string(rank) + " '" + s + "' is not two tokens");
            left.assign(s, 0, space);
            right.assign(s, space + 1);
        } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
            left = entry[0].get<std::string>();
            right = entry[1].get<std::string>();
        } else {
            throw error(errc::invalid_checkpoint, "tokenizer.json: merge " + std::to_string(rank) + " is malformed");
        }
        const auto l = m.by_spelling_.find(left);
        const auto r = m.by_spelling_.find(right);
        const auto merged = m.by_spelling_.find(left + right);
        if (l == m.by_spelling_.end() || r == m.by_spelling_.end() || merged == m.by_spelling_.end())
            throw error(errc::invalid_checkpoint, "tokenizer.json: merge " + std::to_string(rank) + " ('" + left +
                                                      "', '" + right + "') uses a token that is not in the vocabulary");
        // A pair listed twice keeps its last rank, as HF's map construction does.
        m.merges_->insert_or_assign(l->second, r->second, {static_cast<int32_t>(rank), merged->second});
    }
    return m;
}

std::optional<int32_t> bpe_model::token_to_id(std::string_view spelling) const {
    auto it = by_spelling_.find(spelling);
    if (it == by_spelling_.end()) return std::nullopt;
    return it->second;
}

const bpe_model::merge_value* bpe_model::find_merge(int32_t left, int32_t right) const {
    return merges_->find(left, right);
}

// The starting symbols of a piece, with unknown units handled as HF's BPE::merge_word does: byte fallback
// tokens if the vocabulary has them all, else the unk token (consecutive ones fused if fuse_unk), else dropped.
void bpe_model::initial_symbols(std::string_view piece, std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const {
    ids.clear();
    lens.clear();
    int32_t pending_unk_len = 0;
    auto flush_unk = [&] {
        if (pending_unk_len > 0) {
            ids.push_back(*unk_id_);
            lens.push_back(static_cast<uint32_t>(pending_unk_len));
            pending_unk_len = 0;
        }
    };
    size_t i = 0;
    while (i < piece.size()) {
        const size_t start = i;
        int32_t id = -1;
        std::string unit_spelling;
        if (byte_level_) {
            const auto b = static_cast<uint8_t>(piece[i++]);
            id = byte_ids_[b];
            if (id < 0) utf8::append(unit_spelling, byte_level::byte_to_char(b));
        } else {
            utf8::decode(piece, i);
            const std::string_view unit = piece.substr(start, i - start);
            if (auto it = by_spelling_.find(unit); it != by_spelling_.end())
                id = it->second;
            else
                unit_spelling.assign(unit);
        }
        const auto unit_len = static_cast<uint32_t>(i - start);
        if (id >= 0) {
            flush_unk();
            ids.push_back(id);
            lens.push_back(unit_len);
            continue;
        }
        if (byte_fallback_) {
            bool all = true;
            for (char c : unit_spelling) all = all && fallback_ids_[static_cast<uint8_t>(c)] >= 0;
            if (all) {
                // HF adds the fallback tokens without flushing a pending unk first.
                for (char c : unit_spelling) {
                    ids.push_back(fallback_ids_[static_cast<uint8_t>(c)]);
                    lens.push_back(1);
                }
                continue;
            }
        }
        if (unk_id_) {
            if (pending_unk_len > 0 && !fuse_unk_) flush_unk();
            pending_unk_len += static_cast<int32_t>(unit_len);
        }
    }
    flush_unk();
}

void bpe_model::merge_word(std::string_view piece, std::vector<int32_t>& out) const {
    struct symbol {
        int32_t id;
        int32_t prev;
        int32_t next;
        bool alive;
    };
    struct candidate {
        int32_t rank;
        int32_t pos;
        int32_t new_id;
    };
    // Min-heap on (rank, pos): lowest rank first, leftmost among equal ranks.
    auto later = [](const candidate& a, const candidate& b) {
        return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    };
    thread_local std::vector<int32_t> ids;
    thread_local std::vector<uint32_t> lens;
    thread_local std::vector<symbol> syms;
    thread_local std::vector<candidate> heap;
    initial_symbols(piece, ids, lens);
    const auto n = static_cast<int32_t>(ids.size());
    syms.resize(static_cast<size_t>(n));
    heap.clear();
    for (int32_t i = 0; i < n; ++i) syms[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
    for (int32_t i = 0; i + 1 < n; ++i)
        if (const merge_value* m = find_merge(syms[i].id, syms[i + 1].id)) heap.push_back({m->rank, i, m->new_id});
    std::make_heap(heap.begin(), heap.end(), later);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const candidate top = heap.back();
        heap.pop_back();
        symbol& cur = syms[top.pos];
        if (!cur.alive || cur.next < 0) continue;
        symbol& right = syms[cur.next];
        // Stale entries (a neighbour has changed since this one was pushed) no longer describe the pair.
        const merge_value* m = find_merge(cur.id, right.id);
        if (!m || m->new_id != top.new_id) continue;
        cur.id = top.new_id;
        right.alive = false;
        cur.next = right.next;
        if (cur.next >= 0) syms[cur.next].prev = top.pos;
        if (cur.prev >= 0) {
            if (const merge_value* pm = find_merge(syms[cur.prev].id, cur.id)) {
                heap.push_back({pm->rank, cur.prev, pm->new_id});
                std::push_heap(heap.begin(), heap.end(), later);
            }
        }
        if (cur.next >= 0) {
            if (const merge_value* nm = find_merge(cur.id, syms[cur.next].id)) {
                heap.push_back({nm->rank, top.pos, nm->new_id});
                std::push_heap(heap.begin(), heap.end(), later);
            }
        }
    }
    for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
    if (n > (1 << 16)) {
        // Do not keep a huge piece's scratch alive in every thread that once saw one.
        std::vector<int32_t>().swap(ids);
        std::vector<uint32_t>().swap(lens);
        std::vector<symbol>().swap(syms);
        std::vector<candidate>().swap(heap);
    }
}

void bpe_model::encode(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (byte_level_ && piece.size() == 1 && byte_ids_[static_cast<uint8_t>(piece[0])] >= 0) {
        out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
        return;
    }
    if (ignore_merges_) {
        const auto& whole = byte_level_ ? by_bytes_ : by_spelling_;
        if (auto it = whole.find(piece); it != whole.end()) {
            out.push_back(it->second);
            return;
        }
    }
    if (piece.size() > cache::kMaxKeyBytes) {
        merge_word(piece, out);
        return;
    }
    auto& shard = cache_->shards[string_hash{}(piece) % cache::kShards];
    {
        std::lock_guard lock(shard.mu);
        if (auto it = shard.map.find(piece); it != shard.map.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    const size_t first = out.size();
    merge_word(piece, out);
    std::vector<int32_t> result(out.begin() + static_cast<ptrdiff_t>(first), out.end());
    std::lock_guard lock(shard.mu);
    if (shard.map.size() >= cache::kMaxEntriesPerShard) shard.map.clear();
    shard.map.emplace(piece, std::move(result));
}

}  // namespace zmoe
