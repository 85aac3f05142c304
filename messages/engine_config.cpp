#include "messages/engine_config.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <type_traits>

#include "base/error.hpp"
#include "messages/envelope.hpp"

namespace zmoe {

namespace {
constexpr uint32_t kMaxFlags = 1024;
}  // namespace

std::vector<std::string> engine_config_args(const engine_config& c) {
    std::vector<std::string> out;
    for_each_engine_flag(c, [&](const engine_flag_info& info, const auto& v) {
        using T = std::decay_t<decltype(v)>;
        const std::string name = std::string("--") + info.name;
        if constexpr (std::is_same_v<T, bool>) {
            if (v) out.push_back(name);
        } else if constexpr (std::is_same_v<T, std::string>) {
            out.push_back(name);
            out.push_back(v);
        } else if constexpr (std::is_same_v<T, double>) {
            std::ostringstream s;
            s.precision(17);
            s << v;
            out.push_back(name);
            out.push_back(s.str());
        } else {
            out.push_back(name);
            out.push_back(std::to_string(v));
        }
    });
    return out;
}

void encode_engine_config(msgpack_writer& w, const engine_config& c) {
    uint32_t n = 0;
    for_each_engine_flag(c, [&](const engine_flag_info&, const auto&) { ++n; });
    w.array_header(n);
    for_each_engine_flag(c, [&](const engine_flag_info& info, const auto& v) {
        using T = std::decay_t<decltype(v)>;
        w.array_header(2);
        w.str(info.name);
        if constexpr (std::is_same_v<T, bool>) {
            w.boolean(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
            w.str(v);
        } else if constexpr (std::is_same_v<T, double>) {
            w.f64(v);
        } else {
            w.sint(v);
        }
    });
}

engine_config read_engine_config(field_cursor& f, const char* field) {
    engine_config c;
    msgpack_reader& r = f.next(field);
    const uint32_t n = r.read_array_header(kMaxFlags, field);
    for (uint32_t i = 0; i < n; ++i) {
        field_cursor pair(r, r.read_array_header(2, field));
        const std::string name = pair.read_string(field, kMaxNameBytes);
        bool known = false;
        for_each_engine_flag(c, [&](const engine_flag_info& info, auto& v) {
            if (known || name != info.name) return;
            known = true;
            using T = std::decay_t<decltype(v)>;
            const char* what = info.name;
            if constexpr (std::is_same_v<T, bool>) {
                v = pair.read_bool(what);
            } else if constexpr (std::is_same_v<T, std::string>) {
                v = pair.read_string(what, kMaxNameBytes);
            } else if constexpr (std::is_same_v<T, double>) {
                v = pair.read_double(what);
            } else if constexpr (std::is_same_v<T, int32_t>) {
                v = pair.read_int32(what);
            } else {
                static_assert(std::is_same_v<T, int64_t>, "engine flag of an unsupported type");
                v = pair.read_int(what);
            }
        });
        if (!known) r.fail(field, "unknown engine flag '" + name + "'");
        pair.finish();
    }
    return c;
}

ep_transport_mode ep_transport_mode_of(const std::string& name) {
    if (name == "auto") return ep_transport_mode::automatic;
    if (name == "nccl") return ep_transport_mode::nccl;
    throw error(errc::invalid_argument, "--ep-transport must be auto or nccl, not '" + name + "'");
}

int engine_threads_per_worker(const engine_config& c, unsigned hardware_threads) {
    if (c.threads > 0) return c.threads;
    const int nodes = std::max(1, c.num_nodes);
    const int workers_per_node = std::max(1, (c.workers + nodes - 1) / nodes);
    return std::max(1, static_cast<int>(std::max(1u, hardware_threads)) / workers_per_node);
}

}  // namespace zmoe
