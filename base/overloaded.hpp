#pragma once
// Exhaustive message dispatch. visit_exhaustive(decoded, handler, handler, ...) calls the handler of the
// alternative `decoded` holds, and compiles only when there is exactly one handler per alternative of the variant,
// each taking its message type by a named type: a generic `auto` handler (a catch-all) does not compile, and nor
// does a message kind added to a protocol without a handler in every actor that takes it. So nothing is dropped
// silently (STYLE: exhaustive handling; CAF's behaviours make every handler explicit the same way).

#include <cstddef>
#include <type_traits>
#include <utility>
#include <variant>

namespace zmoe {

/// The usual overload set of lambdas, for std::visit.
template <class... Fs>
struct overloaded : Fs... {
    using Fs::operator()...;
};
template <class... Fs>
overloaded(Fs...) -> overloaded<Fs...>;

namespace detail {

// The one parameter type of a handler, decayed. A generic lambda has no single operator() to take the address
// of, so it has no handler_arg: that is the compile error which keeps catch-alls out.
template <class M>
struct member_arg;
template <class C, class R, class A>
struct member_arg<R (C::*)(A) const> {
    using type = std::decay_t<A>;
};
template <class C, class R, class A>
struct member_arg<R (C::*)(A)> {
    using type = std::decay_t<A>;
};
template <class F>
using handler_arg = typename member_arg<decltype(&std::decay_t<F>::operator())>::type;
template <class F>
inline constexpr bool names_its_type = requires {
    &std::decay_t<F>::operator();
};

template <class T, class... Ts>
inline constexpr bool one_of = (std::is_same_v<T, Ts> || ...);

template <class T, class... Ts>
inline constexpr std::size_t count_of = (std::size_t{0} + ... + (std::is_same_v<T, Ts> ? 1 : 0));

template <class Variant>
struct exhaustive;
template <class... Ts>
struct exhaustive<std::variant<Ts...>> {
    template <class... Fs>
    static constexpr void check() {
        static_assert((names_its_type<Fs> && ...),
                      "visit_exhaustive: every handler takes one named message type (no generic catch-all)");
        static_assert(sizeof...(Fs) == sizeof...(Ts), "visit_exhaustive: one handler per message kind");
        static_assert((one_of<handler_arg<Fs>, Ts...> && ...),
                      "visit_exhaustive: a handler takes a type that is not a message kind of this variant");
        static_assert(((count_of<Ts, handler_arg<Fs>...> == 1) && ...),
                      "visit_exhaustive: every message kind needs exactly one handler");
    }
};

}  // namespace detail

/// Calls the handler of the alternative `v` holds. Every handler is a non-generic callable taking one message
/// type (by value, const&, & or &&); there must be exactly one per alternative.
template <class Variant, class... Fs>
decltype(auto) visit_exhaustive(Variant&& v, Fs&&... handlers) {
    detail::exhaustive<std::remove_cvref_t<Variant>>::template check<Fs...>();
    return std::visit(overloaded{std::forward<Fs>(handlers)...}, std::forward<Variant>(v));
}

}  // namespace zmoe
