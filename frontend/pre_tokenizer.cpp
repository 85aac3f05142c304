#include "frontend/pre_tokenizer.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace zmoe {
namespace {

// GPT-2's pattern, which ByteLevel applies when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

pre_tokenizer::split_behavior parse_behavior(const std::string& name) {
    using b = pre_tokenizer::split_behavior;
    if (name == "Isolated") return b::isolated;
    if (name == "Removed") return b::removed;
    if (name == "MergedWithPrevious") return b::merged_with_previous;
    if (name == "MergedWithNext") return b::merged_with_next;
    if (name == "Contiguous") return b::contiguous;
    throw error(errc::unsupported, "tokenizer.json: Split behavior '" + name + "' is not supported");
}

bool get_bool(const nlohmann::json& j, const char* key, bool fallback) {
    return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

pre_tokenizer::stage metaspace_stage(const nlohmann::json& j) {
    if (!j.contains("replacement") || !j["replacement"].is_string())
        throw error(errc::invalid_checkpoint, "tokenizer.json: Metaspace without a \"replacement\" string");
    using stage = pre_tokenizer::stage;
    stage s;
    s.type = stage::kind::metaspace;
    s.literal = j["replacement"].get<std::string>();
    if (s.literal.empty()) throw error(errc::invalid_checkpoint, "tokenizer.json: Metaspace with an empty replacement");
    const std::string scheme = j.contains("prepend_scheme") && j["prepend_scheme"].is_string()
                                   ? j["prepend_scheme"].get<std::string>()
                                   : std::string("always");
    using ps = stage::prepend_scheme;
    if (scheme == "always") {
        s.prepend = ps::always;
    } else if (scheme == "first") {
        s.prepend = ps::first;
    } else if (scheme == "never") {
        s.prepend = ps::never;
    } else {
        throw error(errc::invalid_checkpoint, "tokenizer.json: Metaspace prepend_scheme '" + scheme + "' is unknown");
    }
    // Files written before prepend_scheme existed say add_prefix_space; HF refuses false with any other scheme.
    if (!get_bool(j, "add_prefix_space", true) && s.prepend != ps::never)
        throw error(errc::invalid_checkpoint,
                    "tokenizer.json: Metaspace add_prefix_space does not match prepend_scheme");
    s.metaspace_split = get_bool(j, "split", true);
    s.behavior = pre_tokenizer::split_behavior::merged_with_next;
    return s;
}

void parse_into(const nlohmann::json& j, std::vector<pre_tokenizer::stage>& stages) {
    if (j.is_null()) return;
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        throw error(errc::invalid_checkpoint, "tokenizer.json: pre_tokenizer without a \"type\"");
    const std::string type = j["type"].get<std::string>();
    using kind = pre_tokenizer::stage::kind;
    if (type == "Sequence") {
        if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
            throw error(errc::invalid_checkpoint, "tokenizer.json: Sequence pre_tokenizer without \"pretokenizers\"");
        for (const auto& sub : j["pretokenizers"]) parse_into(sub, stages);
    } else if (type == "Split") {
        pre_tokenizer::stage s;
        const auto& pattern = j.value("pattern", nlohmann::json());
        if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
            s.type = kind::split_regex;
            s.regex = std::make_shared<onig_regex>(pattern["Regex"].get<std::string>());
        } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
            s.type = kind::split_string;
            s.literal = pattern["String"].get<std::string>();
        } else {
            throw error(errc::invalid_checkpoint,
                        "tokenizer.json: Split pre_tokenizer needs a Regex or String pattern");
        }
        s.behavior = parse_behavior(j.value("behavior", std::string("Isolated")));
        s.invert = get_bool(j, "invert", false);
        stages.push_back(std::move(s));
    } else if (type == "ByteLevel") {
        pre_tokenizer::stage s;
        s.type = kind::byte_level;
        s.add_prefix_space = get_bool(j, "add_prefix_space", true);
        if (get_bool(j, "use_regex", true)) s.regex = std::make_shared<onig_regex>(kGpt2Pattern);
        stages.push_back(std::move(s));
    } else if (type == "Metaspace") {
        stages.push_back(metaspace_stage(j));
    } else {
        throw error(errc::unsupported, "tokenizer.json: pre_tokenizer type '" + type + "' is not supported");
    }
}

struct span {
    uint32_t begin, end;
    bool is_match;
};

// The (range, is_match) list covering `text`, as HF's Pattern::find_matches builds it.
void find_matches(const pre_tokenizer::stage& s, std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& tmp,
                  std::vector<span>& out) {
    out.clear();
    tmp.clear();
    if (s.type == pre_tokenizer::stage::kind::split_string || s.type == pre_tokenizer::stage::kind::metaspace) {
        if (!s.literal.empty()) {
            size_t pos = 0;
            while ((pos = text.find(s.literal, pos)) != std::string_view::npos) {
                tmp.emplace_back(static_cast<uint32_t>(pos), static_cast<uint32_t>(pos + s.literal.size()));
                pos += s.literal.size();
            }
        }
    } else {
        s.regex->find_all(text, tmp);
    }
    uint32_t prev = 0;
    for (auto [b, e] : tmp) {
        if (prev != b) out.push_back({prev, b, false});
        out.push_back({b, e, true});
        prev = e;
    }
    if (prev != text.size()) out.push_back({prev, static_cast<uint32_t>(text.size()), false});
}

// Applies the split behaviour to the match list in place; afterwards is_match means "drop this span".
void apply_behavior(pre_tokenizer::split_behavior behavior, bool invert, std::vector<span>& spans) {
    using b = pre_tokenizer::split_behavior;
    if (invert)
        for (auto& s : spans) s.is_match = !s.is_match;
    std::vector<span> out;
    out.reserve(spans.size());
    bool previous_match = false;
    switch (behavior) {
        case b::isolated:
            for (auto& s : spans) s.is_match = false;
            return;
        case b::removed:
            return;
        case b::merged_with_previous:
            for (const auto& s : spans) {
                if (s.is_match && !previous_match && !out.empty()) {
                    out.back().end = s.end;
                } else {
                    out.push_back({s.begin, s.end, false});
                }
                previous_match = s.is_match;
            }
            break;
        case b::merged_with_next:
            for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
                if (it->is_match && !previous_match && !out.empty()) {
                    out.back().begin = it->begin;
                } else {
                    out.push_back({it->begin, it->end, false});
                }
                previous_match = it->is_match;
            }
            std::reverse(out.begin(), out.end());
            break;
        case b::contiguous:
            for (const auto& s : spans) {
                if (s.is_match == previous_match && !out.empty()) {
                    out.back().end = s.end;
                } else {
                    out.push_back({s.begin, s.end, false});
                }
                previous_match = s.is_match;
            }
            break;
    }
    spans.swap(out);
}

// Metaspace on one piece, as HF's Metaspace::pre_tokenize: spaces become the replacement, which is then prepended
// unless the piece starts with it already, and with split the piece is cut before every replacement (the
// replacement stays at the front of the piece that follows it: MergedWithNext).
void split_metaspace(const pre_tokenizer::stage& st, std::string_view piece, bool is_start,
                     std::deque<std::string>& storage, std::vector<std::pair<uint32_t, uint32_t>>& tmp,
                     std::vector<span>& spans, std::vector<std::string_view>& next, ptrdiff_t& next_start,
                     size_t first) {
    using ps = pre_tokenizer::stage::prepend_scheme;
    const std::string& rep = st.literal;
    // HF replaces first and then looks at the front, where a space has become the replacement too.
    const bool starts_with_rep = piece.front() == ' ' || piece.substr(0, rep.size()) == rep;
    const bool prepend = !starts_with_rep && (st.prepend == ps::always || (st.prepend == ps::first && is_start));
    if (prepend || piece.find(' ') != std::string_view::npos) {
        std::string out;
        out.reserve(piece.size() + rep.size() * 4);
        if (prepend) out.append(rep);
        for (char c : piece) {
            if (c == ' ')
                out.append(rep);
            else
                out.push_back(c);
        }
        storage.push_back(std::move(out));
        piece = storage.back();
    }
    if (!st.metaspace_split) {
        if (is_start) next_start = static_cast<ptrdiff_t>(first + next.size());
        next.push_back(piece);
        return;
    }
    find_matches(st, piece, tmp, spans);
    apply_behavior(st.behavior, false, spans);
    for (const auto& s : spans) {
        if (s.is_match || s.end <= s.begin) continue;
        if (is_start && s.begin == 0) next_start = static_cast<ptrdiff_t>(first + next.size());
        next.push_back(piece.substr(s.begin, s.end - s.begin));
    }
}

}  // namespace

pre_tokenizer pre_tokenizer::from_json(const nlohmann::json& j) {
    pre_tokenizer p;
    parse_into(j, p.stages_);
    for (size_t i = 0; i < p.stages_.size(); ++i) {
        if (p.stages_[i].type != stage::kind::byte_level) continue;
        // Stages after ByteLevel would see byte-level characters, which zmoe never materializes.
        if (i + 1 != p.stages_.size())
            throw error(errc::unsupported, "tokenizer.json: pre_tokenizer stages after ByteLevel are not supported");
        p.byte_level_ = true;
    }
    return p;
}

void pre_tokenizer::split(std::string_view text, std::vector<std::string_view>& pieces,
                          std::deque<std::string>& storage, bool at_input_start) const {
    if (text.empty()) return;
    const size_t first = pieces.size();
    pieces.push_back(text);
    // Index in `pieces` of the piece that begins where `text` begins, while one does (-1 once it is gone).
    ptrdiff_t start_piece = at_input_start ? static_cast<ptrdiff_t>(first) : -1;
    // Scratch reused across calls: encode() pre-tokenizes once per text segment, often for tiny segments.
    thread_local std::vector<std::string_view> next;
    thread_local std::vector<std::pair<uint32_t, uint32_t>> tmp;
    thread_local std::vector<span> spans;
    for (const stage& st : stages_) {
        next.clear();
        ptrdiff_t next_start = -1;
        for (size_t i = first; i < pieces.size(); ++i) {
            std::string_view piece = pieces[i];
            const bool is_start = static_cast<ptrdiff_t>(i) == start_piece;
            if (st.type == stage::kind::metaspace) {
                split_metaspace(st, piece, is_start, storage, tmp, spans, next, next_start, first);
                continue;
            }
            if (st.type == stage::kind::byte_level) {
                if (st.add_prefix_space && piece.front() != ' ') {
                    storage.push_back(" ");
                    storage.back().append(piece);
                    piece = storage.back();
                }
                if (!st.regex) {
                    if (is_start) next_start = static_cast<ptrdiff_t>(first + next.size());
                    next.push_back(piece);
                    continue;
                }
            }
            find_matches(st, piece, tmp, spans);
            apply_behavior(st.behavior, st.invert, spans);  // ByteLevel's own split: Isolated, not inverted
            for (const auto& s : spans) {
                if (s.is_match || s.end <= s.begin) continue;
                if (is_start && s.begin == 0) next_start = static_cast<ptrdiff_t>(first + next.size());
                next.push_back(piece.substr(s.begin, s.end - s.begin));
            }
        }
        pieces.resize(first);
        pieces.insert(pieces.end(), next.begin(), next.end());
        start_piece = next_start;
    }
}

}  // namespace zmoe
