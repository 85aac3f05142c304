#pragma once
// Compiles structured-output requests into compiled_grammars for one vocabulary and caches them by a canonical key
// (the kind plus the canonical text: JSON re-serialized without whitespace and with key order kept, regex and
// EBNF verbatim), so that every request with the same schema shares one grammar and its token mask cache.
// Thread-safe: concurrent requests for one key compile it once; a failed compile is not cached.

#include <cstdint>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.hpp"
#include "grammar/json_schema.hpp"

namespace zmoe::grammar {

enum class grammar_kind : uint8_t {
    json_schema,  ///< text: a JSON Schema
    json_object,  ///< any JSON object; text ignored
    regex,        ///< text: a regular expression, matched in full
    choice,       ///< text: a JSON array of strings, one of which is produced verbatim
    ebnf,         ///< text: a GBNF-like grammar with a rule `root`
};

const char* grammar_kind_name(grammar_kind k);

/// The grammar for a regular expression matched in full (^ and $ are allowed and change nothing).
grammar compile_regex(std::string_view pattern);
/// One of `choices`, verbatim (raw UTF-8). Throws for an empty list.
grammar compile_choice(const std::vector<std::string>& choices);
/// The grammar of one request, without the vocabulary (throws zmoe::error invalid_argument naming the problem).
grammar compile_grammar(grammar_kind kind, std::string_view text, const json_schema_options& options = {});

class grammar_compiler {
  public:
    /// `max_cached`: how many compiled grammars are kept (the oldest goes first).
    explicit grammar_compiler(std::shared_ptr<const tokenizer_info> tok, size_t max_cached = 256,
                              json_schema_options options = {});

    /// The compiled grammar of a request, from the cache when the same (kind, canonical text) was compiled. A new
    /// grammar's token mask cache is filled before it is returned (on the calling thread).
    std::shared_ptr<const compiled_grammar> compile(grammar_kind kind, std::string_view text);
    /// The cache key of a request (throws like compile for JSON that does not parse).
    static std::string cache_key(grammar_kind kind, std::string_view text);

    size_t num_cached() const;
    const tokenizer_info& tokenizer() const { return *tok_; }

  private:
    using entry = std::shared_future<std::shared_ptr<const compiled_grammar>>;
    std::shared_ptr<const tokenizer_info> tok_;
    size_t max_cached_;
    json_schema_options options_;
    mutable std::mutex mu_;
    std::map<std::string, entry> cache_;
    std::list<std::string> order_;  // insertion order, oldest first
};

}  // namespace zmoe::grammar
