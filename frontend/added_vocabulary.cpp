#include "frontend/added_vocabulary.hpp"

#include <algorithm>

#include "frontend/utf8.hpp"

namespace zmoe {
namespace {

// Rust's char::is_whitespace (the White_Space property), which HF uses for lstrip/rstrip.
bool is_whitespace(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Start of the last code point of s (s non-empty, valid UTF-8).
size_t last_char_start(std::string_view s) {
    size_t i = s.size() - 1;
    while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
    return i;
}

}  // namespace

void added_vocabulary::trie::insert(std::string_view key, int32_t token) {
    if (key.empty()) return;  // an empty token can never be matched
    if (nodes.empty()) {
        nodes.emplace_back();
        root_child.assign(256, -1);
    }
    int32_t cur = 0;
    for (size_t i = 0; i < key.size(); ++i) {
        const auto b = static_cast<uint8_t>(key[i]);
        int32_t next = -1;
        if (cur == 0) {
            next = root_child[b];
        } else {
            for (const auto& [byte, child] : nodes[cur].children)
                if (byte == b) next = child;
        }
        if (next < 0) {
            next = static_cast<int32_t>(nodes.size());
            nodes.emplace_back();
            if (cur == 0)
                root_child[b] = next;
            else
                nodes[cur].children.emplace_back(b, next);
        }
        cur = next;
    }
    // Two entries with the same content: the first one wins, as the first pattern does in HF's automaton.
    if (nodes[cur].token < 0) nodes[cur].token = token;
}

std::pair<int32_t, size_t> added_vocabulary::trie::longest_at(std::string_view text, size_t pos) const {
    int32_t cur = root_child[static_cast<uint8_t>(text[pos])];
    std::pair<int32_t, size_t> best{-1, 0};
    size_t i = pos + 1;
    while (cur >= 0) {
        if (nodes[cur].token >= 0) best = {nodes[cur].token, i - pos};
        if (i >= text.size()) break;
        const auto b = static_cast<uint8_t>(text[i++]);
        int32_t next = -1;
        for (const auto& [byte, child] : nodes[cur].children)
            if (byte == b) {
                next = child;
                break;
            }
        cur = next;
    }
    return best;
}

added_vocabulary::added_vocabulary(std::vector<added_token> tokens, const normalizer& norm)
    : tokens_(std::move(tokens)) {
    std::string storage;
    bool any_single_word = false;
    for (size_t i = 0; i < tokens_.size(); ++i) {
        const auto& t = tokens_[i];
        any_single_word = any_single_word || t.single_word;
        if (t.normalized)
            normalized_.insert(norm.normalize(t.content, storage), static_cast<int32_t>(i));
        else
            raw_.insert(t.content, static_cast<int32_t>(i));
    }
    // HF decides word boundaries with the regex crate's \w; Oniguruma's Unicode \w is the same class.
    if (any_single_word) word_char_ = std::make_shared<onig_regex>(R"(\A\w\z)");
}

bool added_vocabulary::is_word_char(char32_t cp) const {
    std::string s;
    utf8::append(s, cp);
    std::vector<std::pair<uint32_t, uint32_t>> m;
    word_char_->find_all(s, m);
    return !m.empty();
}

void added_vocabulary::split(std::string_view text, bool raw, std::vector<segment>& out) const {
    const trie& t = raw ? raw_ : normalized_;
    if (t.nodes.empty() || text.empty()) {
        if (!text.empty()) out.push_back({0, text.size(), -1});
        return;
    }
    size_t start_offset = 0;  // end of the previous emitted token
    size_t pos = 0;           // where the automaton resumes scanning
    while (pos < text.size()) {
        if (t.root_child[static_cast<uint8_t>(text[pos])] < 0) {
            ++pos;
            continue;
        }
        const auto [index, len] = t.longest_at(text, pos);
        if (index < 0) {
            ++pos;
            continue;
        }
        const added_token& tok = tokens_[static_cast<size_t>(index)];
        size_t start = pos, stop = pos + len;
        pos = stop;
        if (tok.single_word) {
            size_t j = 0;
            const bool start_space = start == 0 || !is_word_char([&] {
                                         j = last_char_start(text.substr(0, start));
                                         return utf8::decode(text, j);
                                     }());
            size_t k = stop;
            const bool stop_space = stop == text.size() || !is_word_char(utf8::decode(text, k));
            if (!start_space || !stop_space) continue;
        }
        if (tok.lstrip) {
            size_t s = start;
            while (s > 0) {
                const size_t b = last_char_start(text.substr(0, s));
                size_t tmp = b;
                if (!is_whitespace(utf8::decode(text, tmp))) break;
                s = b;
            }
            start = std::max(s, start_offset);
        }
        if (tok.rstrip) {
            size_t e = stop;
            while (e < text.size()) {
                size_t tmp = e;
                if (!is_whitespace(utf8::decode(text, tmp))) break;
                e = tmp;
            }
            stop = e;
        }
        if (start_offset < start) out.push_back({start_offset, start, -1});
        out.push_back({start, stop, tok.id});
        start_offset = stop;
    }
    if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace zmoe
