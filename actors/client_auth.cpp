#include "actors/client_auth.hpp"

#include <cstdlib>

namespace zmoe {

std::string api_key_from_env() {
    const char* k = std::getenv("ZMOE_API_KEY");
    return k ? std::string(k) : std::string();
}

bool is_loopback_address(std::string_view a) {
    if (a.size() >= 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
    if (a == "localhost" || a == "::1" || a == "0:0:0:0:0:0:0:1") return true;
    for (std::string_view mapped : {"::ffff:", "::FFFF:"})
        if (a.substr(0, mapped.size()) == mapped) a.remove_prefix(mapped.size());
    // 127.0.0.0/8, dotted decimal: "127." followed by digits and dots only.
    if (a.substr(0, 4) != "127.") return false;
    for (char c : a.substr(4))
        if (!(c == '.' || (c >= '0' && c <= '9'))) return false;
    return true;
}

bool endpoint_reachable_off_host(std::string_view e) {
    constexpr std::string_view tcp = "tcp://";
    if (e.substr(0, tcp.size()) != tcp) return false;  // ipc://, inproc://: this host only
    e.remove_prefix(tcp.size());
    // A source address ("tcp://src;dst") does not change who can connect: look at the bound part only.
    const size_t colon = e.rfind(':');
    const std::string_view host = colon == std::string_view::npos ? e : e.substr(0, colon);
    return !is_loopback_address(host);
}

}  // namespace zmoe
