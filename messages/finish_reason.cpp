#include "messages/finish_reason.hpp"

namespace zmoe {

std::string_view finish_reason_name(finish_reason r) {
    switch (r) {
        case finish_reason::none:
            return "";
        case finish_reason::length:
            return "length";
        case finish_reason::stop:
            return "stop";
        case finish_reason::abort:
            return "abort";
        case finish_reason::error:
            return "error";
    }
    return "error";
}

std::optional<finish_reason> finish_reason_from_name(std::string_view name) {
    for (auto r : {finish_reason::none, finish_reason::length, finish_reason::stop, finish_reason::abort,
                   finish_reason::error}) {
        if (finish_reason_name(r) == name) return r;
    }
    return std::nullopt;
}

}  // namespace zmoe
