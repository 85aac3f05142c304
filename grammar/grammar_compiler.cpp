#include "grammar/grammar_compiler.hpp"

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "grammar/ebnf.hpp"
#include "grammar/regex.hpp"

namespace zmoe::grammar {

const char* grammar_kind_name(grammar_kind k) {
    switch (k) {
        case grammar_kind::json_schema:
            return "json_schema";
        case grammar_kind::json_object:
            return "json_object";
        case grammar_kind::regex:
            return "regex";
        case grammar_kind::choice:
            return "choice";
        case grammar_kind::ebnf:
            return "ebnf";
    }
    return "?";
}

grammar compile_regex(std::string_view pattern) {
    parsed_regex p = parse_regex(pattern);
    grammar_builder b;
    int32_t r = b.add_rule("root");
    nfa& a = b.rule(r);
    a.set_body(emit_regex(a, p.root, char_encoding::utf8));
    return b.build(r);
}

grammar compile_choice(const std::vector<std::string>& choices) {
    if (choices.empty()) throw zmoe::error(errc::invalid_argument, "choice: the list of choices is empty");
    grammar_builder b;
    int32_t r = b.add_rule("root");
    nfa& a = b.rule(r);
    std::vector<fragment> alts;
    for (const std::string& c : choices) alts.push_back(a.literal(c));
    a.set_body(a.alternate(alts));
    return b.build(r);
}

grammar compile_grammar(grammar_kind kind, std::string_view text, const json_schema_options& options) {
    switch (kind) {
        case grammar_kind::json_schema:
            return compile_json_schema(text, options);
        case grammar_kind::json_object:
            return compile_json_object(options);
        case grammar_kind::regex:
            return compile_regex(text);
        case grammar_kind::ebnf:
            return compile_ebnf(text);
        case grammar_kind::choice: {
            nlohmann::json j;
            try {
                j = nlohmann::json::parse(text);
            } catch (const nlohmann::json::exception& e) {
                throw zmoe::error(errc::invalid_argument, std::string("choice: not valid JSON: ") + e.what());
            }
            if (!j.is_array()) throw zmoe::error(errc::invalid_argument, "choice: expected a JSON array of strings");
            std::vector<std::string> choices;
            for (const auto& x : j) {
                if (!x.is_string())
                    throw zmoe::error(errc::invalid_argument, "choice: expected a JSON array of strings");
                choices.push_back(x.get<std::string>());
            }
            return compile_choice(choices);
        }
    }
    throw zmoe::error(errc::internal, "compile_grammar: unknown kind");
}

grammar_compiler::grammar_compiler(std::shared_ptr<const tokenizer_info> tok, size_t max_cached,
                                   json_schema_options options)
    : tok_(std::move(tok)), max_cached_(std::max<size_t>(max_cached, 1)), options_(options) {}

std::string grammar_compiler::cache_key(grammar_kind kind, std::string_view text) {
    std::string key = std::string(grammar_kind_name(kind)) + ":";
    switch (kind) {
        case grammar_kind::json_schema:
        case grammar_kind::choice:
            try {
                key += nlohmann::ordered_json::parse(text).dump();
            } catch (const nlohmann::json::exception& e) {
                throw zmoe::error(errc::invalid_argument,
                                  std::string(grammar_kind_name(kind)) + ": not valid JSON: " + e.what());
            }
            break;
        case grammar_kind::json_object:
            break;
        case grammar_kind::regex:
        case grammar_kind::ebnf:
            key += text;
            break;
    }
    return key;
}

std::shared_ptr<const compiled_grammar> grammar_compiler::compile(grammar_kind kind, std::string_view text) {
    const std::string key = cache_key(kind, text);
    std::promise<std::shared_ptr<const compiled_grammar>> promise;
    entry existing;
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = cache_.find(key);
        if (it != cache_.end()) {
            existing = it->second;
        } else {
            cache_.emplace(key, promise.get_future().share());
            order_.push_back(key);
            while (cache_.size() > max_cached_ && !order_.empty()) {
                if (order_.front() != key) cache_.erase(order_.front());
                order_.pop_front();
            }
        }
    }
    if (existing.valid()) return existing.get();  // compiled (or being compiled) by another request
    try {
        auto g = std::make_shared<const compiled_grammar>(compile_grammar(kind, text, options_), tok_);
        g->precompute_all(1);  // the whole token mask cache now: no request pays a position's first use
        promise.set_value(g);
        return g;
    } catch (...) {
        promise.set_exception(std::current_exception());
        std::lock_guard<std::mutex> lock(mu_);
        cache_.erase(key);
        order_.remove(key);
        throw;
    }
}

size_t grammar_compiler::num_cached() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_.size();
}

}  // namespace zmoe::grammar
