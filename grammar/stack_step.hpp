#pragma once
// The pushdown automaton's step over one byte, shared by the matcher and the token mask cache. A stack is a chain
// of immutable nodes (state, parent) in a pool; a set of stacks is a list of node ids whose top states allow some
// byte ("scan" positions). Stepping never modifies a node: it appends new ones, so a caller can keep earlier sets
// and drop the scratch nodes of a step by truncating the pool.

#include <cstdint>
#include <vector>

#include "grammar/grammar.hpp"

namespace zmoe::grammar {

struct stack_node {
    int32_t state;
    int32_t parent;  ///< a node id, or kStackBottom / kContextBoundary
};

/// Below the root rule: popping to it means the whole grammar may end here.
constexpr int32_t kStackBottom = -1;
/// Below the position a token mask is precomputed for: popping to it means the answer depends on the stack.
constexpr int32_t kContextBoundary = -2;

struct step_flags {
    bool accepting = false;  ///< a stack popped to kStackBottom
    bool boundary = false;   ///< a stack popped to kContextBoundary
};

class stack_stepper {
  public:
    explicit stack_stepper(const grammar& g) : g_(g) {}

    /// Expands a node whose state was just entered: pushes the rules it may call, pops when its rule may end, and
    /// appends every scan position reached to `out` (without duplicates).
    void expand(std::vector<stack_node>& pool, int32_t node, std::vector<int32_t>& out, step_flags& flags) {
        visited_.clear();
        expand_one(pool, node, out, flags);
    }

    /// Advances the stacks in[0..n) over `byte`, appending the resulting scan positions to `out`.
    void advance(std::vector<stack_node>& pool, const int32_t* in, size_t n, uint8_t byte, std::vector<int32_t>& out,
                 step_flags& flags) {
        visited_.clear();
        for (size_t i = 0; i < n; ++i) {
            const stack_node cur = pool[static_cast<size_t>(in[i])];
            int32_t t = g_.step(cur.state, byte);
            if (t < 0) continue;
            pool.push_back({t, cur.parent});
            expand_one(pool, static_cast<int32_t>(pool.size() - 1), out, flags);
        }
    }

  private:
    void expand_one(std::vector<stack_node>& pool, int32_t node, std::vector<int32_t>& out, step_flags& flags) {
        const stack_node n = pool[static_cast<size_t>(node)];
        for (const stack_node& v : visited_)
            if (v.state == n.state && v.parent == n.parent) return;
        visited_.push_back(n);
        const size_t s = static_cast<size_t>(n.state);
        if (g_.has_bytes[s]) out.push_back(node);
        for (int32_t i = g_.call_offset[s]; i < g_.call_offset[s + 1]; ++i) {
            const call_edge& c = g_.calls[static_cast<size_t>(i)];
            pool.push_back({c.return_state, n.parent});
            int32_t ret = static_cast<int32_t>(pool.size() - 1);
            pool.push_back({g_.rule_start[static_cast<size_t>(c.rule)], ret});
            expand_one(pool, static_cast<int32_t>(pool.size() - 1), out, flags);
        }
        if (g_.is_final[s]) {
            if (n.parent == kStackBottom)
                flags.accepting = true;
            else if (n.parent == kContextBoundary)
                flags.boundary = true;
            else
                expand_one(pool, n.parent, out, flags);
        }
    }

    const grammar& g_;
    std::vector<stack_node> visited_;
};

}  // namespace zmoe::grammar
