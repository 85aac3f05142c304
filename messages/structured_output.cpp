#include "messages/structured_output.hpp"

namespace zmoe {

std::string_view structured_kind_name(structured_kind k) {
    switch (k) {
        case structured_kind::none:
            return "";
        case structured_kind::json_schema:
            return "json_schema";
        case structured_kind::json_object:
            return "json_object";
        case structured_kind::regex:
            return "regex";
        case structured_kind::choice:
            return "choice";
        case structured_kind::grammar:
            return "grammar";
    }
    return "";
}

std::optional<structured_kind> structured_kind_from_name(std::string_view name) {
    for (auto k : {structured_kind::none, structured_kind::json_schema, structured_kind::json_object,
                   structured_kind::regex, structured_kind::choice, structured_kind::grammar}) {
        if (structured_kind_name(k) == name) return k;
    }
    return std::nullopt;
}

}  // namespace zmoe
