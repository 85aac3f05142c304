#include "frontend/chat_messages.hpp"

#include <array>
#include <string_view>
#include <vector>

namespace zmoe {

using jinja::json;

namespace {

constexpr std::array<std::string_view, 6> kRoles = {"system", "developer", "user", "assistant", "tool", "function"};
constexpr std::array<std::string_view, 4> kTextParts = {"text", "input_text", "output_text", "refusal"};
// Part types of OpenAI's and vLLM's APIs that carry media: refused by name (a text-only model cannot read them).
constexpr std::array<std::string_view, 10> kMediaParts = {"image_url", "input_image",  "image_pil",    "image_embeds",
                                                          "audio_url", "input_audio",  "audio_embeds", "video_url",
                                                          "file",      "prompt_embeds"};

template <size_t N>
bool one_of(const std::array<std::string_view, N>& set, const std::string& s) {
    for (std::string_view v : set)
        if (v == s) return true;
    return false;
}

template <size_t N>
std::string listed(const std::array<std::string_view, N>& set) {
    std::string out;
    for (std::string_view v : set) out += (out.empty() ? "" : ", ") + std::string(v);
    return out;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// The texts of a content list, in order (empty ones included).
std::vector<std::string> part_texts(const json& parts, const std::string& field) {
    std::vector<std::string> texts;
    for (size_t j = 0; j < parts.size(); ++j) {
        const json& part = parts[j];
        const std::string at = field + "[" + std::to_string(j) + "]";
        if (part.is_string()) {
            texts.push_back(part.get<std::string>());
            continue;
        }
        if (!part.is_object()) throw chat_message_error(at, "a content part must be a string or an object");
        auto type = part.find("type");
        if (type == part.end() || !type->is_string())
            throw chat_message_error(at + ".type", "a content part needs a string 'type'");
        const std::string t = type->get<std::string>();
        if (one_of(kMediaParts, t))
            throw chat_message_error(at + ".type", "'" + t +
                                                       "' content parts are not supported: the served model takes "
                                                       "text only (supported part types: " +
                                                       listed(kTextParts) + ")");
        if (!one_of(kTextParts, t))
            throw chat_message_error(at + ".type",
                                     "unknown content part type '" + t + "' (supported: " + listed(kTextParts) + ")");
        const char* key = t == "refusal" ? "refusal" : "text";
        for (auto it = part.begin(); it != part.end(); ++it)
            if (it.key() != "type" && it.key() != key)
                throw chat_message_error(at + "." + it.key(), "not supported in a '" + t + "' content part");
        auto text = part.find(key);
        if (text == part.end() || !text->is_string())
            throw chat_message_error(at + "." + key, "a '" + t + "' content part needs a string '" + key + "'");
        texts.push_back(text->get<std::string>());
    }
    return texts;
}

json text_parts(const std::vector<std::string>& texts) {
    json out = json::array();
    for (const std::string& t : texts) out.push_back(json{{"type", "text"}, {"text", t}});
    return out;
}

// Joins with "\n"; skip_empty drops empty texts first (vLLM's string format keeps only non-empty parts).
std::string joined(const std::vector<std::string>& texts, bool skip_empty) {
    std::string out;
    bool first = true;
    for (const std::string& t : texts) {
        if (skip_empty && t.empty()) continue;
        if (!first) out += "\n";
        out += t;
        first = false;
    }
    return out;
}

json content_of(const json& msg, const std::string& role, const std::string& field, const chat_message_shape& shape) {
    auto c = msg.find("content");
    const bool openai = shape.content == chat_content_format::openai;
    if (c == msg.end() || c->is_null()) {
        if (shape.null_content) return nullptr;
        return openai && role != "tool" ? json::array() : json("");
    }
    std::vector<std::string> texts;
    if (c->is_string()) {
        texts.push_back(c->get<std::string>());
    } else if (c->is_array()) {
        texts = part_texts(*c, field + ".content");
    } else {
        throw chat_message_error(field + ".content", "must be a string, a list of content parts, or null");
    }
    if (!openai) return joined(texts, /*skip_empty=*/true);
    // A tool result made of text parts reaches the template as one string (most templates print it as is).
    if (role == "tool") return joined(texts, /*skip_empty=*/false);
    return text_parts(texts);
}

json arguments_of(const json& function, const std::string& field, bool as_text) {
    auto a = function.find("arguments");
    json value = json::object();
    if (a == function.end() || a->is_null()) {
        // no arguments: an empty object
    } else if (a->is_string()) {
        const std::string text = a->get<std::string>();
        if (!blank(text)) {
            try {
                value = json::parse(text);
            } catch (const json::exception& e) {
                throw chat_message_error(field, std::string("not valid JSON: ") + e.what());
            }
            if (as_text) return text;
        }
    } else if (a->is_object() || a->is_array()) {
        value = *a;
    } else {
        throw chat_message_error(field, "must be a JSON string or an object");
    }
    return as_text ? json(jinja::json_dumps(value, -1, false)) : value;
}

json tool_calls_of(const json& calls, const std::string& field, const chat_message_shape& shape) {
    if (!calls.is_array()) throw chat_message_error(field, "must be a list of tool calls");
    json out = json::array();
    for (size_t j = 0; j < calls.size(); ++j) {
        const std::string at = field + "[" + std::to_string(j) + "]";
        const json& call = calls[j];
        if (!call.is_object()) throw chat_message_error(at, "a tool call must be an object");
        json copy = json::object();
        for (auto it = call.begin(); it != call.end(); ++it) {
            const std::string& key = it.key();
            if (key == "id") {
                if (!it->is_string()) throw chat_message_error(at + ".id", "must be a string");
            } else if (key == "type") {
                if (*it != "function")
                    throw chat_message_error(at + ".type", "only 'function' tool calls are supported");
            } else if (key == "function") {
                if (!it->is_object()) throw chat_message_error(at + ".function", "must be an object");
                json fn = json::object();
                for (auto f = it->begin(); f != it->end(); ++f) {
                    if (f.key() == "name") {
                        if (!f->is_string()) throw chat_message_error(at + ".function.name", "must be a string");
                        fn["name"] = *f;
                    } else if (f.key() == "arguments") {
                        fn["arguments"] = arguments_of(*it, at + ".function.arguments", shape.string_arguments);
                    } else {
                        throw chat_message_error(at + ".function." + f.key(), "not supported in a tool call");
                    }
                }
                if (!fn.contains("name")) throw chat_message_error(at + ".function.name", "is required");
                if (!fn.contains("arguments"))
                    fn["arguments"] = arguments_of(*it, at + ".function.arguments", shape.string_arguments);
                copy[key] = std::move(fn);
                continue;
            } else {
                throw chat_message_error(at + "." + key, "not supported in a tool call");
            }
            copy[key] = *it;
        }
        if (!copy.contains("function")) throw chat_message_error(at + ".function", "is required");
        out.push_back(std::move(copy));
    }
    return out;
}

const json* present(const json& msg, const char* key) {
    auto it = msg.find(key);
    return it == msg.end() || it->is_null() ? nullptr : &*it;
}

const json* string_field(const json& msg, const char* key, const std::string& field) {
    const json* v = present(msg, key);
    if (v && !v->is_string()) throw chat_message_error(field + "." + key, "must be a string");
    return v;
}

json normalize_message(const json& msg, const std::string& field, const chat_message_shape& shape) {
    if (!msg.is_object()) throw chat_message_error(field, "a message must be an object");
    auto r = msg.find("role");
    if (r == msg.end() || !r->is_string()) throw chat_message_error(field + ".role", "a message needs a string role");
    const std::string role = r->get<std::string>();
    if (!is_chat_role(role))
        throw chat_message_error(field + ".role", "unknown role '" + role + "' (allowed: " + listed(kRoles) + ")");
    const bool assistant = role == "assistant";
    for (auto it = msg.begin(); it != msg.end(); ++it) {
        const std::string& key = it.key();
        if (key == "role" || key == "content" || key == "name") continue;
        if (assistant && (key == "tool_calls" || key == "reasoning" || key == "reasoning_content")) continue;
        if (role == "tool" && key == "tool_call_id") continue;
        // What OpenAI's SDKs echo back in an assistant message they received: dropped when it carries nothing.
        if (assistant && (key == "refusal" || key == "audio" || key == "function_call") && it->is_null()) continue;
        if (assistant && key == "annotations" && (it->is_null() || (it->is_array() && it->empty()))) continue;
        if (key == "tool_calls" || key == "reasoning" || key == "reasoning_content")
            throw chat_message_error(field + "." + key, "only assistant messages carry '" + key + "'");
        if (key == "tool_call_id")
            throw chat_message_error(field + "." + key, "only tool messages carry a tool_call_id");
        throw chat_message_error(field + "." + key, "not supported in a '" + role + "' message");
    }
    json out = json::object();
    out["role"] = role;
    out["content"] = content_of(msg, role, field, shape);
    if (assistant) {
        if (const json* calls = present(msg, "tool_calls")) {
            json list = tool_calls_of(*calls, field + ".tool_calls", shape);
            if (!list.empty()) out["tool_calls"] = std::move(list);
        }
        const json* reasoning = string_field(msg, "reasoning", field);
        const json* legacy = string_field(msg, "reasoning_content", field);
        if (reasoning && legacy && *reasoning != *legacy)
            throw chat_message_error(field + ".reasoning_content", "differs from 'reasoning': send one of them");
        if (const json* text = reasoning ? reasoning : legacy) {
            out["reasoning"] = *text;
            out["reasoning_content"] = *text;
        }
    }
    if (role == "tool")
        if (const json* id = string_field(msg, "tool_call_id", field)) out["tool_call_id"] = *id;
    if (const json* name = string_field(msg, "name", field)) out["name"] = *name;
    return out;
}

}  // namespace

bool is_chat_role(const std::string& role) { return one_of(kRoles, role); }

std::optional<chat_content_format> parse_content_format(const std::string& option) {
    if (option == "auto") return std::nullopt;
    if (option == "string") return chat_content_format::string;
    if (option == "openai") return chat_content_format::openai;
    throw error(errc::invalid_argument,
                "--chat-template-content-format must be auto, string or openai, got '" + option + "'");
}

std::string describe(const chat_message_shape& shape) {
    return std::string("content format ") + (shape.content == chat_content_format::openai ? "openai" : "string") +
           (shape.null_content ? ", null content kept" : ", null content as \"\"") +
           (shape.string_arguments ? ", tool-call arguments as JSON text" : ", tool-call arguments as objects");
}

json normalize_chat_messages(const json& messages, const chat_message_shape& shape) {
    if (!messages.is_array()) throw chat_message_error("messages", "must be a list of messages");
    json out = json::array();
    for (size_t i = 0; i < messages.size(); ++i)
        out.push_back(normalize_message(messages[i], "messages[" + std::to_string(i) + "]", shape));
    return out;
}

}  // namespace zmoe
