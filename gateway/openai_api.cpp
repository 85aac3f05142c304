#include "gateway/openai_api.hpp"

#include <cmath>
#include <set>
#include <string>

#include "frontend/chat_messages.hpp"
#include "messages/sampling_codec.hpp"
#include "tool_calls/tool_call_grammar.hpp"

namespace zmoe::gateway {

namespace {

[[noreturn]] void bad(const std::string& message, const std::string& param = {}) {
    throw api_error{.status = 400, .message = message, .type = "invalid_request_error", .param = param};
}

const ojson* field(const ojson& body, const char* name) {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number_field(const ojson& body, const char* name, double lo, double hi, double fallback) {
    const ojson* v = field(body, name);
    if (!v) return fallback;
    if (!v->is_number()) bad(std::string("'") + name + "' must be a number", name);
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
        bad(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", name);
    return d;
}

int64_t int_field(const ojson& body, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
    const ojson* v = field(body, name);
    if (!v) return fallback;
    if (!v->is_number_integer()) bad(std::string("'") + name + "' must be an integer", name);
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi)
        bad(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", name);
    return i;
}

bool bool_field(const ojson& body, const char* name, bool fallback) {
    const ojson* v = field(body, name);
    if (!v) return fallback;
    if (!v->is_boolean()) bad(std::string("'") + name + "' must be a boolean", name);
    return v->get<bool>();
}

/// A request body: a JSON object, else 400.
ojson parse_body(const std::string& text) {
    ojson body;
    try {
        body = ojson::parse(text);
    } catch (const ojson::exception& e) {
        bad(std::string("the request body is not valid JSON: ") + e.what());
    }
    if (!body.is_object()) bad("the request body must be a JSON object");
    return body;
}

/// The frontend's chat JSON (client_generate.chat): the messages and the body's add_generation_prompt, tools and
/// chat_template_kwargs. The messages are checked here so that a refusal names its field in the 400's param (the
/// frontend normalises them again for its template's shape, and refuses the same messages).
std::string chat_json(const ojson& body, const ojson& messages) {
    if (!messages.is_array() || messages.empty()) bad("'messages' must be a non-empty list", "messages");
    try {
        normalize_chat_messages(messages);
    } catch (const chat_message_error& e) {
        bad(e.what(), e.field());
    }
    ojson chat = {{"messages", messages}, {"add_generation_prompt", bool_field(body, "add_generation_prompt", true)}};
    if (const ojson* t = field(body, "tools")) {
        if (!t->is_array()) bad("'tools' must be a list", "tools");
        chat["tools"] = *t;
    }
    if (const ojson* k = field(body, "chat_template_kwargs")) {
        if (!k->is_object()) bad("'chat_template_kwargs' must be an object", "chat_template_kwargs");
        chat["chat_template_kwargs"] = *k;
    }
    return chat.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

std::string error_body(const api_error& e) {
    ojson err = {{"message", e.message},
                 {"type", e.type},
                 {"param", e.param.empty() ? ojson() : ojson(e.param)},
                 {"code", e.status}};
    return ojson{{"error", err}}.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

api_error error_from_errc(errc code, const std::string& message) {
    switch (code) {
        case errc::invalid_argument:
        case errc::unsupported:
        case errc::duplicate_request:
            return {.status = 400, .message = message, .type = "invalid_request_error", .param = {}};
        case errc::overloaded:
            return {.status = 429, .message = message, .type = "rate_limit_error", .param = {}};
        case errc::out_of_memory:
        case errc::peer_dead:
        case errc::aborted:
            return {.status = 503, .message = message, .type = "service_unavailable", .param = {}};
        default:
            return {.status = 500, .message = message, .type = "internal_server_error", .param = {}};
    }
}

namespace {

/// Every body field this server implements, per route (docs/openai_api.md). Anything else is refused with a 400
/// naming it, never accepted and ignored: a client that asks for `response_format`, `tool_choice: "required"` or an
/// option of another engine learns at once that it does not get it.
bool known_field(const std::string& name, endpoint_kind kind) {
    static const std::set<std::string> kCommon = {
        "model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "n", "stop", "seed",
        "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "user",
        // vLLM's sampling extras
        "top_k", "min_p", "repetition_penalty", "ignore_eos", "min_tokens", "stop_token_ids", "prompt_logprobs",
        // vLLM's prefix-cache isolation
        "cache_salt",
        // structured outputs: OpenAI's response_format, vLLM's structured_outputs and its older guided_* names
        "response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar"};
    static const std::set<std::string> kCompletion = {"prompt", "echo", "suffix", "best_of"};
    static const std::set<std::string> kChat = {
        "messages",    "max_completion_tokens", "top_logprobs",         "tools",
        "tool_choice", "add_generation_prompt", "chat_template_kwargs", "parallel_tool_calls"};
    return kCommon.count(name) || (kind == endpoint_kind::completion ? kCompletion : kChat).count(name);
}

void refuse_unknown_fields(const ojson& body, endpoint_kind kind) {
    for (const auto& [name, value] : body.items()) {
        if (!known_field(name, kind))
            bad("'" + name + "' is not supported by this server" +
                    (kind == endpoint_kind::completion ? " on /v1/completions" : " on /v1/chat/completions"),
                name);
    }
}

/// Refuses the keys of object `obj` (named `where`) outside `allowed`, naming the first.
void refuse_unknown_keys(const ojson& obj, const std::set<std::string>& allowed, const std::string& where) {
    for (const auto& [key, value] : obj.items())
        if (!allowed.count(key)) bad("'" + where + "." + key + "' is not supported by this server", where);
}

/// A JSON Schema given as an object (or, in vLLM's fields, as its JSON text): its compact text.
std::string schema_text(const ojson& v, const std::string& where) {
    if (v.is_object()) return v.dump();
    if (v.is_string()) {
        ojson parsed;
        try {
            parsed = ojson::parse(v.get<std::string>());
        } catch (const ojson::exception& e) {
            bad("'" + where + "' is not valid JSON: " + e.what(), where);
        }
        if (!parsed.is_object()) bad("'" + where + "' must be a JSON Schema object", where);
        return parsed.dump();
    }
    bad("'" + where + "' must be a JSON Schema object", where);
}

std::string string_value(const ojson& v, const std::string& where) {
    if (!v.is_string() || v.get<std::string>().empty()) bad("'" + where + "' must be a non-empty string", where);
    return v.get<std::string>();
}

std::string choice_text(const ojson& v, const std::string& where) {
    if (!v.is_array() || v.empty()) bad("'" + where + "' must be a non-empty list of strings", where);
    for (const auto& c : v)
        if (!c.is_string()) bad("'" + where + "' must be a non-empty list of strings", where);
    return v.dump();
}

/// OpenAI's response_format: text, json_object, or json_schema {name, schema, strict, description}.
structured_output parse_response_format(const ojson& f) {
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
        bad("'response_format' must be an object with a 'type'", "response_format");
    const std::string type = f["type"].get<std::string>();
    if (type == "text") {
        refuse_unknown_keys(f, {"type"}, "response_format");
        return {};
    }
    if (type == "json_object") {
        refuse_unknown_keys(f, {"type"}, "response_format");
        return {structured_kind::json_object, ""};
    }
    if (type != "json_schema")
        bad("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"" + type + "\"",
            "response_format");
    refuse_unknown_keys(f, {"type", "json_schema"}, "response_format");
    const ojson* js = field(f, "json_schema");
    if (!js || !js->is_object()) bad("'response_format.json_schema' must be an object", "response_format");
    refuse_unknown_keys(*js, {"name", "schema", "strict", "description"}, "response_format.json_schema");
    if (const ojson* n = field(*js, "name"); n && !n->is_string())
        bad("'response_format.json_schema.name' must be a string", "response_format");
    // strict: true or false alike, objects without additionalProperties are closed (as xgrammar's strict mode does):
    // the output is a subset of what the schema allows either way (docs/structured_outputs.md).
    if (const ojson* s = field(*js, "strict"); s && !s->is_boolean())
        bad("'response_format.json_schema.strict' must be a boolean", "response_format");
    const ojson* schema = field(*js, "schema");
    // OpenAI's SDKs may leave the schema out: any JSON object then, as vLLM does.
    if (!schema) return {structured_kind::json_object, ""};
    return {structured_kind::json_schema, schema_text(*schema, "response_format.json_schema.schema")};
}

/// vLLM's structured_outputs {json, regex, choice, grammar, json_object}: exactly one of them.
structured_output parse_vllm_structured(const ojson& so) {
    if (!so.is_object()) bad("'structured_outputs' must be an object", "structured_outputs");
    refuse_unknown_keys(so, {"json", "regex", "choice", "grammar", "json_object"}, "structured_outputs");
    std::vector<structured_output> found;
    if (const ojson* v = field(so, "json"))
        found.push_back({structured_kind::json_schema, schema_text(*v, "structured_outputs.json")});
    if (const ojson* v = field(so, "regex"))
        found.push_back({structured_kind::regex, string_value(*v, "structured_outputs.regex")});
    if (const ojson* v = field(so, "choice"))
        found.push_back({structured_kind::choice, choice_text(*v, "structured_outputs.choice")});
    if (const ojson* v = field(so, "grammar"))
        found.push_back({structured_kind::grammar, string_value(*v, "structured_outputs.grammar")});
    if (const ojson* v = field(so, "json_object")) {
        if (!v->is_boolean()) bad("'structured_outputs.json_object' must be a boolean", "structured_outputs");
        if (v->get<bool>()) found.push_back({structured_kind::json_object, ""});
    }
    if (found.size() != 1)
        bad("'structured_outputs' must give exactly one of json, regex, choice, grammar, json_object",
            "structured_outputs");
    return found[0];
}

/// The request's structured-output constraint from whichever one field gives it (two are refused).
structured_output parse_structured(const ojson& body) {
    std::vector<std::pair<std::string, structured_output>> found;
    if (const ojson* f = field(body, "response_format")) {
        structured_output s = parse_response_format(*f);
        if (s.active()) found.emplace_back("response_format", std::move(s));
    }
    if (const ojson* f = field(body, "structured_outputs"))
        found.emplace_back("structured_outputs", parse_vllm_structured(*f));
    if (const ojson* v = field(body, "guided_json"))
        found.emplace_back("guided_json",
                           structured_output{structured_kind::json_schema, schema_text(*v, "guided_json")});
    if (const ojson* v = field(body, "guided_regex"))
        found.emplace_back("guided_regex", structured_output{structured_kind::regex, string_value(*v, "guided_regex")});
    if (const ojson* v = field(body, "guided_choice"))
        found.emplace_back("guided_choice",
                           structured_output{structured_kind::choice, choice_text(*v, "guided_choice")});
    if (const ojson* v = field(body, "guided_grammar"))
        found.emplace_back("guided_grammar",
                           structured_output{structured_kind::grammar, string_value(*v, "guided_grammar")});
    if (found.empty()) return {};
    if (found.size() > 1)
        bad("'" + found[0].first + "' and '" + found[1].first + "' both constrain the output: give one",
            found[1].first);
    return std::move(found[0].second);
}

/// `tools`: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}], each field
/// checked and anything else refused by name.
void check_tools(const ojson& tools) {
    if (!tools.is_array()) bad("'tools' must be a list", "tools");
    std::set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string at = "tools[" + std::to_string(i) + "]";
        const ojson& t = tools[i];
        if (!t.is_object()) bad("'" + at + "' must be an object", at);
        for (const auto& [key, v] : t.items())
            if (key != "type" && key != "function") bad("'" + at + "." + key + "' is not supported", at + "." + key);
        if (!t.contains("type") || t["type"] != "function") bad("'" + at + ".type' must be \"function\"", at + ".type");
        const ojson* f = field(t, "function");
        if (!f || !f->is_object()) bad("'" + at + ".function' must be an object", at + ".function");
        for (const auto& [key, v] : f->items()) {
            const std::string path = at + ".function." + key;
            if (key == "name") {
                if (!v.is_string() || v.get<std::string>().empty())
                    bad("'" + path + "' must be a non-empty string", path);
                if (!names.insert(v.get<std::string>()).second)
                    bad("'" + path + "': two tools named '" + v.get<std::string>() + "'", path);
            } else if (key == "description") {
                if (!v.is_string() && !v.is_null()) bad("'" + path + "' must be a string", path);
            } else if (key == "parameters") {
                if (!v.is_object() && !v.is_null()) bad("'" + path + "' must be a JSON Schema object", path);
            } else if (key == "strict") {
                if (!v.is_boolean() && !v.is_null()) bad("'" + path + "' must be a boolean", path);
            } else {
                bad("'" + path + "' is not supported", path);
            }
        }
        if (!f->contains("name")) bad("'" + at + ".function.name' is required", at + ".function.name");
    }
}

/// tools, tool_choice and parallel_tool_calls into the request (OpenAI's defaults and refusals).
void parse_tool_fields(const ojson& body, openai_request& r) {
    const ojson* tools = field(body, "tools");
    if (tools) {
        check_tools(*tools);
        if (!tools->empty()) r.tools = *tools;
    }
    r.parallel_tool_calls = bool_field(body, "parallel_tool_calls", true);
    const bool has_tools = !r.tools.is_null();
    r.tool_choice = has_tools ? tool_choice_mode::automatic : tool_choice_mode::none;
    const ojson* c = field(body, "tool_choice");
    if (!c) return;
    if (c->is_string()) {
        const std::string v = c->get<std::string>();
        if (v == "none")
            r.tool_choice = tool_choice_mode::none;
        else if (v == "auto")
            r.tool_choice = tool_choice_mode::automatic;
        else if (v == "required")
            r.tool_choice = tool_choice_mode::required;
        else
            bad("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
                "{\"name\": ...}}",
                "tool_choice");
    } else if (c->is_object()) {
        const ojson* f = field(*c, "function");
        const ojson* name = f && f->is_object() ? field(*f, "name") : nullptr;
        if (!c->contains("type") || (*c)["type"] != "function" || !name || !name->is_string())
            bad("'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                "tool_choice");
        r.tool_choice = tool_choice_mode::named;
        r.tool_choice_name = name->get<std::string>();
    } else {
        bad("'tool_choice' must be a string or an object", "tool_choice");
    }
    if (r.tool_choice != tool_choice_mode::none && !has_tools)
        bad("'tool_choice' other than \"none\" needs 'tools'", "tool_choice");
    if (r.tool_choice == tool_choice_mode::named) {
        bool found = false;
        for (const ojson& t : r.tools) found = found || t["function"]["name"] == r.tool_choice_name;
        if (!found) bad("'tool_choice' names '" + r.tool_choice_name + "', which is not among 'tools'", "tool_choice");
    }
}

}  // namespace

openai_request parse_openai_request(const std::string& text, endpoint_kind kind) {
    const ojson body = parse_body(text);
    refuse_unknown_fields(body, kind);
    openai_request r;
    r.kind = kind;
    client_generate& g = r.generate;
    if (const ojson* m = field(body, "model")) {
        if (!m->is_string()) bad("'model' must be a string", "model");
        r.model = m->get<std::string>();
    }
    if (kind == endpoint_kind::completion) {
        const ojson* p = field(body, "prompt");
        if (!p) bad("'prompt' is required", "prompt");
        if (p->is_string()) {
            g.prompt = p->get<std::string>();
        } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
            g.prompt = (*p)[0].get<std::string>();
        } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
            std::vector<int32_t> ids;
            for (const auto& t : *p) {
                if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
                    bad("'prompt' token ids must be non-negative integers", "prompt");
                ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
            }
            g.prompt = std::move(ids);
        } else if (p->is_array() && !p->empty() && (*p)[0].is_array()) {
            bad("batched prompts are not supported: send one request per prompt", "prompt");
        } else {
            bad("'prompt' must be a string, a list of one string, or a list of token ids", "prompt");
        }
        if (bool_field(body, "echo", false)) bad("'echo' is not supported", "echo");
        if (field(body, "suffix")) bad("'suffix' is not supported", "suffix");
    } else {
        const ojson* m = field(body, "messages");
        if (!m) bad("'messages' must be a non-empty list", "messages");
        g.prompt = std::string();
        g.chat = chat_json(body, *m);
        parse_tool_fields(body, r);
        if (const ojson* k = field(body, "chat_template_kwargs"))
            if (const ojson* t = field(*k, "enable_thinking"); t && t->is_boolean()) r.enable_thinking = t->get<bool>();
    }
    int64_t max_tokens = int_field(body, "max_tokens", 1, 1 << 24, kind == endpoint_kind::completion ? 16 : 0);
    max_tokens = int_field(body, "max_completion_tokens", 1, 1 << 24, max_tokens);
    // Chat without a limit: up to the context; the frontend refuses what does not fit, so pick a large default.
    g.max_tokens = static_cast<uint32_t>(max_tokens > 0 ? max_tokens : 1024);
    // Absent sampling fields stay nil: the frontend applies the model's generation_config.json defaults.
    if (field(body, "temperature"))
        g.temperature = static_cast<float>(number_field(body, "temperature", 0.0, 2.0, 1.0));
    if (field(body, "top_p")) {
        const double top_p = number_field(body, "top_p", 0.0, 1.0, 1.0);
        if (top_p <= 0.0) bad("'top_p' must be in (0, 1]", "top_p");
        g.top_p = static_cast<float>(top_p);
    }
    if (field(body, "top_k")) g.top_k = static_cast<int32_t>(int_field(body, "top_k", -1, 1 << 30, 0));
    if (const ojson* s = field(body, "seed")) {
        if (!s->is_number_integer()) bad("'seed' must be an integer", "seed");
        g.seed = static_cast<uint64_t>(s->get<int64_t>());
    }
    if (const ojson* s = field(body, "stop")) {
        if (s->is_string()) {
            g.stop = {s->get<std::string>()};
        } else if (s->is_array()) {
            for (const auto& e : *s) {
                if (!e.is_string() || e.get<std::string>().empty())
                    bad("'stop' entries must be non-empty strings", "stop");
                g.stop.push_back(e.get<std::string>());
            }
            if (g.stop.size() > kMaxStopStrings) bad("too many 'stop' strings", "stop");
        } else {
            bad("'stop' must be a string or a list of strings", "stop");
        }
    }
    g.ignore_eos = bool_field(body, "ignore_eos", false);
    if (const ojson* s = field(body, "cache_salt")) {
        if (!s->is_string() || s->get<std::string>().empty() || s->get<std::string>().size() > kMaxNameBytes)
            bad("'cache_salt' must be a non-empty string of at most " + std::to_string(kMaxNameBytes) + " bytes",
                "cache_salt");
        g.cache_salt = s->get<std::string>();
    }
    g.structured = parse_structured(body);
    if ((r.tool_choice == tool_choice_mode::required || r.tool_choice == tool_choice_mode::named) &&
        g.structured.active())
        bad("'tool_choice' and a structured-output field both constrain the output: give one", "tool_choice");
    // vLLM's prompt_logprobs (and echo, which needs them) are not served yet: refused rather than ignored.
    if (field(body, "prompt_logprobs")) bad("'prompt_logprobs' is not supported", "prompt_logprobs");
    // vLLM's sampling extras and OpenAI's penalties, logit bias and logprobs. The frontend checks them again
    // (vocabulary bounds included), so a bad value is refused whichever client sends it.
    g.presence_penalty = static_cast<float>(number_field(body, "presence_penalty", -2.0, 2.0, 0.0));
    g.frequency_penalty = static_cast<float>(number_field(body, "frequency_penalty", -2.0, 2.0, 0.0));
    if (field(body, "repetition_penalty")) {
        const double v = number_field(body, "repetition_penalty", 0.0, 1e6, 1.0);
        if (v <= 0.0) bad("'repetition_penalty' must be > 0", "repetition_penalty");
        g.repetition_penalty = static_cast<float>(v);
    }
    if (field(body, "min_p")) g.min_p = static_cast<float>(number_field(body, "min_p", 0.0, 1.0, 0.0));
    g.min_tokens = static_cast<uint32_t>(int_field(body, "min_tokens", 0, 1 << 24, 0));
    if (g.min_tokens > g.max_tokens) bad("'min_tokens' must be at most max_tokens", "min_tokens");
    if (const ojson* ids = field(body, "stop_token_ids")) {
        if (!ids->is_array() || ids->size() > kMaxStopTokenIds)
            bad("'stop_token_ids' must be a list of at most " + std::to_string(kMaxStopTokenIds) + " token ids",
                "stop_token_ids");
        for (const auto& t : *ids) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
                bad("'stop_token_ids' entries must be non-negative integers", "stop_token_ids");
            g.stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
        }
    }
    if (const ojson* lb = field(body, "logit_bias")) {
        if (!lb->is_object() || lb->size() > kMaxLogitBias)
            bad("'logit_bias' must be an object of token id -> bias", "logit_bias");
        for (const auto& [key, v] : lb->items()) {
            int64_t id = -1;
            try {
                size_t used = 0;
                id = std::stoll(key, &used);
                if (used != key.size()) id = -1;
            } catch (const std::exception&) {
                id = -1;
            }
            if (id < 0 || id > INT32_MAX) bad("'logit_bias' keys must be token ids, got '" + key + "'", "logit_bias");
            if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < -100.0 ||
                v.get<double>() > 100.0)
                bad("'logit_bias' values must be numbers in [-100, 100]", "logit_bias");
            g.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(v.get<double>()));
        }
    }
    if (kind == endpoint_kind::completion) {
        if (field(body, "logprobs")) {
            g.logprobs = static_cast<uint32_t>(int_field(body, "logprobs", 0, kMaxTopLogprobs, 0));
            r.logprobs = true;
        }
    } else {
        r.logprobs = bool_field(body, "logprobs", false);
        const int64_t top = int_field(body, "top_logprobs", 0, kMaxTopLogprobs, 0);
        if (field(body, "top_logprobs") && !r.logprobs) bad("'top_logprobs' needs 'logprobs': true", "top_logprobs");
        if (r.logprobs) g.logprobs = static_cast<uint32_t>(top);
    }
    // n choices: the protocol's n (the frontend runs n sequences, the i-th seeded seed + i).
    g.n = static_cast<uint32_t>(int_field(body, "n", 1, kMaxChoices, 1));
    if (kind == endpoint_kind::completion && field(body, "best_of") &&
        int_field(body, "best_of", 1, kMaxChoices, 1) != g.n)
        bad("'best_of' must equal n", "best_of");
    r.stream = bool_field(body, "stream", false);
    g.stream = r.stream;
    if (const ojson* so = field(body, "stream_options")) {
        if (!so->is_object()) bad("'stream_options' must be an object", "stream_options");
        if (!r.stream) bad("'stream_options' is only allowed with stream = true", "stream_options");
        r.include_usage = bool_field(*so, "include_usage", false);
    }
    return r;
}

ojson finish_reason_json(finish_reason r, bool finished, bool tool_called) {
    if (!finished) return nullptr;
    switch (r) {
        case finish_reason::length:
            return "length";
        case finish_reason::stop:
            return tool_called ? "tool_calls" : "stop";
        case finish_reason::abort:
            return "abort";
        default:
            return tool_called ? "tool_calls" : "stop";
    }
}

void constrain_tool_choice(openai_request& r, tool_calls::tool_call_format format,
                           std::optional<tool_calls::reasoning_format> reasoning) {
    if (r.tool_choice != tool_choice_mode::required && r.tool_choice != tool_choice_mode::named) return;
    try {
        r.generate.structured = {
            structured_kind::grammar,
            tool_calls::tool_call_ebnf(
                {.format = format,
                 .tools = r.tools,
                 .only_function = r.tool_choice == tool_choice_mode::named ? r.tool_choice_name : std::string(),
                 .parallel = r.parallel_tool_calls && r.tool_choice == tool_choice_mode::required,
                 .reasoning = reasoning})};
    } catch (const zmoe::error& e) {
        bad(std::string("'tools' cannot constrain tool_choice: ") + e.what(), "tools");
    }
}

ojson parsed_message(const tool_calls::parsed_output& p, bool with_reasoning) {
    ojson m = {{"role", "assistant"}, {"content", p.content.empty() && !p.calls.empty() ? ojson() : ojson(p.content)}};
    if (with_reasoning) {
        const ojson r = p.reasoning.empty() ? ojson() : ojson(p.reasoning);
        m["reasoning_content"] = r;
        m["reasoning"] = r;
    }
    if (!p.calls.empty()) {
        ojson calls = ojson::array();
        for (const tool_calls::tool_call& c : p.calls)
            calls.push_back(
                {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        m["tool_calls"] = calls;
    }
    return m;
}

std::vector<ojson> parsed_deltas(const std::vector<tool_calls::parse_event>& events) {
    std::vector<ojson> out;
    for (const tool_calls::parse_event& e : events) {
        switch (e.kind) {
            case tool_calls::event_kind::content:
                out.push_back({{"content", e.text}});
                break;
            case tool_calls::event_kind::reasoning:
                out.push_back({{"reasoning_content", e.text}, {"reasoning", e.text}});
                break;
            case tool_calls::event_kind::call_start:
                out.push_back({{"tool_calls", ojson::array({{{"index", e.call_index},
                                                             {"id", e.id},
                                                             {"type", "function"},
                                                             {"function", {{"name", e.text}, {"arguments", ""}}}}})}});
                break;
            case tool_calls::event_kind::call_arguments:
                out.push_back(
                    {{"tool_calls", ojson::array({{{"index", e.call_index}, {"function", {{"arguments", e.text}}}}})}});
                break;
        }
    }
    return out;
}

namespace {
ojson usage(uint32_t prompt_tokens, uint32_t completion_tokens, uint32_t cached_tokens) {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}
}  // namespace

ojson logprobs_json(endpoint_kind kind, const std::vector<int32_t>& ids, const std::vector<token_logprobs>& lps,
                    const std::function<std::string(int32_t)>& piece, size_t text_offset) {
    auto bytes_of = [](const std::string& t) {
        ojson b = ojson::array();
        for (unsigned char c : t) b.push_back(static_cast<int>(c));
        return b;
    };
    // A logprob of -inf (a token with no probability) is not JSON: OpenAI-style clients read -9999.0.
    auto finite = [](float v) { return std::isfinite(v) ? static_cast<double>(v) : -9999.0; };
    if (kind == endpoint_kind::chat) {
        ojson content = ojson::array();
        for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
            const std::string t = piece(ids[i]);
            ojson top = ojson::array();
            for (size_t j = 0; j < lps[i].top_ids.size(); ++j) {
                const std::string tt = piece(lps[i].top_ids[j]);
                top.push_back({{"token", tt}, {"logprob", finite(lps[i].top_logprobs[j])}, {"bytes", bytes_of(tt)}});
            }
            content.push_back(
                {{"token", t}, {"logprob", finite(lps[i].logprob)}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
        }
        return {{"content", content}};
    }
    ojson tokens = ojson::array(), token_logprobs = ojson::array(), top = ojson::array(), offsets = ojson::array();
    size_t at = text_offset;
    for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
        const std::string t = piece(ids[i]);
        tokens.push_back(t);
        token_logprobs.push_back(finite(lps[i].logprob));
        ojson alts = ojson::object();
        for (size_t j = 0; j < lps[i].top_ids.size(); ++j)
            alts[piece(lps[i].top_ids[j])] = finite(lps[i].top_logprobs[j]);
        top.push_back(alts);
        offsets.push_back(at);
        at += t.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

ojson response_object(const openai_request& req, const std::string& id, int64_t created,
                      const std::vector<choice_output>& choices, uint32_t prompt_tokens, uint32_t completion_tokens,
                      uint32_t cached_tokens) {
    ojson list = ojson::array();
    for (const choice_output& c : choices) {
        if (req.kind == endpoint_kind::chat) {
            list.push_back(
                {{"index", c.index},
                 {"message", c.parsed.is_null() ? ojson{{"role", "assistant"}, {"content", c.text}} : c.parsed},
                 {"logprobs", c.logprobs},
                 {"finish_reason", finish_reason_json(c.reason, true, c.tool_called)}});
        } else {
            list.push_back({{"index", c.index},
                            {"text", c.text},
                            {"logprobs", c.logprobs},
                            {"finish_reason", finish_reason_json(c.reason, true)}});
        }
    }
    return {{"id", id},           {"object", req.kind == endpoint_kind::chat ? "chat.completion" : "text_completion"},
            {"created", created}, {"model", req.model},
            {"choices", list},    {"usage", usage(prompt_tokens, completion_tokens, cached_tokens)}};
}

ojson chunk_object(const openai_request& req, const std::string& id, int64_t created, const choice_output& c,
                   bool first, bool finished) {
    ojson choice;
    if (req.kind == endpoint_kind::chat) {
        ojson delta = ojson::object();
        if (first) delta["role"] = "assistant";
        if (!c.parsed.is_null())
            delta.update(c.parsed);
        else if (!c.text.empty() || !finished)
            delta["content"] = c.text;
        choice = {{"index", c.index},
                  {"delta", delta},
                  {"logprobs", c.logprobs},
                  {"finish_reason", finish_reason_json(c.reason, finished, c.tool_called)}};
    } else {
        choice = {{"index", c.index},
                  {"text", c.text},
                  {"logprobs", c.logprobs},
                  {"finish_reason", finish_reason_json(c.reason, finished)}};
    }
    return {{"id", id},
            {"object", req.kind == endpoint_kind::chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", req.model},
            {"choices", ojson::array({choice})}};
}

ojson usage_chunk(const openai_request& req, const std::string& id, int64_t created, uint32_t prompt_tokens,
                  uint32_t completion_tokens, uint32_t cached_tokens) {
    return {{"id", id},
            {"object", req.kind == endpoint_kind::chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", req.model},
            {"choices", ojson::array()},
            {"usage", usage(prompt_tokens, completion_tokens, cached_tokens)}};
}

client_tokenize parse_tokenize_request(const std::string& text) {
    const ojson body = parse_body(text);
    client_tokenize t;
    t.add_special_tokens = bool_field(body, "add_special_tokens", true);
    const ojson* prompt = field(body, "prompt");
    const ojson* messages = field(body, "messages");
    if ((prompt != nullptr) == (messages != nullptr)) bad("give either 'prompt' or 'messages'");
    if (prompt) {
        if (!prompt->is_string()) bad("'prompt' must be a string", "prompt");
        t.text = prompt->get<std::string>();
        return t;
    }
    t.chat = chat_json(body, *messages);
    return t;
}

std::vector<int32_t> parse_detokenize_request(const std::string& text) {
    const ojson body = parse_body(text);
    const ojson* tokens = field(body, "tokens");
    if (!tokens || !tokens->is_array()) bad("'tokens' must be a list of token ids", "tokens");
    std::vector<int32_t> ids;
    for (const auto& t : *tokens) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
            bad("'tokens' entries must be non-negative integers", "tokens");
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return ids;
}

std::string sse_event(const ojson& j) {
    return "data: " + j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

}  // namespace zmoe::gateway
