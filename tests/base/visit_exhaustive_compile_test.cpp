// Compiled (syntax only) by CTest with -DZMOE_CASE=<n>, never linked: case 0 must compile, and every other case
// must fail with visit_exhaustive's diagnostic. So a message kind without a handler, a catch-all `auto` handler or
// a handler for a type the protocol does not have is a compile error (base/overloaded.hpp).

#include <string>
#include <variant>

#include "base/overloaded.hpp"

struct alpha {};
struct beta {
    int n = 0;
};
struct gamma_msg {
    std::string s;
};
using message = std::variant<alpha, beta, gamma_msg>;

int dispatch(message m) {
    int r = 0;
#if ZMOE_CASE == 0  // one handler per kind: compiles
    zmoe::visit_exhaustive(
        std::move(m), [&](const alpha&) { r = 1; }, [&](const beta& b) { r = b.n; },
        [&](gamma_msg&& g) { r = static_cast<int>(g.s.size()); });
#elif ZMOE_CASE == 1  // a kind without a handler (as when a message is added to a protocol)
    zmoe::visit_exhaustive(
        std::move(m), [&](const alpha&) { r = 1; }, [&](const beta& b) { r = b.n; });
#elif ZMOE_CASE == 2  // a generic catch-all in place of a handler
    zmoe::visit_exhaustive(
        std::move(m), [&](const alpha&) { r = 1; }, [&](const beta& b) { r = b.n; }, [&](const auto&) { r = 3; });
#elif ZMOE_CASE == 3  // a handler for a type that is not a kind of this protocol, in place of one that is
    zmoe::visit_exhaustive(
        std::move(m), [&](const alpha&) { r = 1; }, [&](const beta& b) { r = b.n; }, [&](const std::string&) {});
#elif ZMOE_CASE == 4  // two handlers of one kind, none of another
    zmoe::visit_exhaustive(
        std::move(m), [&](const alpha&) { r = 1; }, [&](const beta& b) { r = b.n; }, [&](beta&&) { r = 2; });
#endif
    return r;
}
