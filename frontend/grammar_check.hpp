#pragma once
// The frontend's check of a request's structured-output constraint: it compiles the grammar (without the
// vocabulary, which only the workers bind) so that a schema, regex or grammar that cannot be compiled is refused
// with invalid_argument naming the problem before the request is queued. Constraints that compiled are remembered
// by their canonical key (grammar_compiler::cache_key), so a repeated schema costs a key computation only.
// Thread-safe.

#include <cstddef>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

#include "messages/structured_output.hpp"

namespace zmoe {

class grammar_check {
  public:
    /// `max_remembered`: how many compiled keys are kept (the least recently used goes first).
    explicit grammar_check(size_t max_remembered = 1024) : max_(max_remembered) {}

    /// Throws zmoe::error(invalid_argument) "structured output (<kind>): <problem>" when `s` does not compile; does
    /// nothing for an inactive constraint.
    void check(const structured_output& s);

    size_t num_remembered() const;

  private:
    size_t max_;
    mutable std::mutex mu_;
    std::list<std::string> lru_;  // most recent first
    std::unordered_map<std::string, std::list<std::string>::iterator> known_;
};

}  // namespace zmoe
