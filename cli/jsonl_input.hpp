#pragma once
// The JSON-lines input loop of the text commands (tokenize, detokenize, apply-chat-template): one line at a time
// from a file or stdin, with the line number added to whatever error a line raises.

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.hpp"

namespace zmoe::cli {

/// Calls fn(line) for every line of `input` ("-" = stdin), a trailing '\r' removed. An error fn throws (a
/// zmoe::error or a JSON parse error) is rethrown as a zmoe::error prefixed "INPUT:LINE: ", keeping its code
/// (invalid_argument for JSON errors). Throws errc::io when the file cannot be opened.
template <typename Fn>
void for_each_jsonl_line(const std::string& input, Fn&& fn) {
    std::ifstream file;
    std::istream* in = &std::cin;
    if (input != "-") {
        file.open(input, std::ios::binary);
        if (!file) throw error(errc::io, "cannot open input " + input);
        in = &file;
    }
    std::string line;
    size_t line_no = 0;
    while (std::getline(*in, line)) {
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        try {
            fn(line);
        } catch (const error& e) {
            throw error(e.code(), input + ":" + std::to_string(line_no) + ": " + e.what());
        } catch (const nlohmann::json::exception& e) {  // nlohmann's one exception base, ordered_json's too
            throw error(errc::invalid_argument, input + ":" + std::to_string(line_no) + ": " + e.what());
        }
    }
}

}  // namespace zmoe::cli
