#include "cli/engine_flags.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <type_traits>

namespace po = boost::program_options;

namespace zmoe::cli {

void add_engine_options(po::options_description& d, engine_config& c) {
    for_each_engine_flag(c, [&](const engine_flag_info& info, auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
            d.add_options()(info.name, po::bool_switch(&v), info.help);
        } else if (info.required) {
            d.add_options()(info.name, po::value(&v)->required(), info.help);
        } else if constexpr (std::is_same_v<T, double>) {
            std::ostringstream s;
            s << v;  // the short spelling in --help ("0.9", not "0.90000000000000002")
            d.add_options()(info.name, po::value(&v)->default_value(v, s.str()), info.help);
        } else {
            d.add_options()(info.name, po::value(&v)->default_value(v), info.help);
        }
    });
}

void default_workers_to_gpus(engine_config& c, const po::variables_map& vm) {
    if (c.device != "cuda" || !vm["workers"].defaulted()) return;
    int n = 0;
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
        std::string v = visible;
        if (!v.empty()) n = 1 + static_cast<int>(std::count(v.begin(), v.end(), ','));
    } else {
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
            (void)e;
            ++n;
        }
    }
    if (n > 0) c.workers = n;
}

}  // namespace zmoe::cli
