#include "frontend/chat_template.hpp"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "frontend/chat_template_shape.hpp"

namespace zmoe {

namespace fs = std::filesystem;
using jinja::json;

namespace {

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) throw error(errc::io, "cannot read " + p.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// tokenizer_config.json's special tokens as plain strings (AddedToken objects give their content).
json special_tokens_of(const json& config) {
    json out = json::object();
    static const char* const kNames[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                         "pad_token", "cls_token", "mask_token"};
    for (const char* name : kNames) {
        auto it = config.find(name);
        if (it == config.end() || it->is_null()) continue;
        if (it->is_string())
            out[name] = *it;
        else if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
            out[name] = (*it)["content"];
    }
    auto extra = config.find("additional_special_tokens");
    if (extra != config.end() && extra->is_array()) {
        json list = json::array();
        for (const auto& t : *extra) {
            if (t.is_string())
                list.push_back(t);
            else if (t.is_object() && t.contains("content"))
                list.push_back(t["content"]);
        }
        if (!list.empty()) out["additional_special_tokens"] = list;
    }
    return out;
}

}  // namespace

chat_request parse_chat_request(const json& j) {
    if (!j.is_object()) throw error(errc::invalid_argument, "a chat request must be a JSON object");
    chat_request r;
    auto m = j.find("messages");
    if (m == j.end() || !m->is_array()) throw error(errc::invalid_argument, "'messages' must be an array");
    r.messages = *m;  // checked and normalised by render (normalize_chat_messages)
    if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
        if (!t->is_array()) throw error(errc::invalid_argument, "'tools' must be an array");
        r.tools = *t;
    }
    if (auto g = j.find("add_generation_prompt"); g != j.end() && !g->is_null()) {
        if (!g->is_boolean()) throw error(errc::invalid_argument, "'add_generation_prompt' must be a boolean");
        r.add_generation_prompt = g->get<bool>();
    }
    if (auto k = j.find("chat_template_kwargs"); k != j.end() && !k->is_null()) {
        if (!k->is_object()) throw error(errc::invalid_argument, "'chat_template_kwargs' must be an object");
        r.chat_template_kwargs = *k;
    }
    return r;
}

chat_template::chat_template(const std::string& source, json special_tokens)
    : template_(source),
      shape_(detect_message_shape(template_.statements())),
      special_tokens_(std::move(special_tokens)) {}

const chat_message_shape& chat_template::message_shape(bool with_tools) const {
    return with_tools && tool_use_template_ ? tool_use_shape_ : shape_;
}

std::optional<chat_template> chat_template::from_tokenizer(const std::string& tokenizer_path,
                                                           const std::string& override_file) {
    fs::path dir(tokenizer_path);
    if (!fs::is_directory(dir)) dir = dir.parent_path();
    json config = json::object();
    const fs::path config_path = dir / "tokenizer_config.json";
    if (fs::exists(config_path)) {
        try {
            config = json::parse(read_text(config_path));
        } catch (const json::exception& e) {
            throw error(errc::invalid_argument, config_path.string() + ": " + e.what());
        }
    }
    json special = special_tokens_of(config);
    if (!override_file.empty()) return chat_template(read_text(override_file), special);
    if (fs::exists(dir / "chat_template.jinja")) return chat_template(read_text(dir / "chat_template.jinja"), special);
    auto ct = config.find("chat_template");
    if (ct == config.end() || ct->is_null()) return std::nullopt;
    if (ct->is_string()) return chat_template(ct->get<std::string>(), special);
    if (ct->is_array()) {
        std::optional<std::string> dflt, tool_use;
        for (const auto& entry : *ct) {
            if (!entry.is_object() || !entry.contains("name") || !entry.contains("template")) continue;
            if (entry["name"] == "default") dflt = entry["template"].get<std::string>();
            if (entry["name"] == "tool_use") tool_use = entry["template"].get<std::string>();
        }
        if (!dflt) throw error(errc::unsupported, config_path.string() + ": no \"default\" chat template");
        chat_template out(*dflt, special);
        if (tool_use) {
            out.tool_use_template_.emplace(*tool_use);
            out.tool_use_shape_ = detect_message_shape(out.tool_use_template_->statements());
        }
        return out;
    }
    throw error(errc::invalid_argument, config_path.string() + ": chat_template is neither a string nor a list");
}

std::string chat_template::render(const chat_request& request) const {
    const bool use_tools = tool_use_template_ && request.tools.is_array() && !request.tools.empty();
    json vars = json::object();
    vars["messages"] = normalize_chat_messages(request.messages, message_shape(use_tools));
    vars["tools"] = request.tools;
    vars["documents"] = nullptr;
    vars["add_generation_prompt"] = request.add_generation_prompt;
    for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it) vars[it.key()] = it.value();
    for (auto it = request.chat_template_kwargs.begin(); it != request.chat_template_kwargs.end(); ++it)
        vars[it.key()] = it.value();

    jinja::object globals;
    globals["raise_exception"] =
        jinja::value::make_callable("raise_exception", [](jinja::call_args& a) -> jinja::value {
            throw jinja::render_error(a.positional.empty() ? std::string("raise_exception")
                                                           : jinja::to_str(a.positional[0]));
        });
    const auto clock = clock_;
    globals["strftime_now"] = jinja::value::make_callable("strftime_now", [clock](jinja::call_args& a) -> jinja::value {
        if (a.positional.empty() || !a.positional[0].is_string())
            throw jinja::render_error("strftime_now takes a format string");
        const auto now = clock ? clock() : std::chrono::system_clock::now();
        const std::time_t t = std::chrono::system_clock::to_time_t(now);
        std::tm tm{};
        localtime_r(&t, &tm);
        char buf[256];
        const size_t n = std::strftime(buf, sizeof buf, a.positional[0].str_ref().c_str(), &tm);
        return jinja::value(json(std::string(buf, n)));
    });
    return (use_tools ? *tool_use_template_ : template_).render(vars, globals);
}

}  // namespace zmoe
